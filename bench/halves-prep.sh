#!/usr/bin/env bash
# bench/halves-prep.sh — the carry of bench/q6halves-call.sh (session 52),
# built here from this tree: prev = the engine at its defaults
# (build-d90), bin = the same tree with both halves forms on (build-h90,
# -Dcuda_args="-DMMQ6W_HALVES=1 -DMMQR_HALVES=1"; H=2 for form 2), and
# devcarry/sass = the default and halves mmq6w / mmqr objects for the
# SASS census. ~7 min on 2 cores from nothing. Then: device tool, `bash
# bench/q6halves-call.sh`, carry ["devcarry.tgz"].
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=/usr/local/cuda/bin:$PATH
H=${H:-1}
[ -d build-d90 ] || meson setup build-d90 -Dgpu_arch=90 >/dev/null
[ -d build-h90 ] || meson setup build-h90 -Dgpu_arch=90 -Dcuda_args="-DMMQ6W_HALVES=$H -DMMQR_HALVES=$H" >/dev/null
meson configure build-h90 -Dcuda_args="-DMMQ6W_HALVES=$H -DMMQR_HALVES=$H"
ninja -C build-d90 >/dev/null
ninja -C build-h90 >/dev/null
BUILD=build-h90 MODELS=stories260K tests/cuda/device-prep.sh >/dev/null
mkdir -p devcarry/prev devcarry/sass
cp build-d90/daemon/inferd devcarry/prev/inferd && strip devcarry/prev/inferd
for k in mmq6w mmqr; do
    cp "$(find build-d90 -name "$k.cu.o" | head -1)" devcarry/sass/$k.cu.o
    cp "$(find build-h90 -name "$k.cu.o" | head -1)" devcarry/sass/${k}_halves.cu.o
done
rm -f devcarry.tgz && tar czf devcarry.tgz devcarry
ls -la devcarry.tgz
