#!/usr/bin/env bash
# bench/h200-floor-call.sh — #11's q6_K one-row floor on an H200 (session 51:
# the H100 gave a plain 48.2 MB read 18.6 us and bench --op's mmvt q6_K
# 1.14-1.18x that; the H200's read is the number #11's 13.4 us should be read
# against). Runs only on an H200 (any other GPU: exits at once, so a call
# that gets an H100 costs its start only). No carry. device tool: `bash
# bench/h200-floor-call.sh`.
cd "$(dirname "$0")/.." || exit 1
g=$(nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader)
echo "$g"
case "$g" in *H200*) ;; *) echo "not an H200: nothing run"; exit 0 ;; esac
nvcc -O3 -std=c++17 -arch=sm_90a -I. -o /tmp/read_probe bench/read_probe.cu &
nvcc -std=c++17 -O2 -I. -gencode arch=compute_90a,code=sm_90a -DINFERD_MMQW=1 -DINFERD_CUDA_TRACE \
    bench/mmq_trace.cu -o /tmp/tr &
wait
. bench/read-floor.sh
read_floor /tmp/tr "4096 11760 32 1680 3" "4096 11760 32 3360 2" "4096 8064 32 2016 3"
timeout 30 /tmp/tr mmvt q6_K 14336 4096 1 2>&1 | sed -n 2,12p | cut -c1-150
