#!/usr/bin/env bash
# bench/ncu61-call.sh — session 61, after ov61-call: the planes kernels'
# own time by ncu (real clocks, gpu__time_duration) in the product builds
# (inferd bench --op of prev / bin = OV + MB / b2 = MB / b3 = OV) and in
# the trace builds (tr/), q4_K and q6_K 4096 x 14336 x 512. Why: ov61's
# bench --op said OV 1.03-1.11x slower and MB 0.99-1.01, mmq_trace said
# OV 0.91x (q4_K) and MB 0.865x (q6_K): one of the two does not time the
# kernel. Same carry as ov61-call (devcarry.tgz; built from d6e94c2).
# Also the SM clock each ran at: mmq_trace's activations are all ones
# (cudaMemset 1) where bench --op's are random, and a tensor-bound kernel
# on random data may be held by the power limit (a form that idles the
# pipe less then runs at a lower clock): nvidia-smi's power and clock
# sampled under a long bench --op of prev and b3.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
. bench/call-lib.sh
call_head
m="--clock-control none --metrics gpu__time_duration.sum,sm__cycles_elapsed.avg.per_second"
for v in prev bin b2 b3; do
    for t in q4_K q6_K; do
        timeout 60 ncu $m --kernel-name regex:"mmq4p_|mmq6w_" --launch-skip 2 --launch-count 3 \
            $d/$v/inferd bench --op --backend cuda --types $t --n 512 --shapes llama3-ffn-down --reps 3 > $out/ncu-$v-$t.txt 2>&1
        echo "$v $t (inferd): $(grep -E 'gpu__time_duration|per_second' $out/ncu-$v-$t.txt | awk '{print $(NF-1), $NF}' | tr '\n' ' ')"
    done
done
for v in prev ovmb mb ov; do
    for k in "mmq4p q4_K" "mmq6p q6_K"; do
        timeout 60 ncu $m --kernel-name regex:"mmq4p_|mmq6w_" --launch-skip 3 --launch-count 3 \
            $d/tr/$v $k 14336 4096 512 > $out/ncu-tr-$v-${k%% *}.txt 2>&1
        echo "$v $k (trace): $(grep -E 'gpu__time_duration|per_second' $out/ncu-tr-$v-${k%% *}.txt | awk '{print $(NF-1), $NF}' | tr '\n' ' ')"
    done
done
for v in prev bin b2 b3; do
    nvidia-smi --query-gpu=power.draw,clocks.sm,temperature.gpu --format=csv,noheader -lms 50 > $out/smi-$v.txt &
    sp=$!
    r=$(timeout 60 $d/$v/inferd bench --op --backend cuda --types q4_K --n 512 --shapes llama3-ffn-down \
        --reps 4000 2>&1 | grep -E '^\| q4_K' | cut -d'|' -f2-5)
    kill $sp; wait $sp 2>/dev/null
    echo "$v, 4000 products back to back: $r"
    echo "$v q4_K 512 under load (power W, SM MHz, temp; the top 5 by power): $(sort -t, -k1 -rn $out/smi-$v.txt |
        head -5 | tr '\n' ';')"
done
date -u +%T
