#!/usr/bin/env bash
# bench/q6ncu-call.sh — session 54's second call: (1) the planes from 256
# rows (CUDA_Q6P_MIN) at the defaults against the planes off, q6_K 128 /
# 256 / 512 rows on the three shapes; (2) ncu of one 4096 x 14336 x 512
# launch each of mmq6w<true> (the planes), mmq6w<false> (INFERD_Q6P_MB=0)
# and mmqr (q4_K): issue, tensor pipe, shared-memory wavefronts, stall
# reasons a issued instruction (bench/mmqw-diag.sh's counters), then
# mmq6w<true>'s stall samples by SASS instruction (the 40 with the most);
# (3) on an H200, the one-row floor (h200-floor-call.sh).
#   BUILD=build-d90 MODELS=stories260K tests/cuda/device-prep.sh
# device tool: carry ["devcarry.tgz"], command `bash bench/q6ncu-call.sh`.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
. bench/call-lib.sh
call_start
date -u +%T; nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
for r in 1 2; do
    for v in "default INFERD_NOTHING=1" "off INFERD_Q6P_MB=0"; do
        read -r name var <<< "$v"
        echo "== $name round $r"
        call_op bin "$var" q6_K 128,256,512 llama3-ffn-down,qwen7b-ffn-up,qwen7b-ffn-down
    done
done
date -u +%T
m=gpu__time_duration.sum,sm__inst_executed.sum,smsp__issue_active.avg.pct_of_peak_sustained_active
m=$m,sm__warps_active.avg.pct_of_peak_sustained_active,lts__t_sector_hit_rate.pct
m=$m,dram__throughput.avg.pct_of_peak_sustained_elapsed,lts__throughput.avg.pct_of_peak_sustained_elapsed
m=$m,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum
m=$m,"regex:sm__pipe_tensor_[a-z_]*cycles_active\.avg\.pct_of_peak_sustained_active"
m=$m,"regex:sm__inst_executed_pipe_[a-z_]*\.avg\.pct_of_peak_sustained_active"
m=$m,"regex:smsp__average_warps_issue_stalled_[a-z_]*_per_issue_active\.ratio"
for v in "q6exp mmq6w q6_K INFERD_NOTHING=1" "q6noexp mmq6w q6_K INFERD_Q6P_MB=0" "q4r mmqr q4_K INFERD_NOTHING=1"; do
    read -r name kn ty var <<< "$v"
    env $var timeout 90 ncu --metrics "$m" -k regex:${kn}_kernel --launch-skip 2 --launch-count 1 \
        $d/bin/inferd bench --op --backend cuda --types $ty --n 512 --shapes llama3-ffn-down --reps 3 \
        > $out/ncu-$name.txt 2>&1
    echo "== ncu $name rc=$?"
    grep -E "^ +[a-z]+__" $out/ncu-$name.txt | awk '$NF != "0" && $NF != "0.00"' | sed -E 's/ +/ /g' | cut -c1-110
done
date -u +%T
timeout 120 ncu --section SourceCounters --section WarpStateStats -k regex:mmq6w_kernel --launch-skip 2 \
    --launch-count 1 -o /tmp/src $d/bin/inferd bench --op --backend cuda --types q6_K --n 512 \
    --shapes llama3-ffn-down --reps 3 > /tmp/ncu-src.log 2>&1
echo "== ncu source rc=$?"
ncu -i /tmp/src.ncu-rep --page source --csv --print-source sass > /tmp/src.csv 2>/tmp/src.err ||
    ncu -i /tmp/src.ncu-rep --page source --csv > /tmp/src.csv 2>>/tmp/src.err
head -c 400 /tmp/src.err
python3 - /tmp/src.csv <<'PY'
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
print("instructions:", len(body), "samples:", tot)
for r in sorted(body, key=lambda r: -num(r[ci]))[:40]:
    print("%6.2f%%  %s" % (100 * num(r[ci]) / tot, r[src][:100]))
PY
date -u +%T
bash bench/h200-floor-call.sh
date -u +%T
