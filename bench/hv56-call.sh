#!/usr/bin/env bash
# bench/hv56-call.sh — session 56's lean call (little device time left):
# mmvt's Q6_K forms A/B in one binary (mmq_trace on the L2-held proxy and
# #11's shape; bench --op), then the bits at the defaults (cuda-ops, the
# 7B-shaped gate, memcheck / racecheck of the one-row products) with the
# three on (the candidate default). Knobs (off by default):
# INFERD_MMVT_OM (8 rows x 4 columns a warp), INFERD_MMVT_XT (the floats
# by the feed warp's copies), INFERD_MMVT_HV (the halves form, 16 compute
# warps), INFERD_MMVT_FQ=0 (the quantizer kernel's planes).
# `bash bench/hv56-call.sh mini`: the cut that ~4 minutes of device time
# hold (the forms on both shapes once, bench --op twice, cuda-ops and
# racecheck with the three on).
#   BUILD=build-d90 MODELS=stories260K tests/cuda/device-prep.sh
# device tool: carry ["devcarry.tgz"], command `bash bench/hv56-call.sh [mini]`.
# (The record of session 56's call 25, `mini`, on 5e7aaa4: INFERD_MMVT_XT was
# removed after it and INFERD_MMVT_HV's default became a shape rule,
# bench/RESULTS.md; today INFERD_MMVT_HV=1 INFERD_MMVT_FQ=0 is its last form.)
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
. bench/call-lib.sh
call_head
base="INFERD_MMVT_HV=0 INFERD_MMVT_XT=0 INFERD_MMVT_OM=0"
hv="INFERD_MMVT_HV=1 INFERD_MMVT_XT=1 INFERD_MMVT_OM=1"
if [ "${1:-}" = mini ]; then
    for v in "$base" "INFERD_MMVT_HV=0 INFERD_MMVT_XT=1 INFERD_MMVT_OM=1" "$hv" "INFERD_MMVT_HV=1 INFERD_MMVT_FQ=0" "$base"; do
        echo "[$v] $(env $v timeout 20 $d/bin/mmq_trace mmvt q6_K 8192 4096 1 2>&1 | head -1 | cut -d: -f2) |" \
            "$(env $v timeout 20 $d/bin/mmq_trace mmvt q6_K 14336 4096 1 2>&1 | head -1 | cut -d: -f2)"
    done
    for v in "$base" "$hv" "$base" "$hv"; do
        echo "== [$v]"
        call_op bin "$v" q6_K 1 llama3-ffn-down,qwen7b-ffn-down,qwen7b-attn-kv | cut -d'|' -f3-5
    done
    env $hv timeout 90 $d/bin/test_cuda_ops > $out/ops.log 2>&1
    echo "cuda-ops rc=$? $(tail -1 $out/ops.log)"; grep -E "FAIL" $out/ops.log | head -5
    env $hv timeout 50 compute-sanitizer --tool racecheck --error-exitcode 9 $d/bin/inferd bench --op --backend cuda \
        --types q6_K --n 1 --shapes llama3-ffn-down --reps 2 > $out/san-racecheck.log 2>&1
    echo "racecheck rc=$?"
    date -u +%T
    exit 0
fi
vs=("$base" "INFERD_MMVT_HV=0 INFERD_MMVT_XT=0 INFERD_MMVT_OM=1" "INFERD_MMVT_HV=0 INFERD_MMVT_XT=1 INFERD_MMVT_OM=1"
    "$hv" "INFERD_MMVT_HV=0 INFERD_MMVT_FQ=0 INFERD_MMVT_OM=0" "INFERD_MMVT_HV=1 INFERD_MMVT_FQ=0")
for r in 1 2; do
    for v in "${vs[@]}"; do
        echo "[$v] $(env $v timeout 20 $d/bin/mmq_trace mmvt q6_K 8192 4096 1 2>&1 | head -1 | cut -d: -f2) |" \
            "$(env $v timeout 20 $d/bin/mmq_trace mmvt q6_K 14336 4096 1 2>&1 | head -1 | cut -d: -f2)"
    done
done 2>&1 | tee $out/trace.txt
env $hv timeout 20 $d/bin/mmq_trace mmvt q6_K 8192 4096 1 > $out/marks-hv.txt 2>&1
sed -n 3,9p $out/marks-hv.txt | cut -c1-170
for r in 1 2; do
    for v in "$base" "$hv" "INFERD_MMVT_HV=1 INFERD_MMVT_FQ=0"; do
        echo "== [$v] round $r"
        call_op bin "$v" q6_K 1 llama3-ffn-down,qwen7b-ffn-down,qwen7b-attn-kv | cut -d'|' -f3-5
    done
done 2>&1 | tee $out/op.txt
date -u +%T
env $hv timeout 120 $d/bin/test_cuda_ops > $out/ops.log 2>&1
echo "cuda-ops rc=$? $(tail -1 $out/ops.log)"; grep -E "FAIL" $out/ops.log | head -5
. tests/cuda/q7.sh
q7_make $out/mk.log
env $hv timeout 120 $d/bin/test_cuda_model q7-gpu-vs-cpu.json > $out/q7.log 2>&1
echo "q7 rc=$?"; tail -1 $out/q7.log | cut -c1-160
for tool in memcheck racecheck; do
    env $hv timeout 60 compute-sanitizer --tool $tool --error-exitcode 9 $d/bin/inferd bench --op --backend cuda \
        --types q6_K --n 1 --shapes llama3-ffn-down,qwen7b-ffn-down --reps 2 > $out/san-$tool.log 2>&1
    echo "$tool rc=$?"
done
echo "q7 [$base]: $(call_q7 bin "$base" 16 64 | tr -s ' ' | tr '\n' ' ')"
echo "q7 [$hv]: $(call_q7 bin "$hv" 16 64 | tr -s ' ' | tr '\n' ' ')"
date -u +%T
