#!/usr/bin/env bash
# bench/q6split-call.sh — session 54's A/B of mmq6w<true>'s split form
# (MMQ6P_SPLIT=1: the two planes into two accumulator sets, the shift under
# the second plane's products) against the default, with the counters that
# say what holds the planes form. bin = the split build, prev = the default
# (ARGS="-DMMQ6P_SPLIT=1" KERNELS=mmq6w bench/ab-prep.sh). In order: bin's
# bits (cuda-ops, the 7B-shaped GPU-vs-CPU gate, racecheck / synccheck of
# its q6_K 512-row product); the A/B interleaved (q6_K 256 / 512 / 2048
# rows on the three shapes; the planes off on prev beside them); ncu
# counters of prev's and bin's mmq6w<true> and prev's mmqr (bench/
# mmqw-diag.sh's list); prev's mmq6w<true> stall samples by SASS
# instruction; the SASS census of both builds' EXP kernel; on an H200 the
# one-row floor (h200-floor-call.sh).
# device tool: carry ["devcarry.tgz"], command `bash bench/q6split-call.sh`.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
. bench/call-lib.sh
call_start
date -u +%T; nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
timeout 150 $d/bin/test_cuda_ops > $out/ops.log 2>&1
echo "cuda-ops (bin) rc=$?"; grep -E "FAIL" $out/ops.log | head -5
. tests/cuda/q7.sh
q7_make $out/mk.log
timeout 150 $d/bin/test_cuda_model q7-gpu-vs-cpu.json > $out/q7.log 2>&1
echo "q7 (bin) rc=$?"; tail -1 $out/q7.log
for tool in racecheck synccheck; do
    timeout 90 compute-sanitizer --tool $tool --error-exitcode 9 $d/bin/inferd bench --op --backend cuda \
        --types q6_K --n 512 --shapes llama3-ffn-down --reps 2 > $out/san-$tool.log 2>&1
    echo "$tool (bin q6_K 512) rc=$?"
done
date -u +%T
for r in 1 2; do
    for v in "prev INFERD_NOTHING=1" "bin INFERD_NOTHING=1" "prev INFERD_Q6P_MB=0"; do
        read -r b var <<< "$v"
        echo "== $b $var round $r"
        call_op $b "$var" q6_K 256,512,2048 llama3-ffn-down,qwen7b-ffn-up,qwen7b-ffn-down
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
for v in "prev-q6exp prev mmq6w q6_K" "bin-q6exp bin mmq6w q6_K" "prev-q4r prev mmqr q4_K"; do
    read -r name b kn ty <<< "$v"
    timeout 90 ncu --metrics "$m" -k regex:${kn}_kernel --launch-skip 2 --launch-count 1 \
        $d/$b/inferd bench --op --backend cuda --types $ty --n 512 --shapes llama3-ffn-down --reps 3 \
        > $out/ncu-$name.txt 2>&1
    echo "== ncu $name rc=$?"
    grep -E "^ +[a-z]+__" $out/ncu-$name.txt | awk '$NF != "0" && $NF != "0.00"' | sed -E 's/ +/ /g' | cut -c1-110
done
date -u +%T
timeout 120 ncu --section SourceCounters --section WarpStateStats -k regex:mmq6w_kernel --launch-skip 2 \
    --launch-count 1 -o /tmp/src $d/prev/inferd bench --op --backend cuda --types q6_K --n 512 \
    --shapes llama3-ffn-down --reps 3 > /tmp/ncu-src.log 2>&1
echo "== ncu source (prev mmq6w<true>) rc=$?"
ncu -i /tmp/src.ncu-rep --page source --csv --print-source sass > /tmp/src.csv 2>/tmp/src.err ||
    ncu -i /tmp/src.ncu-rep --page source --csv > /tmp/src.csv 2>>/tmp/src.err
head -c 300 /tmp/src.err
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
for r in sorted(body, key=lambda r: -num(r[ci]))[:36]:
    print("%6.2f%%  %s" % (100 * num(r[ci]) / tot, r[src][:96]))
PY
for o in mmq6w mmq6w_b; do
    echo "== SASS census $o (EXP kernel)"
    cuobjdump -sass -fun '_Z12mmq6w_kernelILb1EEv14CUtensorMap_stS0_8cuda_q8kiiPfi8cuda_epiPKh' $d/sass/$o.cu.o 2>/dev/null |
        grep -oE '^ +/\*[0-9a-f]+\*/ +[A-Z0-9_.]+' | awk '{print $2}' | sed -E 's/\..*//' | sort | uniq -c | sort -rn | head -14 | tr '\n' ' '
    echo
done
date -u +%T
bash bench/h200-floor-call.sh
date -u +%T
