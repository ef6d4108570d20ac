#!/usr/bin/env bash
# bench/ov61-call.sh — session 61: the planes kernels' next first plane
# queued under their own chain (cuda/mmq4p.cu MMQ4P_OV=1, cuda/mmq6w.cu
# MMQ6P_OV=1: "OV") and the planes frame's one full barrier a super-block
# (cuda/mmqp.cuh MMQP_MB=1, mmq4p and mmq6w<true>), against main at its
# defaults (prev). bin = OV + MB (its bits: cuda-ops,
# the 7B-shaped gate, racecheck of q4_K and q6_K 4096 x
# 14336 x 512; no synccheck, for time), b2 = MB, b3 = OV (inferd only); bench --op two rounds
# interleaved; mmq_trace (tr/: the four builds) back to back and the marks.
#   ARGS="-DMMQ4P_OV=1 -DMMQ6P_OV=1 -DMMQP_MB=1" KERNELS="mmq4p mmq6w" bench/ab-prep.sh
#   b2 / b3: a copy of build-d90 with mmq4p.cu.o / mmq6w.cu.o compiled with
#   MB / both OV and inferd relinked (devcarry/b2, b3);
#   tr/{prev,mb,ov,ovmb}: build-d90's mmq_trace command with the flags;
#   strip devcarry/*/*; tar czf devcarry.tgz devcarry
# The switches were withdrawn after this call (RESULTS session 61); their
# code is at d6e94c2: build the carry from that tree.
# device tool: carry ["devcarry.tgz"], command `bash bench/ov61-call.sh`.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
. bench/call-lib.sh
call_head
call_bits q4_K 512 llama3-ffn-down racecheck
call_san racecheck q6_K 512 llama3-ffn-down racecheck-q6
date -u +%T
for r in 1 2; do
    for v in prev bin b2 b3; do
        echo "== $v round $r"
        call_rows $v
    done
done 2>&1 | tee $out/ab.txt
for r in 1 2; do
    for v in prev ovmb mb ov; do
        call_tr "$v mmq4p" $d/tr/$v mmq4p q4_K 14336 4096 512
    done
    for v in prev ovmb mb ov; do
        call_tr "$v mmq6p" $d/tr/$v mmq6p q6_K 14336 4096 512
    done
done | tee $out/trace.txt
for v in ovmb mb ov; do
    for k in "mmq4p q4_K" "mmq6p q6_K"; do
        timeout 30 $d/tr/$v $k 14336 4096 512 > $out/marks-$v-${k%% *}.txt 2>&1
        echo "== marks $v $k"; sed -n 4,4p $out/marks-$v-${k%% *}.txt | cut -c1-160
        sed -n 26,29p $out/marks-$v-${k%% *}.txt | cut -c1-160
    done
done
# SASS census: the warpgroup waits / arrives in each build's planes kernels
for o in $d/sass/*.cu.o; do
    cuobjdump -sass "$o" > $out/$(basename "$o").sass 2>/dev/null
    echo "$(basename "$o"): DEPBAR $(grep -c 'WARPGROUP.DEPBAR' $out/$(basename "$o").sass)," \
        "ARRIVE $(grep -c 'WARPGROUP.ARRIVE' $out/$(basename "$o").sass), STL $(grep -c 'STL' $out/$(basename "$o").sass)"
done
date -u +%T
