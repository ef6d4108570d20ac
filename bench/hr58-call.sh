#!/usr/bin/env bash
# bench/hr58-call.sh — session 58: mmq4p (cuda/mmq4p.cu) against main's
# tree at its defaults (prev): b2 = its weight heads queued by the row warp
# (MMQ4P_HR=1), bin = HR and (float) v1 without the conversion
# (MMQ4P_FC=1), b3 = HR and the k-halves rings (MMQP_KH=1). In order:
# bin's bits (cuda-ops, the 7B-shaped gate, memcheck and racecheck of the
# q4_K 512-row product); bench --op, two rounds interleaved; mmq_trace back
# to back and the marks of bin, b2, b3; the 7B-shaped pp512.
#   ARGS="-DMMQ4P_HR=1 -DMMQ4P_FC=1" KERNELS="mmq4p" bench/ab-prep.sh
#   build-ab2 with -Dcuda_args="-DMMQ4P_HR=1", build-ab3 "-DMMQ4P_HR=1 -DMMQP_KH=1"
#   (ninja daemon/inferd bench/mmq_trace in each); then
#   cp build-d90/bench/mmq_trace devcarry/prev/; mkdir devcarry/b2 devcarry/b3
#   cp build-abN/daemon/inferd build-abN/bench/mmq_trace devcarry/bN/; strip devcarry/*/*
#   tar czf devcarry.tgz devcarry
# device tool: carry ["devcarry.tgz"], command `bash bench/hr58-call.sh`.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
. bench/call-lib.sh
call_head
call_bits q4_K 512 llama3-ffn-down "memcheck racecheck"
date -u +%T
for r in 1 2; do
    for v in prev b2 bin b3; do
        echo "== $v round $r"
        call_op $v "" q4_K 256,512,2048 llama3-ffn-down,qwen7b-ffn-up,qwen7b-ffn-down | cut -d'|' -f2-5
        call_op $v "" q6_K 256,512 llama3-ffn-down,qwen7b-ffn-up | cut -d'|' -f2-5
    done
done 2>&1 | tee $out/ab.txt
for r in 1 2; do
    for v in prev b2 bin b3; do
        call_tr "$v mmq4p" $d/$v/mmq_trace mmq4p q4_K 14336 4096 512
    done
done | tee $out/trace.txt
for v in b2 bin b3; do
    timeout 30 $d/$v/mmq_trace mmq4p q4_K 14336 4096 512 > $out/marks-$v.txt 2>&1
    echo "== marks $v"; sed -n 2,8p $out/marks-$v.txt | cut -c1-160; sed -n 26,29p $out/marks-$v.txt | cut -c1-160
done
for v in prev b2 bin b3; do
    echo "q7 $v: $(call_q7 $v "" 512 32 | tr -s ' ' | tr '\n' ' ')"
done
date -u +%T
