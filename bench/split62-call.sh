#!/usr/bin/env bash
# bench/split62-call.sh — session 62's form for #11's q4_K 512-row row
# (cuda/mmq4p.cu MMQ4P_SPLIT=1: a warpgroup's second plane waits for the
# other warpgroup's latest min term to be issued, so each min-term step
# queues behind 8 steps of the other warpgroup's planes instead of 16;
# bench/RESULTS.md session 62 has the prediction), against main at its
# defaults (prev), on the same bytes: bin's bits first (cuda-ops, the
# 7B-shaped GPU-vs-CPU gate, racecheck and synccheck of q4_K 4096 x 14336 x
# 512), then bench --op's planes rows (call_rows) two rounds interleaved,
# then each kernel's cycles by ncu at real clocks (q4_K 512; q6_K's kernel,
# mmq6w, is the same in both builds: the control).
#   ARGS="-DMMQ4P_SPLIT=1" KERNELS="mmq4p" bench/ab-prep.sh   (~3 min here)
# device tool: carry ["devcarry.tgz"], command `bash bench/split62-call.sh`.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
. bench/call-lib.sh
call_head
call_bits q4_K 512 llama3-ffn-down
for r in 1 2; do
    for v in prev bin; do
        echo "== round $r $v"
        call_rows $v
    done
done
m="--clock-control none --metrics gpu__time_duration.sum,sm__cycles_elapsed.avg.per_second"
for v in prev bin; do
    timeout 60 ncu $m --kernel-name regex:"mmq4p_" --launch-skip 2 --launch-count 3 $d/$v/inferd bench --op \
        --backend cuda --types q4_K --n 512 --shapes llama3-ffn-down --reps 3 > $out/ncu-$v.txt 2>&1
    echo "$v mmq4p (ncu): $(grep -E 'gpu__time_duration|per_second' $out/ncu-$v.txt | awk '{print $(NF-1), $NF}' |
        tr '\n' ' ')"
done
date -u +%T
