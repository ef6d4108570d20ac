#!/usr/bin/env bash
# bench/mmvt6-call.sh — one device call for Q6_K's one-row product
# (cuda/mmvt.cu's tensor stages, cuda_tmap_q6k), in the seeds' order:
#   1. bench/ab-call.sh: cuda-ops, the 7B-shaped model's GPU-vs-CPU gate,
#      memcheck / racecheck / synccheck of the q6_K one-row products, then
#      the A/B interleaved (AB_VARIANTS, default "prev tb bin": main's
#      binary, devcarry/tb's, this build's)
#   2. ncu of mmvt<q6_K> at 4096 x 14336, n = 1, for each variant: time,
#      DRAM, issue, shared-memory wavefronts and bank conflicts
#   3. bench/mmq_trace's stage marks of it, row copies (INFERD_MMVT_TB=0)
#      and tensor stages
# Session 45 ran it (bench/RESULTS.md). Here:
#   BUILD=build-d90 MODELS="stories260K tiny-llama-Q4_K_M" tests/cuda/device-prep.sh
#   mkdir devcarry/prev devcarry/tb; cp (stripped) binaries there; tar czf devcarry.tgz devcarry
# device tool: carry ["devcarry.tgz"], command `bash bench/mmvt6-call.sh`.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
out=${OUT:-/tmp/out}; mkdir -p "$out"
AB_VARIANTS=${AB_VARIANTS:-"prev tb bin"} AB_TYPES=${AB_TYPES:-q6_K,q4_K} AB_N=${AB_N:-1} \
    AB_SHAPES=${AB_SHAPES:-llama3-ffn-down,qwen7b-attn-q,qwen7b-attn-kv,qwen7b-ffn-up,qwen7b-ffn-down} \
    AB_PP=${AB_PP:-64} AB_TG=${AB_TG:-128} AB_SECONDS=${AB_SECONDS:-220} OUT=$out timeout 420 bash bench/ab-call.sh
echo "ab-call rc=$?" | tee -a $out/summary.txt
d=$PWD/devcarry
export LD_LIBRARY_PATH=$d/lib INFERD_SHARED=$d/shared
S=$out/summary.txt
m=l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum
m=$m,smsp__inst_executed.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,gpu__time_duration.sum
m=$m,smsp__issue_active.avg.pct_of_peak_sustained_active,sm__warps_active.avg.pct_of_peak_sustained_active
for v in ${NCU_VARIANTS:-prev tb bin}; do
    timeout 60 ncu --kernel-name regex:mmvt_kernel --launch-skip 5 --launch-count 1 --section WarpStateStats \
        --metrics $m $d/$v/inferd bench --op --backend cuda --types q6_K --n 1 --shapes llama3-ffn-down \
        --reps 3 > $out/ncu-$v.txt 2>&1
    echo "ncu $v rc=$?" | tee -a $S
    grep -E "mmvt_kernel|bank_conflicts|wavefronts|inst_executed|dram__|duration|issue_active|warps_active|Stall|Warp Cycles" \
        $out/ncu-$v.txt | head -24 >> $S
done
for tb in 0 1; do
    INFERD_MMVT_TB=$tb timeout 60 $d/bin/mmq_trace mmvt q6_K 14336 4096 1 > $out/trace-tb$tb.txt 2>&1
    echo "trace mmvt q6_K tb=$tb rc=$?" | tee -a $S
    head -3 $out/trace-tb$tb.txt >> $S
done
date -u +%T | tee -a $S
