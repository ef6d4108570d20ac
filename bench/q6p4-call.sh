#!/usr/bin/env bash
# bench/q6p4-call.sh — session 54's call: session 53's q6p3 call (bits at
# the defaults with the Q6_K planes, #11's q4_K / q6_K rows planes on and
# off, q6_K at 128 / 256 rows, the 7B pp, serve_gpu's ready time), then,
# where the GPU is an H200, the one-row floor (h200-floor-call.sh: the
# plain read of 48.2 MB, the bulk pattern, mmvt's marks).
#   BUILD=build-d90 MODELS=stories260K tests/cuda/device-prep.sh
# device tool: carry ["devcarry.tgz"], command `bash bench/q6p4-call.sh`.
cd "$(dirname "$0")/.." || exit 1
bash bench/q6p3-call.sh
bash bench/h200-floor-call.sh
date -u +%T
