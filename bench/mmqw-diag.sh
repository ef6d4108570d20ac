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
m=gpu__time_duration.sum,sm__inst_executed.sum,smsp__issue_active.avg.pct_of_peak_sustained_active
m=$m,sm__warps_active.avg.pct_of_peak_sustained_active,lts__t_sector_hit_rate.pct
m=$m,dram__throughput.avg.pct_of_peak_sustained_elapsed,lts__throughput.avg.pct_of_peak_sustained_elapsed
m=$m,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum
m=$m,"regex:sm__pipe_tensor_[a-z_]*cycles_active\.avg\.pct_of_peak_sustained_active"
m=$m,"regex:sm__inst_executed_pipe_[a-z_]*\.avg\.pct_of_peak_sustained_active"
m=$m,"regex:smsp__average_warps_issue_stalled_[a-z_]*_per_issue_active\.ratio"
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
ncu -i $o/src.ncu-rep --page source --csv --print-source sass > $o/src.csv 2>$o/src.err ||
    ncu -i $o/src.ncu-rep --page source --csv > $o/src.csv 2>>$o/src.err
head -c 600 $o/src.err >> $S
python3 - "$o/src.csv" >> $S 2>&1 <<'PY'
import csv, sys
rows = list(csv.reader(open(sys.argv[1], errors="replace")))
hdr = next((i for i, r in enumerate(rows) if any("Sampl" in c for c in r)), None)
if hdr is None:
    print("no sampling columns:", rows[:2]); sys.exit(0)
h = rows[hdr]
ci = next(i for i, c in enumerate(h) if "Warp Stall Sampling (All" in c or c.startswith("Warp Stall Sampling"))
src = next((i for i, c in enumerate(h) if c in ("Source", "SASS")), 1)
body = [r for r in rows[hdr + 1:] if len(r) > ci]
def num(x):
    try: return float(x.replace(",", ""))
    except ValueError: return 0.0
tot = sum(num(r[ci]) for r in body) or 1.0
print("columns:", h[:12])
for r in sorted(body, key=lambda r: -num(r[ci]))[:40]:
    print("%6.2f%%  %s" % (100 * num(r[ci]) / tot, r[src][:110]))
PY
cp $S $OUT/ 2>/dev/null
