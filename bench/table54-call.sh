#!/usr/bin/env bash
# bench/table54-call.sh — session 54's last call: main's final build at its
# defaults: the bits (cuda-ops, the 7B-shaped GPU-vs-CPU gate, memcheck of
# the q6_K 512-row product, test_cuda's prewarm list), #11's table (bench
# --op, every type at n = 1 / 8 / 512 / 2048 on the 4096 x 14336 weight, two
# rounds), serve_gpu's ready time, and on an H200 the one-row floor.
#   BUILD=build-d90 MODELS=stories260K tests/cuda/device-prep.sh
# device tool: carry ["devcarry.tgz"], command `bash bench/table54-call.sh`.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
. bench/call-lib.sh
call_head
timeout 150 $d/bin/test_cuda_ops > $out/ops.log 2>&1
echo "cuda-ops rc=$? $(tail -1 $out/ops.log)"
. tests/cuda/q7.sh
q7_make $out/mk.log
timeout 150 $d/bin/test_cuda_model q7-gpu-vs-cpu.json > $out/q7.log 2>&1
echo "q7 rc=$?"; tail -1 $out/q7.log | cut -c1-160
timeout 120 $d/bin/test_cuda > $out/test_cuda.log 2>&1
echo "test_cuda rc=$?"
timeout 90 compute-sanitizer --tool memcheck --error-exitcode 9 $d/bin/inferd bench --op --backend cuda \
    --types q6_K --n 512 --shapes llama3-ffn-down --reps 2 > $out/san-memcheck.log 2>&1
echo "memcheck (q6_K 512) rc=$?"
for r in 1 2; do
    echo "== round $r"
    call_op bin "" q4_K,q6_K,q5_K,q8_0,q4_0 1,8,512,2048 llama3-ffn-down | cut -d'|' -f2,4,5,10 | tr -s ' '
done 2>&1 | tee $out/table.txt
timeout 150 python3 tests/cuda/serve_gpu.py $d/bin/inferd /tmp/q7.gguf > $out/serve.log 2>&1
echo "serve_gpu rc=$?"; grep -E "ready after|resident|FAIL" $out/serve.log | head -3 | cut -c1-220
date -u +%T
bash bench/h200-floor-call.sh
date -u +%T
