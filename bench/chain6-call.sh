#!/usr/bin/env bash
# bench/chain6-call.sh — session 51's question after mmq6w's lever sweep
# (no chain: 126 -> 76 us): what the chain costs alone (bench/wgmma_probe
# chain6: 64 x fma(p1, (float) int, acc) against the same from floats,
# two warps a scheduler), whether the products run as fast as two
# m64n64k32 halves (A reused) as one m64n128k32 (a form that could run one
# half's chain under the other half's products), and the SASS census of
# the engine's mmq6w and mmqr (carry devcarry/sass: their .o from
# build-d90): the conversions the chains issue; with
# devcarry/sass/mmq6w_halves.cu.o (branch wip-q6halves' mmq6w.cu built
# with build-d90's nvcc command, -o that file) its SASS too, whole, into
# $OUT (ptxas C7514: find the instruction that reads an accumulator of an
# in-flight wgmma). Prepare: mkdir -p devcarry/sass; cp
# build-d90/engine/cuda/{mmq6w,mmqr}.cu.o devcarry/sass/. device tool:
# `bash bench/chain6-call.sh`, carry ["devcarry/sass"].
cd "$(dirname "$0")/.." || exit 1
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
nvcc -O3 -std=c++17 -arch=sm_90a -I. -o /tmp/wgmma_probe bench/wgmma_probe.cu || exit 1
timeout 60 /tmp/wgmma_probe chain6
ks="mmq6w mmqr"
for h in mmq6w_halves mmqr_halves; do [ -f devcarry/sass/$h.cu.o ] && ks="$ks $h"; done
for k in $ks; do
    echo "== SASS census, $k"
    cuobjdump -sass devcarry/sass/$k.cu.o | awk -v k=${k%_halves} '/Function :/ {f = index($0, k "_kernel") > 0} f' > /tmp/$k.sass
    [ -n "${OUT:-}" ] && cp /tmp/$k.sass "$OUT/"
    wc -l < /tmp/$k.sass
    grep -oE "^ +/\*[0-9a-f]+\*/ +[A-Z0-9_.]+" /tmp/$k.sass | awk '{print $2}' | sed 's/\..*//' | sort | uniq -c | sort -rn | head -30
    grep -oE "I2F[A-Z0-9_.]*|F2I[A-Z0-9_.]*|I2FP[A-Z0-9_.]*" /tmp/$k.sass | sort | uniq -c
done
