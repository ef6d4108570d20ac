#!/usr/bin/env bash
# bench/probe56-call.sh — session 56's first call: on an H200, #11's table
# (bench/table55-call.sh) first; on any GPU, what paces the one-row Q6_K
# product where the stream is fast (the L2-held 4096 x 8192 weight, the
# H200's rate on an H100) and at #11's shape: mmq_trace's mmvt with
# INFERD_TR_PROBE 0 (as built), 1 (no terms), 2 (Q6_K's word reads
# conflict-free, wrong values), 3 (no copies), two rounds, beside a plain
# read and the bulk pattern of the same bytes; ncu's shared-memory and
# warp-state counters of mmvt there.
#   BUILD=build-d90 MODELS=stories260K tests/cuda/device-prep.sh
# device tool: carry ["devcarry.tgz"], command `bash bench/probe56-call.sh`.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
. bench/call-lib.sh
call_head
g=$(nvidia-smi --query-gpu=name --format=csv,noheader)
case "$g" in *H200*) bash bench/table55-call.sh > $out/table55.txt 2>&1; tail -60 $out/table55.txt ;; esac
nvcc -O3 -std=c++17 -arch=sm_90a -I. -o /tmp/read_probe bench/read_probe.cu &
wait
date -u +%T
timeout 60 /tmp/read_probe 27.53 48.17
timeout 30 /tmp/read_probe bulk 4096 6720 32 1680 3 | tail -2
for r in 1 2; do
    for s in 8192 14336; do
        for p in 0 1 2 3; do
            echo "probe=$p $(INFERD_TR_PROBE=$p timeout 30 $d/bin/mmq_trace mmvt q6_K $s 4096 1 2>&1 | head -1)"
        done
    done
done
for p in 0 1 2; do
    INFERD_TR_PROBE=$p timeout 30 $d/bin/mmq_trace mmvt q6_K 8192 4096 1 > $out/marks-p$p.txt 2>&1
done
sed -n 2,9p $out/marks-p0.txt | cut -c1-170
m=gpu__time_duration.sum,l1tex__data_bank_reads.avg.pct_of_peak_sustained_elapsed
m=$m,l1tex__data_bank_writes.avg.pct_of_peak_sustained_elapsed,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum
m=$m,l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum,smsp__issue_active.avg.pct_of_peak_sustained_active
m=$m,smsp__inst_executed.sum,l1tex__throughput.avg.pct_of_peak_sustained_active,lts__t_sectors_srcunit_tex.sum
for p in 0 2; do
    echo "## probe $p" >> $out/ncu.txt
    INFERD_TR_PROBE=$p timeout 120 ncu --kernel-name regex:"mmvt_" --launch-skip 5 --launch-count 1 \
        --metrics "$m" --section WarpStateStats $d/bin/mmq_trace mmvt q6_K 8192 4096 1 >> $out/ncu.txt 2>&1
    echo "ncu probe $p rc=$?"
done
grep -E "^## |duration|bank_|wavefronts|issue_active|inst_executed|throughput|sectors|Stall|stall" $out/ncu.txt |
    sed -E 's/ +/ /g' | cut -c1-150 | head -60
date -u +%T
