#!/usr/bin/env bash
# bench/s51-follow.sh — session 51 call 2 (warm H100, 36 s): read_probe bulk at 2 and 4
# blocks an SM (the lanes past RB no longer read past the ring) and mmq_trace marks of
# mmvt q6_K at one row. device tool: `bash bench/s51-follow.sh`.
nvcc -O3 -std=c++17 -arch=sm_90a -I. -o /tmp/read_probe bench/read_probe.cu &
nvcc -std=c++17 -O2 -I. -gencode arch=compute_90a,code=sm_90a -DINFERD_MMQW=1 -DINFERD_CUDA_TRACE bench/mmq_trace.cu -o /tmp/tr &
wait
for a in "4096 11760 16 1680 3" "4096 11760 8 1680 4" "4096 11760 8 3360 3" "4096 11760 16 3360 3" "4096 11760 32 1680 3"; do /tmp/read_probe bulk $a | tail -2; done
/tmp/tr mmvt q6_K 14336 4096 1 | head -14 | cut -c1-150
