#!/usr/bin/env bash
# bench/wgrs-call.sh — one device call for the register-A wgmma kernels
# (cuda/mmqr.cu, cuda/mmq6w.cu; cuda/wgrs.cuh), in the seeds' order:
#   1. bench/mmq_trace marks of mmqr (q4_K) and mmq6w (q6_K) at 4096 x
#      14336 x 512 (TRACE_ENV: variables for a second run of each, e.g. a
#      knob under test)
#   2. bench/ab-call.sh: cuda-ops (its Q4_K / Q6_K batches through mmqr /
#      mmq6w from 128 rows), q7 GPU vs CPU and memcheck / racecheck /
#      synccheck of 301-row q4_K and q6_K products through them from 16
#      rows, then the A/B interleaved: AB_VARIANTS, by default `base`
#      (session 40's defaults: mmqw, mmqk for Q6_K) against `new` (this
#      build's defaults)
#   3. ncu of one mmqr and one mmq6w launch (NCU=0: not)
#   4. tests/cuda/run-on-gpu.sh self ops model (ROG=0: not)
# Session 42 ran it (as wgpp-call.sh) for the warpgroup turns and the
# short plane arithmetic (bench/RESULTS.md). Here:
# BUILD=build-d90 MODELS="stories260K tiny-llama-Q4_K_M" tests/cuda/device-prep.sh;
# device tool: carry ["devcarry.tgz"], command `bash bench/wgrs-call.sh`.
# Leaves in $OUT: summary.txt, ab.md, ncu.txt, src-*.csv.gz, o.tgz (with
# trace.txt and wgrs.sass.gz).
set -uo pipefail
t0=$(date +%s) # the tool gives a command 600 s
cd "$(dirname "$0")/.." || exit 1
tar xzf devcarry.tgz
d=$PWD/devcarry
export LD_LIBRARY_PATH=$d/lib INFERD_SHARED=$d/shared INFERD_SRC=$PWD
out=${OUT:-/tmp/out}; mkdir -p "$out"
w=/tmp/wgrs-call; rm -rf $w; mkdir -p $w
S=$out/summary.txt
{ date -u +%T; nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader; } | tee $S
for k in mmqr:q4_K mmq6w:q6_K; do
    for v in "" ${TRACE_ENV:-}; do
        env $v timeout 60 $d/bin/mmq_trace ${k%%:*} ${k#*:} 14336 4096 512 > $w/tr.txt 2>&1
        echo "trace $k ${v:-defaults} rc=$?" | tee -a $S
        { echo "## $k ${v:-defaults}"; cat $w/tr.txt; } >> $out/trace.txt
        head -2 $w/tr.txt >> $S
    done
done
# SASS of the wgrs kernels (the census: bench/RESULTS.md)
cuobjdump -sass $d/bin/mmq_trace 2>/dev/null | awk '/Function : /{p = /mmqr|mmq6w/} p' | gzip > $out/wgrs.sass.gz
echo "sass lines $(zcat $out/wgrs.sass.gz | wc -l)" | tee -a $S
# BITS_ENV: variables for the bits phase (cuda-ops, q7, sanitizers), e.g.
# a form under test; ab-call.sh applies them (AB_BITS_ENV) to that phase
# only: exported here they also reached every A/B variant (session 47 call
# 11's A/B ran the form under test on both sides)
( export AB_BITS_ENV="INFERD_MMQH=16 INFERD_MMQ6W=16 ${BITS_ENV:-}" SAN="q4_K,q6_K qwen7b-attn-kv 301" AB_TYPES=q4_K,q6_K \
      AB_N=256,512,2048 AB_SHAPES=llama3-ffn-down,qwen7b-ffn-up,qwen7b-attn-q AB_PP=512,2048 AB_TG=16 \
      AB_VARIANTS="${AB_VARIANTS:-base=bin:INFERD_MMQW=1,INFERD_MMQH=-1,INFERD_MMQ6W=0 new=bin:INFERD_MMQH=-1,INFERD_MMQ6W=-1}"
  OUT=$w/ab timeout 330 bash bench/ab-call.sh > $w/ab-call.log 2>&1 )
echo "ab-call rc=$?" | tee -a $S
cat $w/ab/summary.txt >> $S 2>/dev/null
cp $w/ab/ab.md $out/ 2>/dev/null
# NCU_RUNS: kernel:type:variables (commas) of each ncu run (NCU=0: none);
# with SourceCounters, and each run's source page (SASS, stall samples per
# instruction) as csv
for k in ${NCU_RUNS:-mmqr:q4_K: mmq6w:q6_K:}; do
    [ "${NCU:-1}" = 1 ] || break
    IFS=: read -r kn ty ev <<< "$k"
    tag=$kn${ev:+-${ev//[=,]/_}}
    echo "## $k" >> $out/ncu.txt
    env ${ev//,/ } timeout 100 ncu --kernel-name regex:${kn}_ --launch-count 1 \
        --section SpeedOfLight --section ComputeWorkloadAnalysis --section WarpStateStats --section SourceCounters \
        --section Occupancy --section SchedulerStats -f -o $w/$tag \
        $d/bin/mmq_trace $kn $ty 14336 4096 512 >> $out/ncu.txt 2>&1
    echo "ncu $k rc=$?" | tee -a $S
    ncu -i $w/$tag.ncu-rep >> $out/ncu.txt 2>&1
    ncu -i $w/$tag.ncu-rep --page source --csv --print-source sass 2>/dev/null | gzip > $out/src-$tag.csv.gz
done
# the activations' f16 conversion before each mmqr product (mmqh_x16p_kernel)
[ "${NCU:-1}" = 1 ] && timeout 60 ncu --kernel-name regex:mmqh_x16 --launch-count 1 --section SpeedOfLight \
    $d/bin/mmq_trace mmqr q4_K 14336 4096 512 2>&1 | grep -E "mmqh_x16|Duration|Throughput" | tee -a $S
# ROG=0: not (a call whose bits phase above covers the change)
if [ "${ROG:-1}" = 1 ]; then
    left=$(( 560 - ($(date +%s) - t0) ))
    [ $left -lt 60 ] && left=60
    OUT=$w/rog timeout $left tests/cuda/run-on-gpu.sh self ops model > $w/rog.log 2>&1
    echo "run-on-gpu self ops model rc=$?" | tee -a $S
    cat $w/rog/summary.txt >> $S 2>/dev/null
fi
# the tool brings back only a few files: the marks and the SASS go in o.tgz
mv $out/trace.txt $out/wgrs.sass.gz $w/ 2>/dev/null
tar czf $out/o.tgz -C $w . 2>/dev/null
date -u +%T | tee -a $S
