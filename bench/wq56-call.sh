#!/usr/bin/env bash
# bench/wq56-call.sh — session 56: mmvt's Q6_K row quantized once at the
# block's start (INFERD_MMVT_WQ) and its lanes as 8 rows x 4 columns a
# warp (INFERD_MMVT_OM), A/B in one binary against both off (the build
# before): bits (cuda-ops, the 7B-shaped gate, sanitizers of the one-row
# products), mmq_trace on the L2-held proxy and #11's shape, bench --op.
#   BUILD=build-d90 MODELS=stories260K tests/cuda/device-prep.sh
# device tool: carry ["devcarry.tgz"], command `bash bench/wq56-call.sh`.
# (The record of session 56's call 2: the whole-row form and its knob
# INFERD_MMVT_WQ were removed after it, bench/RESULTS.md.)
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
. bench/call-lib.sh
call_head
vs=("INFERD_MMVT_WQ=0 INFERD_MMVT_OM=0" "INFERD_MMVT_WQ=1 INFERD_MMVT_OM=0" "INFERD_MMVT_WQ=0 INFERD_MMVT_OM=1" "INFERD_MMVT_WQ=1 INFERD_MMVT_OM=1")
for r in 1 2; do
    for v in "${vs[@]}"; do
        for s in 8192 14336; do
            echo "[$v] $(env $v timeout 30 $d/bin/mmq_trace mmvt q6_K $s 4096 1 2>&1 | head -1)"
        done
        echo "[$v FQ=0] $(env $v INFERD_MMVT_FQ=0 timeout 30 $d/bin/mmq_trace mmvt q6_K 18944 3584 1 2>&1 | head -1)"
    done
done
env INFERD_MMVT_WQ=1 INFERD_MMVT_OM=1 timeout 30 $d/bin/mmq_trace mmvt q6_K 8192 4096 1 > $out/marks-wq-om.txt 2>&1
sed -n 2,9p $out/marks-wq-om.txt | cut -c1-170
env INFERD_MMVT_WQ=1 INFERD_MMVT_OM=0 timeout 30 $d/bin/mmq_trace mmvt q6_K 8192 4096 1 > $out/marks-wq.txt 2>&1
sed -n 5,9p $out/marks-wq.txt | cut -c1-170
date -u +%T
for r in 1 2; do
    for v in "${vs[@]}"; do
        echo "== [$v] round $r"
        call_op bin "$v" q6_K 1 llama3-ffn-down,qwen7b-ffn-down,qwen7b-attn-kv,qwen7b-ffn-up | cut -d'|' -f3-5
    done
done
date -u +%T
timeout 170 $d/bin/test_cuda_ops > $out/ops.log 2>&1
echo "cuda-ops rc=$? $(tail -1 $out/ops.log)"; grep -E "FAIL" $out/ops.log | head -5
. tests/cuda/q7.sh
q7_make $out/mk.log
timeout 150 $d/bin/test_cuda_model q7-gpu-vs-cpu.json > $out/q7.log 2>&1
echo "q7 rc=$?"; tail -1 $out/q7.log | cut -c1-160
for tool in memcheck racecheck synccheck; do
    timeout 90 compute-sanitizer --tool $tool --error-exitcode 9 $d/bin/inferd bench --op --backend cuda \
        --types q6_K --n 1 --shapes llama3-ffn-down,qwen7b-attn-kv,qwen7b-ffn-down --reps 2 > $out/san-$tool.log 2>&1
    echo "$tool rc=$?"
done
for r in 1 2; do
    for v in "INFERD_MMVT_WQ=0 INFERD_MMVT_OM=0" "INFERD_MMVT_WQ=1 INFERD_MMVT_OM=1"; do
        echo "q7 [$v]: $(call_q7 bin "$v" 16 128 | tr -s ' ' | tr '\n' ' ')"
    done
done
date -u +%T
