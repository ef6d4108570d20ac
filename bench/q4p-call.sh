#!/usr/bin/env bash
# bench/q4p-call.sh — session 55: mmq4p (Q4_K on int8 wgmma from two u8
# planes made at load, cuda/mmq4p.cu; INFERD_Q4P=1) against mmqr (0, the
# default), one binary. In order: the bits with Q4P (cuda-ops with its
# variant rows, the 7B-shaped GPU-vs-CPU gate, memcheck / racecheck /
# synccheck of a q4_K 512-row product); bench --op q4_K 256 / 512 / 2048
# (two rounds interleaved); mmq_trace back to back and mmq4p's marks; the
# 7B-shaped model's pp512 / tg128 and ready time; on an H200 #11's table.
#   BUILD=build-d90 MODELS=stories260K tests/cuda/device-prep.sh
# device tool: carry ["devcarry.tgz"], command `bash bench/q4p-call.sh`.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
. bench/call-lib.sh
call_head
INFERD_Q4P=1 timeout 170 $d/bin/test_cuda_ops > $out/ops.log 2>&1
echo "cuda-ops Q4P rc=$? $(tail -1 $out/ops.log)"
grep -E "FAIL" $out/ops.log | head -8
grep -E "mmq4p" $out/ops.log | head -6 | cut -c1-150
. tests/cuda/q7.sh
q7_make $out/mk.log
INFERD_Q4P=1 timeout 150 $d/bin/test_cuda_model q7-gpu-vs-cpu.json > $out/q7.log 2>&1
echo "q7 Q4P rc=$?"; tail -1 $out/q7.log | cut -c1-200
for tool in memcheck racecheck synccheck; do
    INFERD_Q4P=1 timeout 90 compute-sanitizer --tool $tool --error-exitcode 9 $d/bin/inferd bench --op \
        --backend cuda --types q4_K --n 512 --shapes llama3-ffn-down --reps 2 > $out/san-$tool.log 2>&1
    echo "$tool Q4P q4_K 512 rc=$?"; grep -m3 -E "Error|Hazard|RACE|race" $out/san-$tool.log | cut -c1-160
done
date -u +%T
for r in 1 2; do
    for q in 0 1; do
        echo "== q4p=$q round $r"
        call_op bin "INFERD_Q4P=$q" q4_K 256,512,2048 llama3-ffn-down,qwen7b-attn-q,qwen7b-ffn-up,qwen7b-ffn-down | cut -d'|' -f3-5
    done
done 2>&1 | tee $out/ab.txt
for r in 1 2; do
    for k in mmqr mmq4p; do
        echo "$(timeout 30 $d/bin/mmq_trace $k q4_K 14336 4096 512 2>&1 | head -1)"
    done
done | tee $out/trace.txt
timeout 30 $d/bin/mmq_trace mmq4p q4_K 14336 4096 512 > $out/marks-q4p.txt 2>&1
sed -n 2,8p $out/marks-q4p.txt | cut -c1-160; sed -n 26,30p $out/marks-q4p.txt | cut -c1-160
for r in 1 2; do
    for q in 0 1; do
        echo "q7 q4p=$q: $(call_q7 bin "INFERD_Q4P=$q" 512 32 | tr -s ' ' | tr '\n' ' ')"
    done
done
INFERD_Q4P=1 timeout 150 python3 tests/cuda/serve_gpu.py $d/bin/inferd /tmp/q7.gguf > $out/serve.log 2>&1
echo "serve_gpu Q4P rc=$?"; grep -E "ready after|resident|FAIL" $out/serve.log | head -3 | cut -c1-220
date -u +%T
g=$(nvidia-smi --query-gpu=name --format=csv,noheader)
case "$g" in *H200*) bash bench/table54-call.sh ;; esac
