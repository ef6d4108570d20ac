#!/usr/bin/env bash
# bench/q6p-call.sh — session 53's call: mmq6w with its weight planes made
# at load (INFERD_Q6P_MB, cuda/q6planes.cu; the design card's EXP = true)
# against the expanded form (the default), one binary, interleaved on the
# same bytes. First the L2 premise (bench/l2tiles-call.sh: no carry),
# then bench/ab-call.sh: the bits with the planes on (cuda-ops sets its
# own budget; q7 GPU vs CPU; memcheck / racecheck / synccheck of the
# 512-row q6_K products), the prewarm list (test_cuda), the A/B: prev
# (this tree's defaults) without and with the planes, bin (MMQ6P_PAIR=1:
# two super-blocks a turn) with them.
#   ARGS="-DMMQ6P_PAIR=1" bench/ab-prep.sh, then (prev's bits too)
#   cp build-d90/tests/cuda/test_cuda_ops devcarry/prev/ && strip it && re-tar
# device tool: carry ["devcarry.tgz"], command `bash bench/q6p-call.sh`.
cd "$(dirname "$0")/.." || exit 1
out=${OUT:-/tmp/out}; mkdir -p "$out"
timeout 100 bash bench/l2tiles-call.sh > $out/l2tiles.log 2>&1
grep -E "^==|tiles " $out/l2tiles.log | head -40
tar xzf devcarry.tgz
export LD_LIBRARY_PATH=$PWD/devcarry/lib INFERD_SHARED=$PWD/devcarry/shared
timeout 200 devcarry/prev/test_cuda_ops > $out/ops-prev.log 2>&1
echo "cuda-ops prev (planes: the single form) rc=$?"; grep -E "FAIL" $out/ops-prev.log | head -5
grep -E "mm-variant.*q6_K.*mmq6w" $out/ops-prev.log | head -6
INFERD_Q6P_MB=8192 timeout 120 devcarry/bin/test_cuda > $out/test_cuda.log 2>&1
echo "test_cuda (planes on) rc=$?"; grep -E "planes|FAIL" $out/test_cuda.log | head -8
AB_BITS_ENV="INFERD_Q6P_MB=8192" SAN="q6_K llama3-ffn-down,qwen7b-ffn-down 512" \
    AB_VARIANTS="exp0=prev exp1=prev:INFERD_Q6P_MB=8192 pair=bin:INFERD_Q6P_MB=8192" AB_TYPES=q6_K AB_N=512,2048 \
    AB_SHAPES=llama3-ffn-down,qwen7b-ffn-up,qwen7b-ffn-down AB_PP=512 AB_TG=16 AB_SECONDS=240 \
    bash bench/ab-call.sh
grep -E "mm-variant.*q6_K.*(planes|mmq6w)" $out/ops.log | head -12
