#!/usr/bin/env bash
# bench/turn2-call.sh — session 51's one device call: bench/int8feed-call.sh
# (session 50's questions and read_probe's, no carry needed), then the
# engine A/B of mmqr's turn a group earlier (MMQR_TURN_AT=2) with its bits,
# in the same call so a machine started once answers both. Carry
# devcarry.tgz: bin = the engine built with MMQR_TURN_AT 2 (and its test
# binaries), prev = main's (3). device tool: `bash bench/turn2-call.sh`.
cd "$(dirname "$0")/.." || exit 1
out=${OUT:-/tmp/out}; mkdir -p "$out"
bash bench/int8feed-call.sh > $out/int8feed.txt 2>&1
AB_BITS_ENV="INFERD_MMQH=16 INFERD_MMQ6W=16" SAN="q4_K llama3-ffn-down,qwen7b-attn-kv 512" \
    AB_TYPES=q4_K AB_N=512,2048 AB_SHAPES=llama3-ffn-down,qwen7b-attn-q,qwen7b-ffn-up \
    AB_PP=512 AB_TG=16 AB_SECONDS=240 bash bench/ab-call.sh > /dev/null 2>&1
cat $out/int8feed.txt
echo "======== ab (prev = TURN_AT 3, bin = TURN_AT 2)"
cat $out/summary.txt
