#!/usr/bin/env bash
# bench/mmqr-call.sh — the first device call for cuda/mmqr.cu and
# cuda/mmq6w.cu (written in session 41, which had no device time;
# bench/RESULTS.md 2026-12-05 session 41), in the seeds' order, one call
# (under the tool's 10 minutes: the last step gets what is left):
#   1. the pipelines' marks: bench/mmq_trace mmqw, mmqr (q4_K) and mmq6w
#      (q6_K), 4096 x 14336 at 512 and 2048 rows (what a super-block spends
#      where, per warpgroup)
#   2. bench/ab-call.sh with INFERD_MMQW=2 (mmqr) and INFERD_MMQ6W=16
#      (mmq6w) from 16 rows: cuda-ops against the CPU, the 7B-shaped
#      model's GPU-vs-CPU gate (its Q6_K matrices too), memcheck /
#      racecheck / synccheck of 301-row q4_K and q6_K products through
#      them, then the A/B interleaved: `base` (mmqk; mmqw from 512 rows as
#      main does) against `new` (mmqr from 512 rows, mmq6w from 512)
#   3. tests/cuda/run-on-gpu.sh self ops model on this build (its ops phase
#      runs cuda-ops with each of the two too)
# Here: BUILD=build-d90 MODELS="stories260K tiny-llama-Q4_K_M" tests/cuda/device-prep.sh
# (it carries bench/mmq_trace where the build made it); device tool: carry
# ["devcarry.tgz"], command `bash bench/mmqr-call.sh`. Leaves in $OUT:
# summary.txt, trace.txt, ab.md, o.tgz (every log).
set -uo pipefail
t0=$(date +%s) # the tool gives a command 600 s
cd "$(dirname "$0")/.." || exit 1
tar xzf devcarry.tgz
d=$PWD/devcarry
export LD_LIBRARY_PATH=$d/lib INFERD_SHARED=$d/shared INFERD_SRC=$PWD
out=${OUT:-/tmp/out}; mkdir -p "$out"
w=/tmp/mmqr-call; rm -rf $w; mkdir -p $w
S=$out/summary.txt
{ date -u +%T; nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader; } | tee $S
if [ -x $d/bin/mmq_trace ]; then
    for k in mmqw:q4_K mmqr:q4_K mmq6w:q6_K; do
        for n in 512 2048; do
            timeout 60 $d/bin/mmq_trace ${k%%:*} ${k#*:} 14336 4096 $n >> $out/trace.txt 2>&1
            echo "trace $k n=$n rc=$?" | tee -a $S
        done
    done
else
    echo "trace: no devcarry/bin/mmq_trace" | tee -a $S
fi
( export INFERD_MMQW=2 INFERD_MMQH=16 INFERD_MMQ6W=16 SAN="q4_K,q6_K qwen7b-attn-kv 301" AB_TYPES=q4_K,q6_K \
      AB_N=128,512,2048 AB_SHAPES=llama3-ffn-down,qwen7b-ffn-up,qwen7b-attn-q AB_PP=512,2048 AB_TG=16 \
      AB_VARIANTS="base=bin:INFERD_MMQW=1,INFERD_MMQH=-1,INFERD_MMQ6W=0 new=bin:INFERD_MMQH=-1,INFERD_MMQ6W=512"
  OUT=$w/ab timeout 330 bash bench/ab-call.sh > $w/ab-call.log 2>&1 )
echo "ab-call rc=$?" | tee -a $S
cat $w/ab/summary.txt >> $S 2>/dev/null
cp $w/ab/ab.md $out/ 2>/dev/null
left=$(( 560 - ($(date +%s) - t0) ))
[ $left -lt 60 ] && left=60
OUT=$w/rog timeout $left tests/cuda/run-on-gpu.sh self ops model > $w/rog.log 2>&1
echo "run-on-gpu self ops model rc=$?" | tee -a $S
cat $w/rog/summary.txt >> $S 2>/dev/null
tar czf $out/o.tgz -C $w . 2>/dev/null
date -u +%T | tee -a $S
