#!/usr/bin/env bash
# bench/nap-call.sh — session 49 (call 20; the knob INFERD_MMQR_NAP lives on
# branch wip-nap only, withdrawn from main): does mmqr's chain cost the other
# warpgroup's products because its warp holds the scheduler?
#   1. bench/wgmma_probe sched: form 2 (mmqr's products) beside a chain,
#      the chain with a __nanosleep every 8 pairs (0-400 ns) and as one
#      dependent series
#   2. bench/ab-call.sh: the bits with INFERD_MMQR_NAP=50 (cuda-ops with
#      16-row batches sent to mmqr, q7 GPU vs CPU, the sanitizers on q4_K
#      512 rows), then prev (main 56fb1f5's engine) against this build at
#      INFERD_MMQR_NAP 0 / 20 / 50 / 100, interleaved
#   3. #11's table at the defaults (every type, n = 1 / 8 / 512 / 2048)
#   4. ncu: mmqr's and mmq6w's memory side
# Carry devcarry.tgz with bin/wgmma_probe and prev/inferd.
cd "$(dirname "$0")/.." || exit 1
out=${OUT:-/tmp/out}; mkdir -p "$out"
tar xzf devcarry.tgz
d=$PWD/devcarry; export LD_LIBRARY_PATH=$d/lib
{ date -u +%T; nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader; } > $out/probe.txt
timeout 60 $d/bin/wgmma_probe sched >> $out/probe.txt 2>&1
echo "probe rc=$?" >> $out/probe.txt
( export AB_BITS_ENV="INFERD_MMQH=16 INFERD_MMQ6W=16 INFERD_MMQR_NAP=50" SAN="q4_K llama3-ffn-down,qwen7b-attn-kv 512" \
      AB_TYPES=q4_K AB_N=512,2048 AB_SHAPES=llama3-ffn-down,qwen7b-ffn-up,qwen7b-attn-q AB_PP=512 AB_TG=16 \
      AB_VARIANTS="prev n0=bin n20=bin:INFERD_MMQR_NAP=20 n50=bin:INFERD_MMQR_NAP=50 n100=bin:INFERD_MMQR_NAP=100" \
      AB_SECONDS=260
  OUT=$out/ab timeout 420 bash bench/ab-call.sh > $out/ab-call.log 2>&1 )
echo "ab-call rc=$?" >> $out/probe.txt
cp $out/ab/summary.txt $out/ab-summary.txt 2>/dev/null
for r in 1 2; do
    timeout 60 $d/bin/inferd bench --op --backend cuda --types q4_K,q6_K,q5_K,q8_0,q4_0 --n 1,8,512,2048 \
        --shapes llama3-ffn-down > $out/table-r$r.txt 2>&1
    echo "table round $r rc=$?" >> $out/probe.txt
done
. bench/diag-lib.sh
diag_ncu_mem $out $out/probe.txt
date -u +%T >> $out/probe.txt
cat $out/probe.txt $out/ab-summary.txt
