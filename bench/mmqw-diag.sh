#!/usr/bin/env bash
# bench/mmqw-diag.sh — ncu of the exact F16 Q4_K product's kernels (cuda/
# mmqw.cu, cuda/mmqh_impl.cuh) on the 4096 x 14336 weight at n = 512: the
# counters that decide where a stage's time goes (issue, tensor pipe,
# shared-memory wavefronts and bank conflicts, stall reasons a issued
# instruction), then mmqw's stall samples by SASS instruction (the
# SourceCounters section; the 40 instructions with the most samples).
# Run after bench/ab-call.sh in the same device call (it needs devcarry/).
# Leaves in $OUT: mmqw-diag.txt.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
. bench/diag-lib.sh
diag_setup mmqw mmqw-diag.txt
m=$(diag_metrics)
for v in "mmqw 1" "mmqh 0"; do
    set -- $v
    INFERD_MMQH=128 INFERD_MMQW=$2 timeout 90 ncu --metrics "$m" -k regex:${1}_kernel --launch-skip 2 \
        --launch-count 1 $d/bin/inferd bench --op --backend cuda --types q4_K --n 512 \
        --shapes llama3-ffn-down --reps 3 > $o/ncu-$1.txt 2>&1
    echo "== ncu $1 rc=$?" >> $S
    grep -E "^ +[a-z]+__" $o/ncu-$1.txt | awk '$NF != "0" && $NF != "0.00"' >> $S
done
INFERD_MMQH=128 timeout 120 ncu --section SourceCounters --section WarpStateStats -k regex:mmqw_kernel \
    --launch-skip 2 --launch-count 1 -o $o/src $d/bin/inferd bench --op --backend cuda --types q4_K --n 512 \
    --shapes llama3-ffn-down --reps 3 > $o/ncu-src.log 2>&1
echo "== ncu source rc=$?" >> $S
diag_stalls $o/src.ncu-rep 40 >> $S
cp $S $OUT/ 2>/dev/null
