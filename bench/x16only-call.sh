#!/usr/bin/env bash
# bench/x16only-call.sh — session 48: the quantizer leaves the int8 plane
# out where every product of the op is an mmqr reading x16 (the default since
# session 48) against INFERD_X16ONLY=0, through bench/ab-call.sh: bits
# (cuda-ops and q7 GPU vs CPU with 16-row batches sent to mmqr / mmq6w,
# the sanitizers of q4_K 512-row products), then interleaved.
cd "$(dirname "$0")/.." || exit 1
AB_BITS_ENV="INFERD_MMQH=16 INFERD_MMQ6W=16" SAN="q4_K llama3-ffn-down,qwen7b-attn-kv 512" \
    AB_TYPES=q4_K,q6_K AB_N=512,2048 AB_SHAPES=llama3-ffn-down,qwen7b-ffn-up,qwen7b-attn-q AB_PP=512,2048 AB_TG=16 \
    AB_VARIANTS="x0=bin:INFERD_X16ONLY=0 x1=bin" AB_SECONDS=240 bash bench/ab-call.sh
