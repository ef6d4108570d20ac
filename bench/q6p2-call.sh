#!/usr/bin/env bash
# bench/q6p2-call.sh — session 53's second call: mmq6w<true> with the
# activation blocks along the grid's x (the blocks sharing a weight tile
# together) against the expanded form, one binary (prev: this tree),
# interleaved, and beside them the lever build (bin: -DWGRS_LEVER=1, the
# feed's copies stop once the rings are full: stale data, timing only)
# with planes, which says what the planes' feed costs; the bits (prev's
# cuda-ops with planes, q7 GPU vs CPU with planes, memcheck and racecheck
# of the 7B ffn-up at 512 rows: 4.5 waves, the new raster), the prewarm
# list (test_cuda).
#   KERNELS=mmq6w ARGS="-DWGRS_LEVER=1" bench/ab-prep.sh
#   cp build-d90/tests/cuda/test_cuda{,_ops,_model} devcarry/prev/, strip, re-tar
# device tool: carry ["devcarry.tgz"], command `bash bench/q6p2-call.sh`.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
. bench/call-lib.sh
call_head
timeout 150 $d/prev/test_cuda_ops > $out/ops.log 2>&1
echo "cuda-ops, planes rc=$?"; grep -E "FAIL" $out/ops.log | head -5
grep -cE "mm-variant.*q6_K.*mmq6w<int8 wgmma> exp" $out/ops.log
. tests/cuda/q7.sh
q7_make $out/mk.log
for r in 1 2; do
    for v in "exp0 prev INFERD_Q6P_MB=0" "exp1 prev INFERD_Q6P_MB=8192" "lever bin INFERD_Q6P_MB=8192"; do
        read -r name dir var <<< "$v"
        echo "== $name round $r"
        call_op $dir "$var" q6_K 512,2048 llama3-ffn-down,qwen7b-ffn-up,qwen7b-ffn-down
        [ $name = lever ] || call_q7 $dir "$var" 512,2048 16
    done
done
date -u +%T
INFERD_Q6P_MB=8192 timeout 120 $d/prev/test_cuda_model q7-gpu-vs-cpu.json > $out/q7.log 2>&1
echo "q7 (planes) rc=$?"; tail -1 $out/q7.log
for tool in memcheck racecheck; do
    INFERD_Q6P_MB=8192 timeout 60 compute-sanitizer --tool $tool --error-exitcode 9 $d/prev/inferd bench --op \
        --backend cuda --types q6_K --n 512 --shapes qwen7b-ffn-up --reps 2 > $out/san-$tool.log 2>&1
    echo "$tool (planes, q6_K qwen7b-ffn-up 512) rc=$?"
done
INFERD_Q6P_MB=8192 timeout 60 $d/prev/test_cuda > $out/test_cuda.log 2>&1
echo "test_cuda (planes on) rc=$?"; grep -E "check failed|exp" $out/test_cuda.log | head -4
date -u +%T
