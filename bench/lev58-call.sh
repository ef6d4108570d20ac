#!/usr/bin/env bash
# bench/lev58-call.sh — session 58: what paces mmq4p's super-block, by
# lever probes of bench/mmq_trace (cuda/mmq4p.cu MMQ4P_LEVER; wrong results,
# timing only): prev = build-d90's mmq_trace (main), lev1 = no min term,
# lev2 = no v1 chain. Back to back at #11's 4096 x 14336 x 512, two rounds,
# then each one's marks. Carry devlev.tgz (mmq_trace links cudart
# statically: no libraries):
#   mkdir -p devlev; cp build-d90/bench/mmq_trace devlev/prev
#   nvcc <mmq_trace's command> -DMMQ4P_LEVER=N -o devlev/levN (N = 1, 2)
#   strip devlev/*; tar czf devlev.tgz devlev
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
. bench/call-lib.sh
call_head devlev
for r in 1 2; do
    for v in prev lev1 lev2; do
        call_tr "$v" $d/$v mmq4p q4_K 14336 4096 512
    done
done
for v in prev lev1 lev2; do
    timeout 30 $d/$v mmq4p q4_K 14336 4096 512 > $out/marks-$v.txt 2>&1
    echo "== marks $v"; sed -n 2,4p $out/marks-$v.txt | cut -c1-160; sed -n 26,29p $out/marks-$v.txt | cut -c1-160
done
date -u +%T
