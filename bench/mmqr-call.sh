#!/usr/bin/env bash
# bench/mmqr-call.sh — the first device call for cuda/mmqr.cu (written in
# session 41, which had no device time; bench/RESULTS.md 2026-12-05 session
# 41), in the seeds' order, one call (~6-7 min):
#   1. the pipelines' marks: bench/mmq_trace mmqw and mmqr, 4096 x 14336 at
#      512 and 2048 rows (what a super-block spends where, per warpgroup)
#   2. bench/ab-call.sh with INFERD_MMQW=2 (mmqr) from 16 rows: cuda-ops
#      against the CPU, the 7B-shaped model's GPU-vs-CPU gate, memcheck /
#      racecheck / synccheck of a 301-row product through it, then the A/B
#      mmqk / mmqw / mmqr interleaved (the default rule: from 512 rows)
#   3. tests/cuda/run-on-gpu.sh self ops model on this build (its ops phase
#      runs cuda-ops with INFERD_MMQW=2 too)
# Here: BUILD=build-d90 MODELS="stories260K tiny-llama-Q4_K_M" tests/cuda/device-prep.sh
# (it carries bench/mmq_trace where the build made it); device tool: carry
# ["devcarry.tgz"], command `bash bench/mmqr-call.sh`. Leaves in $OUT:
# summary.txt, trace.txt, ab.md, o.tgz (every log).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
tar xzf devcarry.tgz
d=$PWD/devcarry
export LD_LIBRARY_PATH=$d/lib INFERD_SHARED=$d/shared INFERD_SRC=$PWD
out=${OUT:-/tmp/out}; mkdir -p "$out"
w=/tmp/mmqr-call; rm -rf $w; mkdir -p $w
S=$out/summary.txt
{ date -u +%T; nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader; } | tee $S
if [ -x $d/bin/mmq_trace ]; then
    for k in mmqw mmqr; do
        for n in 512 2048; do
            timeout 60 $d/bin/mmq_trace $k q4_K 14336 4096 $n >> $out/trace.txt 2>&1
            echo "trace $k n=$n rc=$?" | tee -a $S
        done
    done
else
    echo "trace: no devcarry/bin/mmq_trace" | tee -a $S
fi
( export INFERD_MMQW=2 INFERD_MMQH=16 SAN="q4_K qwen7b-attn-kv 301" AB_TYPES=q4_K AB_N=128,512,2048 \
      AB_SHAPES=llama3-ffn-down,qwen7b-ffn-up,qwen7b-attn-q AB_PP=512,2048 AB_TG=16 \
      AB_VARIANTS="mmqk=bin:INFERD_MMQH=0 mmqw=bin:INFERD_MMQW=1,INFERD_MMQH=-1 mmqr=bin:INFERD_MMQH=-1"
  OUT=$w/ab timeout 330 bash bench/ab-call.sh > $w/ab-call.log 2>&1 )
echo "ab-call rc=$?" | tee -a $S
cat $w/ab/summary.txt >> $S 2>/dev/null
cp $w/ab/ab.md $out/ 2>/dev/null
OUT=$w/rog timeout 330 tests/cuda/run-on-gpu.sh self ops model > $w/rog.log 2>&1
echo "run-on-gpu self ops model rc=$?" | tee -a $S
cat $w/rog/summary.txt >> $S 2>/dev/null
tar czf $out/o.tgz -C $w . 2>/dev/null
date -u +%T | tee -a $S
