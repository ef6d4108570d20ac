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
timeout 120 $d/bin/test_cuda > $out/test_cuda.log 2>&1
echo "test_cuda rc=$?"; grep -E "FAIL|prewarm" $out/test_cuda.log | head -4 | cut -c1-160
shapes=llama3-ffn-down,qwen7b-ffn-down,qwen7b-attn-kv
call_bits q6_K 1 $shapes # cuda-ops, the q7 gate, racecheck, synccheck
timeout 90 compute-sanitizer --tool memcheck --error-exitcode 9 $d/bin/inferd bench --op --backend cuda \
    --types q6_K --n 1 --shapes $shapes --reps 2 > $out/san-memcheck.log 2>&1
echo "memcheck rc=$?"
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
