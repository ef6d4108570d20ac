#!/usr/bin/env bash
# bench/table55-call.sh — session 55's last call: main's final build at its
# defaults (mmq4p from the Q4_K planes, mmq6w<true> in turns): the bits
# (cuda-ops at the defaults and with INFERD_Q4P=0, the 7B-shaped
# GPU-vs-CPU gate, test_cuda's prewarm list, memcheck of the q4_K / q6_K
# 512-row products); #11's table (bench --op, every type at n = 1 / 8 / 512 /
# 2048 on the 4096 x 14336 weight, two rounds); q4_K at 128 / 256 rows with
# the planes from 128 (INFERD_Q6P_MIN=128) against the default; the
# 7B-shaped model's pp512 / tg128 with and without the Q4_K planes;
# serve_gpu's ready time; on an H200 session 54's table and the floor too.
#   BUILD=build-d90 MODELS=stories260K tests/cuda/device-prep.sh
# device tool: carry ["devcarry.tgz"], command `bash bench/table55-call.sh`.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
. bench/call-lib.sh
call_head
timeout 170 $d/bin/test_cuda_ops > $out/ops.log 2>&1
echo "cuda-ops rc=$? $(tail -1 $out/ops.log)"; grep -E "FAIL" $out/ops.log | head -5
INFERD_Q4P=0 timeout 170 $d/bin/test_cuda_ops > $out/ops-noq4p.log 2>&1
echo "cuda-ops Q4P=0 rc=$? $(tail -1 $out/ops-noq4p.log)"; grep -E "FAIL" $out/ops-noq4p.log | head -5
. tests/cuda/q7.sh
q7_make $out/mk.log
timeout 150 $d/bin/test_cuda_model q7-gpu-vs-cpu.json > $out/q7.log 2>&1
echo "q7 rc=$?"; tail -1 $out/q7.log | cut -c1-160
timeout 120 $d/bin/test_cuda > $out/test_cuda.log 2>&1
echo "test_cuda rc=$?"; grep -E "mmq4p|FAIL" $out/test_cuda.log | head -4 | cut -c1-160
for ty in q4_K q6_K; do
    timeout 90 compute-sanitizer --tool memcheck --error-exitcode 9 $d/bin/inferd bench --op --backend cuda \
        --types $ty --n 512 --shapes llama3-ffn-down --reps 2 > $out/san-memcheck-$ty.log 2>&1
    echo "memcheck ($ty 512) rc=$?"
done
date -u +%T
for r in 1 2; do
    echo "== round $r"
    call_op bin "" q4_K,q6_K,q5_K,q8_0,q4_0 1,8,512,2048 llama3-ffn-down | cut -d'|' -f2,4,5,10 | tr -s ' '
done 2>&1 | tee $out/table.txt
for r in 1 2; do
    for v in "" "INFERD_Q6P_MIN=128" "INFERD_Q4P=0"; do
        echo "== [$v] round $r"
        call_op bin "$v" q4_K 128,256,512 llama3-ffn-down,qwen7b-ffn-down | cut -d'|' -f3-5
    done
done 2>&1 | tee $out/min.txt
for r in 1 2; do
    for q in 1 0; do
        echo "q7 q4p=$q: $(call_q7 bin "INFERD_Q4P=$q" 512 128 | tr -s ' ' | tr '\n' ' ')"
    done
done
timeout 150 python3 tests/cuda/serve_gpu.py $d/bin/inferd /tmp/q7.gguf > $out/serve.log 2>&1
echo "serve_gpu rc=$?"; grep -E "ready after|resident|FAIL" $out/serve.log | head -3 | cut -c1-220
date -u +%T
g=$(nvidia-smi --query-gpu=name --format=csv,noheader)
case "$g" in *H200*) bash bench/h200-floor-call.sh ;; esac
