#!/usr/bin/env bash
# bench/table57-call.sh — #11's table on an H200 and nothing else (session
# 57: the final build's bits already ran on an H100 in this session's call
# 1, bench/end56-call.sh). On any other GPU it stops after the GPU's name,
# so a call that gets an H100 costs only its start. On an H200: every type
# at n = 1 / 8 / 512 / 2048 on the 4096 x 14336 weight (two rounds), the
# one-row Q6_K product with mmvt's halves form against INFERD_MMVT_HV=0
# (bench --op and mmq_trace's L2-held proxy), the 7B-shaped model's load +
# prewarm to ready (serve_gpu) and pp512 / tg128, then the one-row floor
# (bench/h200-floor-call.sh: a plain read of the same bytes).
#   BUILD=build-d90 MODELS=stories260K tests/cuda/device-prep.sh
# device tool: carry ["devcarry.tgz"], command `bash bench/table57-call.sh`.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
g=$(nvidia-smi --query-gpu=name --format=csv,noheader)
echo "$g"
case "$g" in *H200*) ;; *) echo "not an H200: nothing run"; exit 0 ;; esac
. bench/call-lib.sh
call_head
for r in 1 2; do
    echo "== round $r"
    call_op bin "" q4_K,q6_K,q5_K,q8_0,q4_0 1,8,512,2048 llama3-ffn-down | cut -d'|' -f2,4,5,10 | tr -s ' '
done 2>&1 | tee $out/table.txt
for r in 1 2; do
    for v in "" "INFERD_MMVT_HV=0"; do
        echo "== [$v] round $r"
        call_op bin "$v" q6_K 1 llama3-ffn-down,qwen7b-ffn-down | cut -d'|' -f3-5
        echo "trace 8192: $(env $v timeout 20 $d/bin/mmq_trace mmvt q6_K 8192 4096 1 2>&1 | head -1 | cut -d: -f2)"
        echo "trace 14336: $(env $v timeout 20 $d/bin/mmq_trace mmvt q6_K 14336 4096 1 2>&1 | head -1 | cut -d: -f2)"
    done
done 2>&1 | tee $out/hv.txt
. tests/cuda/q7.sh
q7_make $out/mk.log
timeout 150 python3 tests/cuda/serve_gpu.py $d/bin/inferd /tmp/q7.gguf > $out/serve.log 2>&1
echo "serve_gpu rc=$?"; grep -E "ready after|resident|FAIL" $out/serve.log | head -3 | cut -c1-220
for r in 1 2; do echo "q7: $(call_q7 bin "" 512 128 | tr -s ' ' | tr '\n' ' ')"; done
date -u +%T
bash bench/h200-floor-call.sh 2>&1 | tail -30
