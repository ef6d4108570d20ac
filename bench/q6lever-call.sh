#!/usr/bin/env bash
# bench/q6lever-call.sh — session 54: the lever sweep of mmq6w<true> (the
# planes form) in bench/mmq_trace's mmq6p mode, 4096 x 14336 x 512, two
# rounds interleaved: L0 the kernel as the engine's, L1 no chain, L2 no
# first drain or shift (the planes as one series), L4 neither (products
# and one wait a super-block); L0's marks (per super-block: land, park =
# second plane done, done = chain done, for both warpgroups; feed); the
# expanded form (mmq6w) and mmqr beside them; on an H200 the floor.
# Carry: the four builds in devcarry/lev (tr0..tr4, made by build-d90's
# mmq_trace nvcc command with -DMMQ6W_LEVER=N). Command:
#   bash bench/q6lever-call.sh        carry ["devcarry/lev"]
cd "$(dirname "$0")/.." || exit 1
date -u +%T; nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
L=devcarry/lev
for r in 1 2; do
    for l in 0 1 2 4; do
        echo "L$l: $(timeout 30 $L/tr$l mmq6p q6_K 14336 4096 512 2>&1 | head -1)"
    done
    echo "mmq6w L0: $(timeout 30 $L/tr0 mmq6w q6_K 14336 4096 512 2>&1 | head -1)"
    echo "mmqr L0: $(timeout 30 $L/tr0 mmqr q4_K 14336 4096 512 2>&1 | head -1)"
done
echo "== L0 mmq6p marks"
timeout 30 $L/tr0 mmq6p q6_K 14336 4096 512 > ${OUT:-/tmp}/marks0.txt 2>&1
sed -n 2,30p ${OUT:-/tmp}/marks0.txt | cut -c1-150
echo "== L1 mmq6p marks"
timeout 30 $L/tr1 mmq6p q6_K 14336 4096 512 > ${OUT:-/tmp}/marks1.txt 2>&1
sed -n 2,12p ${OUT:-/tmp}/marks1.txt | cut -c1-150
date -u +%T
bash bench/h200-floor-call.sh
date -u +%T
