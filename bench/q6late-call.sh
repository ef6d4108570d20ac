#!/usr/bin/env bash
# bench/q6late-call.sh — session 54: mmq6w<true>'s late form (MMQ6P_LATE=1
# at ef6738e, the default since 8ae7834 and the switch gone: both planes
# into two accumulator sets, one wait, v1 = 32 D1 - 4095 S + D2 after it)
# against the form before it. bin = the late build, prev = the default
# (ARGS="-DMMQ6P_LATE=1" KERNELS=mmq6w bench/ab-prep.sh), devcarry/lev =
# mmq_trace builds tr0 (default) and trlate. In order: bin's bits; the A/B
# (q6_K 256 / 512 / 2048 on the three shapes, two rounds); mmq_trace
# back to back and trlate's marks; where each build's EXP kernel waits
# (its WARPGROUP / IGMMA instructions in order); on an H200 the floor.
# device tool: carry ["devcarry.tgz"], command `bash bench/q6late-call.sh`.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
. bench/call-lib.sh
call_head
call_bits q6_K 512 llama3-ffn-down
date -u +%T
for r in 1 2; do
    for b in prev bin; do
        echo "== $b round $r"
        call_op $b "" q6_K 256,512,2048 llama3-ffn-down,qwen7b-ffn-up,qwen7b-ffn-down | cut -d'|' -f3-5
    done
done 2>&1 | tee $out/ab.txt
for r in 1 2; do
    for t in tr0 trlate; do
        echo "$t: $(timeout 30 $d/lev/$t mmq6p q6_K 14336 4096 512 2>&1 | head -1)"
    done
done
timeout 30 $d/lev/trlate mmq6p q6_K 14336 4096 512 > $out/marks-late.txt 2>&1
sed -n 2,4p $out/marks-late.txt | cut -c1-150; sed -n 24,28p $out/marks-late.txt | cut -c1-150
for o in mmq6w mmq6w_b; do
    echo "== $o EXP kernel: wgmma waits and issues in order"
    cuobjdump -sass -fun '_Z12mmq6w_kernelILb1EEv14CUtensorMap_stS0_8cuda_q8kiiPfi8cuda_epiPKh' $d/sass/$o.cu.o 2>&1 |
        grep -nE 'WARPGROUP|IGMMA|WARPSYNC|BAR' | sed -E 's/ +/ /g; s@/\*[0-9a-f]+\*/@@g' | cut -c1-80 | head -48
done > $out/sass.txt
grep -c "" $out/sass.txt; head -c 3000 $out/sass.txt
date -u +%T
bash bench/h200-floor-call.sh
date -u +%T
