#!/usr/bin/env bash
# bench/table-call.sh — #11's table at main's defaults on whatever GPU
# comes (bench --op llama3-ffn-down, every type, n = 1 / 8 / 512 / 2048,
# two rounds, the q7 model bench), after the bits of the build (cuda-ops
# with 16-row batches sent to mmqr / mmq6w, q7 GPU vs CPU, the sanitizers
# on q4_K's 512-row product), through bench/ab-call.sh.
cd "$(dirname "$0")/.." || exit 1
AB_BITS_ENV="INFERD_MMQH=16 INFERD_MMQ6W=16" SAN="q4_K llama3-ffn-down,qwen7b-attn-kv 512" \
    AB_TYPES=q4_K,q6_K,q5_K,q8_0,q4_0 AB_N=1,8,512,2048 AB_SHAPES=llama3-ffn-down AB_PP=512,2048 AB_TG=128 \
    AB_VARIANTS="bin" AB_SECONDS=300 bash bench/ab-call.sh
# ncu of one mmqr and one mmq6w launch at 4096 x 14336 x 512 (mmq_trace):
# the memory side (L2 and DRAM throughput, L2 -> SM bytes) beside the
# tensor pipe (bench/diag-lib.sh diag_ncu_mem; session 49 call 20: L2 30-34%)
out=${OUT:-/tmp/out}; d=$PWD/devcarry; export LD_LIBRARY_PATH=$d/lib
. bench/diag-lib.sh
diag_ncu_mem $out $out/summary.txt
