#!/usr/bin/env bash
# bench/kh57-call.sh — session 57: the planes frame's rings in k-halves
# (cuda/mmqp.cuh MMQP_KH=1: bin) against the rings in planes (MMQP_KH=0:
# prev, main's tree at its defaults), for mmq4p (Q4_K) and mmq6w<true>
# (Q6_K) at 256 / 512 / 2048 rows. In order: bin's bits (cuda-ops, the
# 7B-shaped GPU-vs-CPU gate, memcheck / racecheck of the q4_K and q6_K
# 512-row products); bench --op A/B, two rounds interleaved (and bin
# without turns); mmq_trace back to back (prev's and bin's own builds) and
# bin's mmq4p marks; the 7B-shaped pp512; on an H200 bench/table57-call.sh
# with bin.
#   ARGS="-DMMQP_KH=1" KERNELS="mmq4p mmq6w" bench/ab-prep.sh
#   cp build-d90/bench/mmq_trace devcarry/prev/ && tar czf devcarry.tgz devcarry
# device tool: carry ["devcarry.tgz"], command `bash bench/kh57-call.sh`.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
. bench/call-lib.sh
call_head
call_ops_q7
# (lean: the session's device time was nearly spent; test_cuda's prewarm
# list and synccheck left out, the kernels' names and barriers unchanged)
for ty in q4_K q6_K; do
    for tool in memcheck racecheck; do
        call_san $tool $ty 512 llama3-ffn-down $tool-$ty
    done
done
date -u +%T
# bin without turns too (INFERD_Q6P_TURNS=0): the k-halves change when a
# warpgroup's products start, which the turns order
for r in 1 2; do
    for spec in prev: bin: bin:INFERD_Q6P_TURNS=0; do
        echo "== $spec round $r"
        call_op ${spec%%:*} "${spec#*:}" q4_K,q6_K 256,512,2048 llama3-ffn-down,qwen7b-ffn-up,qwen7b-ffn-down |
            cut -d'|' -f2-5
    done
done 2>&1 | tee $out/ab.txt
for r in 1 2; do
    for v in prev bin; do
        for k in mmq4p:q4_K mmq6p:q6_K; do
            echo "$v ${k%%:*}: $(timeout 30 $d/$v/mmq_trace ${k%%:*} ${k##*:} 14336 4096 512 2>&1 | head -1)"
        done
    done
done | tee $out/trace.txt
timeout 30 $d/bin/mmq_trace mmq4p q4_K 14336 4096 512 > $out/marks-q4p.txt 2>&1
sed -n 2,8p $out/marks-q4p.txt | cut -c1-160; sed -n 26,30p $out/marks-q4p.txt | cut -c1-160
for v in prev bin; do
    echo "q7 $v: $(call_q7 $v "" 512 32 | tr -s ' ' | tr '\n' ' ')"
done
date -u +%T
# (session 58) what paces the planes form by batch size: 256 rows ran at
# ~120 us and 512 at ~128 (session 55), though 256 is half of 512's tiles
# (224 against 448 blocks of one a SM: 2 waves against 4 on 132 SMs). A
# sweep of n on prev, then ncu (one launch each, base clocks) of mmq4p at
# 256 and 512: the DRAM's and L2's rates, the tensor pipe, the duration.
echo "== n sweep (prev; q4_K, q6_K 4096 x 14336)"
call_op prev "" q4_K,q6_K 128,256,384,512,640,1024 llama3-ffn-down | cut -d'|' -f2-5 | tee $out/nsweep.txt
m=gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,dram__bytes_read.sum
m=$m,lts__t_bytes.sum,lts__throughput.avg.pct_of_peak_sustained_elapsed,sm__cycles_active.avg
m=$m,"regex:sm__pipe_tensor_[a-z_]*cycles_active\.avg\.pct_of_peak_sustained_active"
for n in 256 512; do
    echo "## mmq4p n=$n" >> $out/ncu.txt
    timeout 60 ncu --kernel-name regex:"mmq4p_" --launch-skip 3 --launch-count 1 --metrics "$m" \
        $d/prev/mmq_trace mmq4p q4_K 14336 4096 $n >> $out/ncu.txt 2>&1
    echo "ncu mmq4p $n rc=$?"
done
grep -E "^## |duration|dram__|lts__|tensor|cycles_active" $out/ncu.txt | sed -E 's/ +/ /g' | cut -c1-150
date -u +%T
g=$(nvidia-smi --query-gpu=name --format=csv,noheader)
# on an H200 #11's table with bin, the halves A/B, the ready time and the
# floor: bench/table57-call.sh (it unpacks the carry again: a few seconds)
case "$g" in *H200*) bash bench/table57-call.sh ;; esac
date -u +%T
