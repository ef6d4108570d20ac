#!/usr/bin/env bash
# bench/q6turns-call.sh — session 55: mmq6w<true>'s warpgroups in turns
# (INFERD_Q6P_TURNS: the turn passed after 1 the issue, 2 the first plane's
# products, 3 both; 0 none, the default) against none, one binary. In
# order: the bits at each turns form (cuda-ops; racecheck / synccheck of a
# q6_K 512-row product); the A/B (q6_K 256 / 512 / 2048 on three shapes,
# two rounds interleaved); mmq_trace mmq6p back to back and the marks of
# turns 0 and 2; on an H200 #11's table and the floor.
#   BUILD=build-d90 MODELS=stories260K tests/cuda/device-prep.sh
# device tool: carry ["devcarry.tgz"], command `bash bench/q6turns-call.sh`.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
. bench/call-lib.sh
call_head
for t in 0 2 1 3; do
    INFERD_Q6P_TURNS=$t timeout 150 $d/bin/test_cuda_ops > $out/ops-$t.log 2>&1
    echo "cuda-ops turns=$t rc=$? $(tail -1 $out/ops-$t.log)"
done
for t in 2 1 3; do
    for tool in racecheck synccheck; do
        INFERD_Q6P_TURNS=$t timeout 90 compute-sanitizer --tool $tool --error-exitcode 9 $d/bin/inferd bench --op \
            --backend cuda --types q6_K --n 512 --shapes llama3-ffn-down --reps 2 > $out/san-$tool-$t.log 2>&1
        echo "$tool turns=$t rc=$?"
    done
done
date -u +%T
for r in 1 2; do
    for t in 0 1 2 3; do
        echo "== turns=$t round $r"
        call_op bin "INFERD_Q6P_TURNS=$t" q6_K 256,512,2048 llama3-ffn-down,qwen7b-ffn-up,qwen7b-ffn-down | cut -d'|' -f3-5
    done
done 2>&1 | tee $out/ab.txt
for r in 1 2; do
    for t in 0 1 2 3; do
        echo "turns=$t: $(INFERD_Q6P_TURNS=$t timeout 30 $d/bin/mmq_trace mmq6p q6_K 14336 4096 512 2>&1 | head -1)"
    done
done | tee $out/trace.txt
for t in 0 2; do
    INFERD_Q6P_TURNS=$t timeout 30 $d/bin/mmq_trace mmq6p q6_K 14336 4096 512 > $out/marks-$t.txt 2>&1
    echo "== marks turns=$t"; sed -n 2,4p $out/marks-$t.txt | cut -c1-150; sed -n 24,28p $out/marks-$t.txt | cut -c1-150
done
date -u +%T
g=$(nvidia-smi --query-gpu=name --format=csv,noheader)
case "$g" in *H200*) bash bench/table54-call.sh ;; esac
