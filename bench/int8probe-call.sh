#!/usr/bin/env bash
# bench/int8probe-call.sh — session 50's question for the next device call:
# does wgmma's int8 m64n128k32 with A from registers (mmq6w's form) run at
# the int8 dense rate (64 cycles a step) or at f16's (128)? Builds
# bench/wgmma_probe there (nvcc, sm_90a; ~20 s) and runs its int8 mode:
# f16 RS / SS (forms 0, 1) beside int8 RS / SS, one and two warpgroups.
# No carry needed. device tool command: `bash bench/int8probe-call.sh`.
cd "$(dirname "$0")/.." || exit 1
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
nvcc -O3 -std=c++17 -arch=sm_90a -I. -o /tmp/wgmma_probe bench/wgmma_probe.cu || exit 1
timeout 120 /tmp/wgmma_probe int8
