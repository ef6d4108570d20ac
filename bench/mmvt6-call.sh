#!/usr/bin/env bash
# bench/mmvt6-call.sh — one device call for Q6_K's one-row product
# (cuda/mmvt.cu's tensor stages, cuda_tmap_q6k), in the seeds' order:
#   1. bench/ab-call.sh: cuda-ops, the 7B-shaped model's GPU-vs-CPU gate,
#      memcheck / racecheck / synccheck of the q6_K one-row products, then
#      the A/B interleaved (AB_VARIANTS, default "prev bin": a previous
#      build's binary in devcarry/prev against this build)
#   2. ncu of mmvt<q6_K> at 4096 x 14336, n = 1, for each NCU_VARIANTS
#      entry (DIR:VARS): time, DRAM, issue, shared-memory wavefronts and
#      bank conflicts
#   3. bench/mmq_trace's stage marks of it (MMVT_TRACE_ENV: variables for
#      a second run, e.g. a knob under test)
# Session 45 ran it (bench/RESULTS.md). Here:
#   BUILD=build-d90 MODELS="stories260K tiny-llama-Q4_K_M" tests/cuda/device-prep.sh
#   mkdir devcarry/prev; cp a previous build's (stripped) inferd there; tar czf devcarry.tgz devcarry
# device tool: carry ["devcarry.tgz"], command `bash bench/mmvt6-call.sh`.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
out=${OUT:-/tmp/out}; mkdir -p "$out"
# the prewarm list and its coverage of the dispatcher's table (test_cuda)
tar xzf devcarry.tgz && LD_LIBRARY_PATH=$PWD/devcarry/lib INFERD_SHARED=$PWD/devcarry/shared timeout 120 \
    devcarry/bin/test_cuda > $out/selftest.log 2>&1
echo "selftest rc=$?" | tee $out/summary0.txt
grep -E "mmvt|FAIL" $out/selftest.log | head -40 >> $out/summary0.txt
AB_VARIANTS=${AB_VARIANTS:-"prev bin"} AB_TYPES=${AB_TYPES:-q6_K,q4_K} AB_N=${AB_N:-1} \
    AB_SHAPES=${AB_SHAPES:-llama3-ffn-down,qwen7b-attn-q,qwen7b-attn-kv,qwen7b-ffn-up,qwen7b-ffn-down} \
    AB_PP=${AB_PP:-64} AB_TG=${AB_TG:-128} AB_SECONDS=${AB_SECONDS:-220} OUT=$out timeout 420 bash bench/ab-call.sh
echo "ab-call rc=$?" | tee -a $out/summary.txt
d=$PWD/devcarry
export LD_LIBRARY_PATH=$d/lib INFERD_SHARED=$d/shared
S=$out/summary.txt
m=l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum
m=$m,smsp__inst_executed.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,gpu__time_duration.sum
m=$m,smsp__issue_active.avg.pct_of_peak_sustained_active,sm__warps_active.avg.pct_of_peak_sustained_active
for spec in ${NCU_VARIANTS:-prev: bin:}; do
    v=${spec%%:*}; ev=${spec#*:}
    env $ev timeout 60 ncu --kernel-name regex:mmvt_kernel --launch-skip 5 --launch-count 1 --section WarpStateStats \
        --metrics $m $d/$v/inferd bench --op --backend cuda --types q6_K --n 1 --shapes llama3-ffn-down \
        --reps 3 > $out/ncu-$v.txt 2>&1
    echo "ncu $v rc=$?" | tee -a $S
    grep -E "mmvt_kernel|bank_conflicts|wavefronts|inst_executed|dram__|duration|issue_active|warps_active|Stall|Warp Cycles" \
        $out/ncu-$v.txt | head -24 >> $S
done
for v in "" ${MMVT_TRACE_ENV:-}; do
    env $v timeout 60 $d/bin/mmq_trace mmvt q6_K 14336 4096 1 > $out/trace.txt 2>&1
    echo "trace mmvt q6_K ${v:-defaults} rc=$?" | tee -a $S
    cat $out/trace.txt >> $S
done
date -u +%T | tee -a $S
# the tool brings back a few files: all but the summaries in one archive
cat $out/summary0.txt $S > $out/sum.txt
( cd $out && tar czf logs.tgz --exclude=logs.tgz --exclude=sum.txt --exclude=ab.md . && \
  find . -mindepth 1 ! -name logs.tgz ! -name sum.txt ! -name ab.md -delete )
