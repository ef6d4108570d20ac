#!/usr/bin/env bash
# bench/q6split-call.sh — session 54's A/B of mmq6w<true>'s split form
# (MMQ6P_SPLIT=1 at fbd47a4, withdrawn: the two planes into two accumulator sets, the shift under
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
. bench/diag-lib.sh
call_head
call_bits q6_K 512 llama3-ffn-down
date -u +%T
for r in 1 2; do
    for v in "prev INFERD_NOTHING=1" "bin INFERD_NOTHING=1" "prev INFERD_Q6P_MB=0"; do
        read -r b var <<< "$v"
        echo "== $b $var round $r"
        call_op $b "$var" q6_K 256,512,2048 llama3-ffn-down,qwen7b-ffn-up,qwen7b-ffn-down
    done
done
date -u +%T
m=$(diag_metrics)
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
diag_stalls /tmp/src.ncu-rep 36
for o in mmq6w mmq6w_b; do
    echo "== SASS census $o (EXP kernel)"
    cuobjdump -sass -fun '_Z12mmq6w_kernelILb1EEv14CUtensorMap_stS0_8cuda_q8kiiPfi8cuda_epiPKh' $d/sass/$o.cu.o 2>/dev/null |
        grep -oE '^ +/\*[0-9a-f]+\*/ +[A-Z0-9_.]+' | awk '{print $2}' | sed -E 's/\..*//' | sort | uniq -c | sort -rn | head -14 | tr '\n' ' '
    echo
done
date -u +%T
bash bench/h200-floor-call.sh
date -u +%T
