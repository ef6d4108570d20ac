#!/usr/bin/env bash
# bench/ab-call.sh — one device call for a kernel change, in the seeds'
# order: the bits first (cuda-ops against the CPU, the 7B-shaped model's
# GPU-vs-CPU gate), the sanitizers on the changed kernel's products, then
# the A/B interleaved against the previous build on the same bytes
# (tests/cuda/run-on-gpu.sh ab). Here:
#   cp build-d90/daemon/inferd /tmp/prev-inferd   (before the change)
#   BUILD=build-d90 MODELS="stories260K tiny-llama-Q4_K_M" tests/cuda/device-prep.sh
#   mkdir devcarry/prev && cp /tmp/prev-inferd devcarry/prev/inferd && strip it
#   tar czf devcarry.tgz devcarry
# device tool: carry ["devcarry.tgz"], command `bash bench/ab-call.sh`.
# Environment: SAN="TYPES SHAPES N" for the sanitizers' bench --op (default
# the q6_K one-row products; several specs separated by ';'), AB_BITS_ENV (variables for the bits phase
# only: cuda-ops, q7, the sanitizers) and the ab phase's AB_* variables.
# Leaves in $OUT: summary.txt, ab.md, the logs.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
. bench/call-lib.sh
call_start
S=$out/summary.txt
{ date -u +%T; nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader; } | tee $S
env ${AB_BITS_ENV:-} timeout 200 $d/bin/test_cuda_ops > $out/ops.log 2>&1
echo "cuda-ops rc=$?" | tee -a $S
grep -E "FAIL|mmvt" $out/ops.log | head -40 >> $S
. tests/cuda/q7.sh
q7_make $out/mk.log
env ${AB_BITS_ENV:-} timeout 150 $d/bin/test_cuda_model q7-gpu-vs-cpu.json > $out/q7.log 2>&1
echo "q7 rc=$?" | tee -a $S
tail -1 $out/q7.log | tee -a $S
IFS=';' read -ra sans <<< "${SAN:-q6_K llama3-ffn-down,qwen7b-ffn-up,qwen7b-ffn-down 1}"
for i in "${!sans[@]}"; do
    read -r st ss sn <<< "${sans[$i]}"
    for tool in memcheck racecheck synccheck; do # logs: san-TOOL.log for the first spec, sanI-TOOL.log after
        env ${AB_BITS_ENV:-} timeout 90 compute-sanitizer --tool $tool --error-exitcode 9 $d/bin/inferd bench --op \
            --backend cuda --types $st --n $sn --shapes $ss --reps 2 > $out/san${i#0}-$tool.log 2>&1
        echo "$tool ($st $ss n=$sn) rc=$?" | tee -a $S
    done
done
# its own folder: run-on-gpu.sh starts its summary.txt afresh
OUT=$out/abrun timeout ${AB_SECONDS:-300} tests/cuda/run-on-gpu.sh ab > $out/ab-run.log 2>&1
echo "ab rc=$?" | tee -a $S
cp $out/abrun/ab.md $out/ 2>/dev/null
cat $out/ab.md >> $S 2>/dev/null
date -u +%T | tee -a $S
