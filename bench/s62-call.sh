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
timeout 120 ncu --section SourceCounters --section WarpStateStats -k regex:mmq4p_kernel --launch-skip 2 --launch-count 1 \
    -o $out/src-q4 $d/prev/inferd bench --op --backend cuda --types q4_K --n 512 --shapes llama3-ffn-down --reps 3 \
    > $out/src-q4.log 2>&1
echo "ncu source rc=$?"
diag_stalls $out/src-q4.ncu-rep 10
python3 bench/stall_sum.py $out/src-q4.csv 45
bash bench/table57-call.sh 2>&1
MASK61_NO_SRC=1 bash bench/mask61-call.sh 2>&1
