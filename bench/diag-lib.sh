# bench/diag-lib.sh — sourced by the device diagnosis scripts
# (bench/mmvt-diag.sh, bench/mmqw-diag.sh): diag_setup NAME FILE unpacks
# devcarry/ when absent, points the loader at its libraries, makes a fresh
# /tmp/o-NAME ($o) and starts its summary FILE ($S) with the GPU's name and
# clock. Sets d (devcarry), o and S.
diag_setup() {
    [ -d devcarry ] || tar xzf devcarry.tgz
    d=$PWD/devcarry
    export LD_LIBRARY_PATH=$d/lib
    o=/tmp/o-$1; rm -rf "$o"; mkdir -p "$o"
    S=$o/$2
    nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader | tee "$S"
}
