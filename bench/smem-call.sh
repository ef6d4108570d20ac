#!/usr/bin/env bash
# bench/smem-call.sh — session 55: (1) on an H200, #11's table and the
# one-row floor (table54-call.sh); (2) what bounds the planes form: ncu's
# shared-memory bank reads / writes and the tensor pipe of mmq6w<true>
# (turns, the default, and without) and mmqr at 4096 x 14336 x 512; (3) the
# one-row Q6_K product where the L2 feeds it faster than the H100's DRAM
# (a 27.5 MB weight, 4096 x 8192, repeated: the L2 keeps it) beside a
# plain read of the same bytes, and the DRAM-fed shape: does mmvt keep the
# read's pace when the stream is faster (the H200's case)?
#   BUILD=build-d90 MODELS=stories260K tests/cuda/device-prep.sh
# device tool: carry ["devcarry.tgz"], command `bash bench/smem-call.sh`.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
. bench/call-lib.sh
call_head
g=$(nvidia-smi --query-gpu=name --format=csv,noheader)
case "$g" in *H200*) bash bench/table54-call.sh ;; esac
nvcc -O3 -std=c++17 -arch=sm_90a -I. -o /tmp/read_probe bench/read_probe.cu &
timeout 60 ncu --query-metrics 2>/dev/null | grep -iE "^l1tex__data_bank|^smsp__inst_executed_op_.*shared|gmma|^l1tex__m_.*shared|^sm__sass_data_bytes_mem_shared" \
    > $out/metrics.txt
m=gpu__time_duration.sum,l1tex__data_bank_reads.avg.pct_of_peak_sustained_elapsed
m=$m,l1tex__data_bank_writes.avg.pct_of_peak_sustained_elapsed,l1tex__data_bank_reads.sum,l1tex__data_bank_writes.sum
m=$m,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum,smsp__issue_active.avg.pct_of_peak_sustained_active
m=$m,"regex:sm__pipe_tensor_[a-z_]*cycles_active\.avg\.pct_of_peak_sustained_active"
m=$m,"regex:l1tex__throughput\.avg\.pct_of_peak_sustained_active"
for k in "mmq6p:q6_K:1" "mmq6p:q6_K:0" "mmqr:q4_K:1"; do
    IFS=: read -r kn ty t <<< "$k"
    echo "## $kn turns=$t" >> $out/ncu.txt
    INFERD_Q6P_TURNS=$t timeout 120 ncu --kernel-name regex:"mmq6w_|mmqr_" --launch-skip 3 --launch-count 1 \
        --metrics "$m" $d/bin/mmq_trace $kn $ty 14336 4096 512 >> $out/ncu.txt 2>&1
    echo "ncu $k rc=$?"
done
grep -E "^## |duration|bank_|wavefronts|issue_active|tensor|throughput" $out/ncu.txt | sed -E 's/ +/ /g' | cut -c1-150
wait
date -u +%T
echo "== one-row Q6_K: L2-fed (4096 x 8192, 27.5 MB) and DRAM-fed (4096 x 14336, 48.2 MB)"
timeout 60 /tmp/read_probe 27.53 48.17
timeout 30 /tmp/read_probe bulk 4096 6720 32 1680 3
timeout 30 /tmp/read_probe bulk 4096 11760 32 1680 3
for r in 1 2; do
    for s in 8192 14336; do
        timeout 30 $d/bin/mmq_trace mmvt q6_K $s 4096 1 2>&1 | head -1
    done
done
call_op bin "" q6_K 1 llama3-ffn-down | cut -d'|' -f3-5
timeout 30 $d/bin/mmq_trace mmvt q6_K 8192 4096 1 > $out/marks-mmvt8192.txt 2>&1
sed -n 2,12p $out/marks-mmvt8192.txt | cut -c1-160
date -u +%T
