#!/usr/bin/env bash
# bench/s62-call.sh — session 62's first call: bench/mask61-call.sh (what
# the trace marks cost; ncu's per-instruction stall samples of the product
# mmq4p), then, on an H200 only, bench/table57-call.sh (#11's table with the
# one-row Q6_K row). carry ["devmask.tgz", "devcarry.tgz"] (their headers
# say how to build them). bench/stall_sum.py sums the samples by opcode.
cd "$(dirname "$0")/.." || exit 1
bash bench/mask61-call.sh 2>&1
o=${OUT:-/tmp/out}
[ -f $o/src-q4.csv ] && python3 bench/stall_sum.py $o/src-q4.csv 45
bash bench/table57-call.sh 2>&1
