#!/usr/bin/env bash
# bench/s62-call.sh — session 62's first call, most needed first: ncu's
# per-instruction stall samples of the product mmq4p (q4_K 4096 x 14336 x
# 512; summed by opcode by bench/stall_sum.py), then either #11's table on
# an H200 (bench/table57-call.sh; devcarry.tgz of main's build:
# `BUILD=build-d90 MODELS=stories260K tests/cuda/device-prep.sh`, then tar)
# or, where devcarry.tgz is bench/ab-prep.sh's A/B carry (it has prev/),
# MMQ4P_SPLIT's A/B (bench/split62-call.sh: `ARGS="-DMMQ4P_SPLIT=1"
# KERNELS="mmq4p" bench/ab-prep.sh`), then the rest of
# bench/mask61-call.sh (what the trace marks cost). carry ["devmask.tgz",
# "devcarry.tgz"] (devmask.tgz: mask61-call.sh's header; 48-54 MB together).
cd "$(dirname "$0")/.." || exit 1
. bench/call-lib.sh
call_head devmask
. bench/diag-lib.sh
diag_src_q4 $d/prev/inferd $out 45
if tar tzf devcarry.tgz devcarry/prev/inferd > /dev/null 2>&1; then
    bash bench/split62-call.sh 2>&1
else
    bash bench/table57-call.sh 2>&1
fi
MASK61_NO_SRC=1 bash bench/mask61-call.sh 2>&1
