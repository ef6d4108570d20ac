#!/usr/bin/env bash
# bench/mmvt-diag.sh — what holds the one-row K-quant product (mmvt) on the
# 4096 x 14336 weight, issue #11's q6_K n = 1 row (15.85 us, target 13.4):
#   1. bench/read_probe: a plain read of the weight's bytes, back to back
#      on one buffer (as bench --op reads a weight) and cold (a ring of
#      buffers): the floor with launch and ramp, and how much the 50 MB L2
#      gives a 33 MB (q4_K) against a 48 MB (q6_K) weight
#   2. bench --op n = 1, q4_K / q5_K / q6_K, two shapes
#   3. ncu of mmvt for q4_K and q6_K: DRAM bytes, the L2 hit rate, issue
#      activity and the warp stall reasons, with the L2 as bench --op leaves
#      it (--cache-control none) and flushed (all)
# Needs devcarry/ (tests/cuda/device-prep.sh); leaves $OUT/diag.txt.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
. bench/diag-lib.sh
diag_setup diag diag.txt
nvcc -O3 -std=c++17 -arch=sm_90 bench/read_probe.cu -o $o/read_probe 2>&1 | tail -3 >> $S
timeout 60 $o/read_probe >> $S 2>&1
echo "read_probe rc=$?" >> $S
for r in 1 2; do
    timeout 60 $d/bin/inferd bench --op --backend cuda --types q4_K,q5_K,q6_K --n 1 \
        --shapes llama3-ffn-down,qwen7b-ffn-down --reps 30 > $o/op.r$r.txt 2>&1
    grep -E "q[456]_K" $o/op.r$r.txt | sed "s/^/r$r /" >> $S
done
m=gpu__time_duration.sum,dram__bytes_read.sum,lts__t_sector_hit_rate.pct,sm__inst_executed.sum
m=$m,smsp__issue_active.avg.pct_of_peak_sustained_active,sm__warps_active.avg.pct_of_peak_sustained_active
m=$m,dram__throughput.avg.pct_of_peak_sustained_elapsed
m=$m,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum
# the pipes (which one the instructions queue on) and the stall reasons a
# issued instruction
m=$m,"regex:sm__inst_executed_pipe_[a-z_]*\.avg\.pct_of_peak_sustained_active"
m=$m,"regex:sm__pipe_[a-z_]*_cycles_active\.avg\.pct_of_peak_sustained_active"
m=$m,"regex:smsp__average_warps_issue_stalled_[a-z_]*_per_issue_active\.ratio"
for t in ${DIAG_TYPES:-q4_K q6_K}; do for cc in ${DIAG_CC:-none}; do
    timeout 90 ncu --cache-control $cc --metrics "$m" -k regex:mmvt_kernel \
        --launch-skip 6 --launch-count 1 $d/bin/inferd bench --op --backend cuda --types $t --n 1 \
        --shapes llama3-ffn-down --reps 4 > $o/ncu-$t-$cc.txt 2>&1
    echo "== ncu $t cache-control $cc rc=$?" >> $S
    grep -E "^ +[a-z]+__" $o/ncu-$t-$cc.txt | awk '$NF != "0" && $NF != "0.00"' >> $S
done; done
# the SASS of the one-row Q6_K and Q4_K kernels: opcodes by static count
cuobjdump -sass $d/bin/inferd 2>/dev/null | awk '/Function : / {f = $3 ~ /mmvt_kernel/ ? $3 : ""} f && /^ +\/\*[0-9a-f]+\*\// {
    op=$2; if (op ~ /^@/) op=$3; sub(/\..*/, "", op); c[f" "op]++} END {for (k in c) print c[k], k}' |
    sort -k2,2 -k1,1nr > $o/sass-ops.txt
grep -E "ILi14ELi32ELi3ELi8ELb1E|ILi12ELi32ELi3ELi14ELb1E" $o/sass-ops.txt | head -80 >> $S
cp $S $OUT/ 2>/dev/null
tar czf $OUT/diag.tgz -C /tmp o-diag 2>/dev/null
