#!/usr/bin/env bash
# bench/q6p-call.sh — session 53's call: mmq6w with its weight planes made
# at load (INFERD_Q6P_MB, cuda/q6planes.cu; the design card's EXP = true)
# against the expanded form (the default), interleaved on the same bytes;
# beside them the pair form (bin: MMQ6P_PAIR=1, two super-blocks a turn).
# In the order of what matters if the call is cut short: the single
# form's bits (prev's cuda-ops with planes: its mm-variant rows), the A/B
# (prev without / with the planes, bin with them; q6_K products and the
# 7B-shaped pp512), the pair form's bits, q7 GPU vs CPU with planes, the
# sanitizers on a 512-row q6_K product with planes, the prewarm list, the
# L2 premise (bench/l2tiles-call.sh).
#   ARGS="-DMMQ6P_PAIR=1" bench/ab-prep.sh
#   cp build-d90/tests/cuda/test_cuda_{ops,model} devcarry/prev/ && strip them && re-tar
# device tool: carry ["devcarry.tgz"], command `bash bench/q6p-call.sh`.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
. bench/call-lib.sh
call_head
timeout 150 $d/prev/test_cuda_ops > $out/ops-prev.log 2>&1
echo "cuda-ops prev, planes (single form) rc=$?"; grep -E "FAIL" $out/ops-prev.log | head -5
grep -cE "mm-variant.*q6_K.*mmq6w<int8 wgmma> planes" $out/ops-prev.log
grep -E "mm-variant.*q6_K.*mmq6w" $out/ops-prev.log | head -4
. tests/cuda/q7.sh
q7_make $out/mk.log
for r in 1 2; do
    for v in "exp0 prev INFERD_Q6P_MB=0" "exp1 prev INFERD_Q6P_MB=8192" "pair bin INFERD_Q6P_MB=8192"; do
        read -r name dir var <<< "$v"
        echo "== $name round $r"
        call_op $dir "$var" q6_K 512,2048 llama3-ffn-down,qwen7b-ffn-up,qwen7b-ffn-down
        call_q7 $dir "$var" 512 16
    done
done
date -u +%T
timeout 150 $d/bin/test_cuda_ops > $out/ops.log 2>&1
echo "cuda-ops bin (pair), planes rc=$?"; grep -E "FAIL" $out/ops.log | head -5
INFERD_Q6P_MB=8192 timeout 120 $d/prev/test_cuda_model q7-gpu-vs-cpu.json > $out/q7.log 2>&1
echo "q7 (prev, planes: the single form) rc=$?"; tail -1 $out/q7.log
for tool in memcheck racecheck synccheck; do
    INFERD_Q6P_MB=8192 timeout 60 compute-sanitizer --tool $tool --error-exitcode 9 $d/prev/inferd bench --op \
        --backend cuda --types q6_K --n 512 --shapes llama3-ffn-down --reps 2 > $out/san-$tool.log 2>&1
    echo "$tool (prev, planes, q6_K 512) rc=$?"
done
INFERD_Q6P_MB=8192 timeout 60 $d/bin/test_cuda > $out/test_cuda.log 2>&1
echo "test_cuda (planes on) rc=$?"; grep -E "planes|FAIL" $out/test_cuda.log | head -4
date -u +%T
timeout 80 bash bench/l2tiles-call.sh > $out/l2tiles.log 2>&1
grep -E "^==|tiles " $out/l2tiles.log | head -40
date -u +%T
