#!/usr/bin/env bash
# bench/tm59-call.sh — session 59: mmq4p with each warpgroup handing its
# turn over after its min term's step (cuda/mmq4p.cu MMQ4P_TM=1: bin)
# against main at its defaults (prev). bin's bits (cuda-ops, the 7B-shaped
# gate, racecheck and synccheck of the q4_K 512-row product: the turn
# barrier's arrivals moved), bench --op q4_K two rounds interleaved (q6_K
# as a control: mmq6w hands its turn as before), mmq_trace back to back
# and bin's marks, and those of TM's no-min-term lever (tl1: what the min
# term still costs); on an H200 #11's table too (bench/table57-call.sh, bin).
#   ARGS="-DMMQ4P_TM=1" KERNELS="mmq4p" bench/ab-prep.sh
#   ninja -C build-ab bench/mmq_trace; cp build-d90/bench/mmq_trace devcarry/prev/
#   tl1: build-ab's mmq_trace nvcc command with -DMMQ4P_LEVER=1 -o devcarry/tl1/mmq_trace
#   strip devcarry/*/*; tar czf devcarry.tgz devcarry (~40 MB)
# device tool: carry ["devcarry.tgz"], command `bash bench/tm59-call.sh`.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
. bench/call-lib.sh
call_head
call_bits q4_K 512 llama3-ffn-down
date -u +%T
for r in 1 2; do
    for v in prev bin; do
        echo "== $v round $r"
        call_op $v "" q4_K 256,512,2048 llama3-ffn-down | cut -d'|' -f2-5
        call_op $v "" q4_K,q6_K 512 qwen7b-ffn-up,qwen7b-ffn-down | cut -d'|' -f2-5
        call_op $v "" q6_K 512 llama3-ffn-down | cut -d'|' -f2-5
    done
done 2>&1 | tee $out/ab.txt
for r in 1 2; do
    for v in prev bin tl1; do
        call_tr "$v mmq4p" $d/$v/mmq_trace mmq4p q4_K 14336 4096 512
    done
done | tee $out/trace.txt
for v in bin tl1; do
    timeout 30 $d/$v/mmq_trace mmq4p q4_K 14336 4096 512 > $out/marks-$v.txt 2>&1
    echo "== marks $v"; sed -n 2,4p $out/marks-$v.txt | cut -c1-160; sed -n 26,28p $out/marks-$v.txt | cut -c1-160
done
for r in 1 2; do for v in prev bin; do echo "q7 $v: $(call_q7 $v "" 512 32 | tr -s ' ' | tr '\n' ' ')"; done; done
date -u +%T
case "$(nvidia-smi --query-gpu=name --format=csv,noheader)" in *H200*) bash bench/table57-call.sh ;; esac
date -u +%T
