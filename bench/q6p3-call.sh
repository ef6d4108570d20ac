#!/usr/bin/env bash
# bench/q6p3-call.sh — session 53's third call: mmq6w's planes on by
# default (config q6_planes_percent = 5) on whatever GPU comes (an H200 for
# #11's table): the bits (cuda-ops), #11's q4_K / q6_K rows (bench --op
# llama3-ffn-down, n = 1 / 8 / 512 / 2048) with the default and with the
# planes off (INFERD_Q6P_MB=0), q6_K at 128 / 256 rows on the three shapes
# with the planes from 128 rows (INFERD_Q6P_MIN=128) against off (the
# default reads them from 512 rows: below, unmeasured), the 7B-shaped
# model's pp512 / pp2048, and load + prewarm to ready (serve_gpu.py).
#   BUILD=build-d90 MODELS=stories260K tests/cuda/device-prep.sh
# device tool: carry ["devcarry.tgz"], command `bash bench/q6p3-call.sh`.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
. bench/call-lib.sh
call_head
timeout 150 $d/bin/test_cuda_ops > $out/ops.log 2>&1
echo "cuda-ops rc=$?"; grep -E "FAIL" $out/ops.log | head -5
. tests/cuda/q7.sh
q7_make $out/mk.log
for r in 1 2; do
    for v in "default INFERD_NOTHING=1" "off INFERD_Q6P_MB=0" "min128 INFERD_Q6P_MIN=128"; do
        read -r name var <<< "$v"
        echo "== $name round $r"
        [ $name = min128 ] || call_op bin "$var" q4_K,q6_K 1,8,512,2048 llama3-ffn-down
        [ $name = default ] || call_op bin "$var" q6_K 128,256 llama3-ffn-down,qwen7b-ffn-up,qwen7b-ffn-down
        [ $name = min128 ] || call_q7 bin "$var" 512,2048 16
    done
done
date -u +%T
timeout 150 python3 tests/cuda/serve_gpu.py $d/bin/inferd /tmp/q7.gguf > $out/serve.log 2>&1
echo "serve_gpu rc=$?"; grep -E "ready after|planes|expanded|FAIL" $out/serve.log | head -5
date -u +%T
