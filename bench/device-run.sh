#!/usr/bin/env bash
# device-run — what we run on the GPU machine (H200) in one call: the CUDA
# self-test, mkmodel speed on a full 7B shape, and the CPU engine benchmarks
# with that machine's cores. Expects devcarry/ (built binaries, the non-system
# shared libraries they need, models) as prepared by bench/device-prep.sh.
set -uo pipefail
d=devcarry
export LD_LIBRARY_PATH="$PWD/$d/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
out=${OUT:-/tmp/out}
mkdir -p "$out"
{
echo "== $(date -u +%FT%TZ) $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader)"
echo "== nproc $(nproc)"
echo "== cuda self-test"; $d/test_cuda
echo "== mkmodel qwen2.5-7b q4_k_m"
/usr/bin/time -f "%e s wall, %M KiB max rss" $d/inferd mkmodel --preset qwen2.5-7b --quant q4_k_m \
    --vocab $d/ggml-vocab-qwen2.gguf --out /tmp/q7.gguf
ls -l /tmp/q7.gguf
$d/inferd info --model /tmp/q7.gguf | head -30
T=${THREADS:-16}
echo "== bench tiny-llama-Q4_K_M threads=$T"
$d/inferd bench --model $d/tiny-llama-Q4_K_M.gguf --threads $T --reps 3
echo "== bench-serve tiny-llama-Q4_K_M threads=$T"
$d/inferd bench-serve --model $d/tiny-llama-Q4_K_M.gguf --threads $T --concurrency 1,4,16,64
echo "== bench qwen2.5-7b-shaped q4_k_m threads=$T (CPU engine)"
timeout 240 $d/inferd bench --model /tmp/q7.gguf --threads $T --pp 64 --tg 8 --reps 1
} 2>&1 | tee "$out/device-run.log"
