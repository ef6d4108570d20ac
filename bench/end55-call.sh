#!/usr/bin/env bash
# bench/end55-call.sh — session 55's last device minutes: on an H200,
# bench/table55-call.sh (#11's table there, the bits, ready; then the
# one-row floor); on any other GPU, mmq4p with and without turns
# (INFERD_Q6P_TURNS=0) at 512 and 2048 rows, two rounds.
#   BUILD=build-d90 MODELS=stories260K tests/cuda/device-prep.sh
# device tool: carry ["devcarry.tgz"], command `bash bench/end55-call.sh`.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
g=$(nvidia-smi --query-gpu=name --format=csv,noheader)
case "$g" in *H200*) exec bash bench/table55-call.sh ;; esac
. bench/call-lib.sh
call_head
for r in 1 2; do
    for t in 1 0; do
        echo "== turns=$t round $r"
        call_op bin "INFERD_Q6P_TURNS=$t" q4_K 512,2048 llama3-ffn-down,qwen7b-ffn-down | cut -d'|' -f3-5
    done
done
