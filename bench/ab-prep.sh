#!/usr/bin/env bash
# bench/ab-prep.sh — the carry of an A/B device call between this tree at
# its defaults (prev: build-d90) and the same tree with compile-time
# switches (bin: build-ab, meson -Dcuda_args="$ARGS", which
# engine/cuda/meson.build passes to every nvcc target), as bench/ab-call.sh
# reads it: devcarry/bin = bin's binaries and libraries (tests/cuda/
# device-prep.sh), devcarry/prev/inferd = prev's, devcarry/sass = both
# builds' objects of the kernels named in KERNELS (default "mmq6w mmqr";
# bin's as NAME_b.cu.o) for a SASS census there. ~2-3 min on 2 cores from
# nothing. Session 52 made its halves call's carry this way
# (ARGS="-DMMQ6W_HALVES=1 -DMMQR_HALVES=1", at 4c837ee).
#   ARGS="-DFOO=1" bench/ab-prep.sh; then carry ["devcarry.tgz"]
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=/usr/local/cuda/bin:$PATH
: "${ARGS:?ARGS: the -D switches of the bin build}"
[ -d build-d90 ] || meson setup build-d90 -Dgpu_arch=90 >/dev/null
[ -d build-ab ] || meson setup build-ab -Dgpu_arch=90 >/dev/null
meson configure build-ab -Dcuda_args="$ARGS"
ninja -C build-d90 >/dev/null
ninja -C build-ab >/dev/null
BUILD=build-ab MODELS=${MODELS:-stories260K} tests/cuda/device-prep.sh >/dev/null
mkdir -p devcarry/prev devcarry/sass
cp build-d90/daemon/inferd devcarry/prev/inferd && strip devcarry/prev/inferd
for k in ${KERNELS:-mmq6w mmqr}; do
    cp "$(find build-d90 -name "$k.cu.o" | head -1)" devcarry/sass/$k.cu.o
    cp "$(find build-ab -name "$k.cu.o" | head -1)" devcarry/sass/${k}_b.cu.o
done
rm -f devcarry.tgz && tar czf devcarry.tgz devcarry
ls -la devcarry.tgz
