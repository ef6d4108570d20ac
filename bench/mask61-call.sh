#!/usr/bin/env bash
# bench/mask61-call.sh — session 61: how much of the planes kernels' trace
# time is the marks'. mmq_trace built three ways (cuda/trace.cuh
# CUDA_TR_MASK): full = every mark (the default), land = land0 only (the
# period, one mark a super-block), none = no stage mark (the block's start
# and end only); each back to back and by ncu (cycles at real clocks),
# beside the product build's kernel (inferd bench --op, main's engine) in
# the same call; then where the product kernel's warps wait, without marks:
# ncu's warp-state samples per SASS instruction (SourceCounters) of one
# mmq4p launch of the product (diag_stalls: the 40 with most samples; the
# feed warps' waits are among them). A ~14 MB carry:
#   mkdir -p devmask/prev devmask/lib; nvcc <build-d90's mmq_trace command>
#   -o devmask/full (and -DCUDA_TR_MASK=0x2u -o devmask/land,
#   -DCUDA_TR_MASK=0u -o devmask/none); cp build-d90's inferd to
#   devmask/prev and the libraries ldd lists (tests/cuda/device-prep.sh's)
#   to devmask/lib; strip; tar czf devmask.tgz devmask
# device tool: carry ["devmask.tgz"], command `bash bench/mask61-call.sh`.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
. bench/call-lib.sh
call_head devmask
for r in 1 2; do
    for v in full land none; do
        for k in "mmq4p q4_K" "mmq6p q6_K"; do
            call_tr "$v" $d/$v $k 14336 4096 512
        done
    done
done
m="--clock-control none --metrics gpu__time_duration.sum,sm__cycles_elapsed.avg.per_second"
for v in full land none; do
    for k in "mmq4p q4_K" "mmq6p q6_K"; do
        timeout 60 ncu $m --kernel-name regex:"mmq4p_|mmq6w_" --launch-skip 3 --launch-count 3 $d/$v $k 14336 4096 512 \
            > $out/ncu-$v-${k%% *}.txt 2>&1
        echo "$v $k (ncu): $(grep -E 'gpu__time_duration|per_second' $out/ncu-$v-${k%% *}.txt | awk '{print $(NF-1), $NF}' |
            tr '\n' ' ')"
    done
done
for t in q4_K q6_K; do
    timeout 60 ncu $m --kernel-name regex:"mmq4p_|mmq6w_" --launch-skip 2 --launch-count 3 \
        $d/prev/inferd bench --op --backend cuda --types $t --n 512 --shapes llama3-ffn-down --reps 3 > $out/ncu-prev-$t.txt 2>&1
    echo "product $t (ncu): $(grep -E 'gpu__time_duration|per_second' $out/ncu-prev-$t.txt | awk '{print $(NF-1), $NF}' |
        tr '\n' ' ')"
done
. bench/diag-lib.sh
# (bench/s62-call.sh runs the samples first and sets MASK61_NO_SRC)
[ -n "${MASK61_NO_SRC:-}" ] || diag_src_q4 $d/prev/inferd $out 40
timeout 30 $d/land mmq4p q4_K 14336 4096 512 > $out/marks-land.txt 2>&1
sed -n 2,2p $out/marks-land.txt | cut -c1-200; sed -n 26,29p $out/marks-land.txt | cut -c1-100
date -u +%T
