#!/usr/bin/env bash
# bench/end56-call.sh — the first call after session 56 (its final build was
# not run on a GPU): the bits of the final build (cuda-ops, with its new Q6_K
# 2304 x 2048 case through mmvt's halves form; test_cuda's prewarm list;
# the 7B-shaped GPU-vs-CPU gate; memcheck / racecheck / synccheck of the
# one-row Q6_K products the rule takes and does not take), then the halves
# form's rule against INFERD_MMVT_HV=0 (bench --op, two rounds, and
# mmq_trace on the L2-held proxy), then on an H200 #11's table and the
# one-row floor (bench/table55-call.sh).
#   BUILD=build-d90 MODELS=stories260K tests/cuda/device-prep.sh
# device tool: carry ["devcarry.tgz"], command `bash bench/end56-call.sh`.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
. bench/call-lib.sh
call_head
timeout 170 $d/bin/test_cuda_ops > $out/ops.log 2>&1
echo "cuda-ops rc=$? $(tail -1 $out/ops.log)"; grep -E "FAIL|2304" $out/ops.log | head -8 | cut -c1-160
timeout 120 $d/bin/test_cuda > $out/test_cuda.log 2>&1
echo "test_cuda rc=$?"; grep -E "FAIL|prewarm" $out/test_cuda.log | head -4 | cut -c1-160
. tests/cuda/q7.sh
q7_make $out/mk.log
timeout 150 $d/bin/test_cuda_model q7-gpu-vs-cpu.json > $out/q7.log 2>&1
echo "q7 rc=$?"; tail -1 $out/q7.log | cut -c1-160
for tool in memcheck racecheck synccheck; do
    timeout 90 compute-sanitizer --tool $tool --error-exitcode 9 $d/bin/inferd bench --op --backend cuda \
        --types q6_K --n 1 --shapes llama3-ffn-down,qwen7b-ffn-down,qwen7b-attn-kv --reps 2 > $out/san-$tool.log 2>&1
    echo "$tool rc=$?"
done
date -u +%T
for r in 1 2; do
    for v in "" "INFERD_MMVT_HV=0"; do
        echo "== [$v] round $r"
        call_op bin "$v" q6_K 1 llama3-ffn-down,qwen7b-ffn-down,qwen7b-attn-kv | cut -d'|' -f3-5
        echo "trace 8192: $(env $v timeout 20 $d/bin/mmq_trace mmvt q6_K 8192 4096 1 2>&1 | head -1 | cut -d: -f2)"
    done
done
date -u +%T
g=$(nvidia-smi --query-gpu=name --format=csv,noheader)
case "$g" in *H200*) bash bench/table55-call.sh > $out/table55.txt 2>&1; grep -vE "^\s*$" $out/table55.txt | tail -70 ;; esac
