#!/usr/bin/env bash
# bench/s62-call.sh — session 62's first call, most needed first: ncu's
# per-instruction stall samples of the product mmq4p (q4_K 4096 x 14336 x
# 512; summed by opcode by bench/stall_sum.py), then on an H200 only
# bench/table57-call.sh (#11's table with the one-row Q6_K row), then the
# rest of bench/mask61-call.sh (what the trace marks cost). carry
# ["devmask.tgz", "devcarry.tgz"] (their headers say how to build them).
cd "$(dirname "$0")/.." || exit 1
. bench/call-lib.sh
call_head devmask
. bench/diag-lib.sh
diag_src_q4 $d/prev/inferd $out 10
bash bench/table57-call.sh 2>&1
MASK61_NO_SRC=1 bash bench/mask61-call.sh 2>&1
