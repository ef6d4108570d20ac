#!/usr/bin/env bash
# bench/ncu61-call.sh — session 61, after ov61-call: the planes kernels'
# own time by ncu (real clocks, gpu__time_duration) in the product builds
# (inferd bench --op of prev / bin = OV + MB / b2 = MB / b3 = OV) and in
# the trace builds (tr/), q4_K and q6_K 4096 x 14336 x 512. Why: ov61's
# bench --op said OV 1.03-1.11x slower and MB 0.99-1.01, mmq_trace said
# OV 0.91x (q4_K) and MB 0.865x (q6_K): one of the two does not time the
# kernel. Same carry as ov61-call (devcarry.tgz; built from d6e94c2).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
. bench/call-lib.sh
call_head
m="--clock-control none --metrics gpu__time_duration.sum"
for v in prev bin b2 b3; do
    for t in q4_K q6_K; do
        timeout 60 ncu $m --kernel-name regex:"mmq4p_|mmq6w_" --launch-skip 2 --launch-count 3 \
            $d/$v/inferd bench --op --backend cuda --types $t --n 512 --shapes llama3-ffn-down --reps 3 > $out/ncu-$v-$t.txt 2>&1
        echo "$v $t (inferd): $(grep -E 'gpu__time_duration' $out/ncu-$v-$t.txt | awk '{print $NF}' | tr '\n' ' ')"
    done
done
for v in prev ovmb mb ov; do
    for k in "mmq4p q4_K" "mmq6p q6_K"; do
        timeout 60 ncu $m --kernel-name regex:"mmq4p_|mmq6w_" --launch-skip 3 --launch-count 3 \
            $d/tr/$v $k 14336 4096 512 > $out/ncu-tr-$v-${k%% *}.txt 2>&1
        echo "$v $k (trace): $(grep -E 'gpu__time_duration' $out/ncu-tr-$v-${k%% *}.txt | awk '{print $NF}' | tr '\n' ' ')"
    done
done
date -u +%T
