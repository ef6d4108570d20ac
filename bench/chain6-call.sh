#!/usr/bin/env bash
# bench/chain6-call.sh — session 51's question after mmq6w's lever sweep
# (no chain: 126 -> 76 us): what the chain costs alone (bench/wgmma_probe
# chain6: 64 x fma(p1, (float) int, acc) against the same from floats,
# two warps a scheduler), whether the products run as fast as two
# m64n64k32 halves (A reused) as one m64n128k32 (a form that could run one
# half's chain under the other half's products), and the SASS census of
# the engine's mmq6w and mmqr (carry devcarry/sass: their .o from
# build-d90): the conversions the chains issue; with bench/ab-prep.sh's
# bin objects (devcarry/sass/NAME_b.cu.o) their SASS too, each whole into
# $OUT. Prepare: mkdir -p devcarry/sass; cp
# build-d90/engine/cuda/{mmq6w,mmqr}.cu.o devcarry/sass/ (or run
# bench/ab-prep.sh). device tool: `bash bench/chain6-call.sh`, carry
# ["devcarry/sass"]. Run in session 52's call 1 (bench/RESULTS.md): the
# halves 71.0 against 72.1 cycles a step, the chain 412.8 cycles a pass
# with its conversions, 257.0 without.
cd "$(dirname "$0")/.." || exit 1
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
nvcc -O3 -std=c++17 -arch=sm_90a -I. -o /tmp/wgmma_probe bench/wgmma_probe.cu || exit 1
timeout 60 /tmp/wgmma_probe chain6
ks="mmq6w mmqr"
for f in devcarry/sass/*_b.cu.o; do [ -f "$f" ] && ks="$ks $(basename "$f" .cu.o)"; done # bench/ab-prep.sh's bin objects
for k in $ks; do
    echo "== SASS census, $k"
    cuobjdump -sass devcarry/sass/$k.cu.o | awk -v k=${k%_b} '/Function :/ {f = index($0, k "_kernel") > 0} f' > /tmp/$k.sass
    [ -n "${OUT:-}" ] && cp /tmp/$k.sass "$OUT/"
    wc -l < /tmp/$k.sass
    grep -oE "^ +/\*[0-9a-f]+\*/ +[A-Z0-9_.]+" /tmp/$k.sass | awk '{print $2}' | sed 's/\..*//' | sort | uniq -c | sort -rn | head -30
    grep -oE "I2F[A-Z0-9_.]*|F2I[A-Z0-9_.]*|I2FP[A-Z0-9_.]*" /tmp/$k.sass | sort | uniq -c
done
