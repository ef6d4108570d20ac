#!/usr/bin/env bash
# bench/turn2-call.sh — session 51's one device call: bench/int8feed-call.sh
# (session 50's questions and read_probe's, no carry needed) after the
# engine A/B with its bits, in the same call so a machine started once
# answers all of it. Carry devcarry.tgz: bin = branch wip-q6ef built with
# MMQR_TURN_AT 2 (mmqr's turn a group earlier: the q4_K 512-row rows) and
# mmvt's early free for Q6_K (EF: the q6_K one-row rows), with its test
# binaries; prev = main's engine. The two touch disjoint rows of the op
# table. device tool: `bash bench/turn2-call.sh`. (Run in session 51 with
# its own loop for the q6_K sanitizers; since session 52 ab-call's SAN
# takes both specs, the same checks.)
cd "$(dirname "$0")/.." || exit 1
out=${OUT:-/tmp/out}; mkdir -p "$out"
# the sanitizers on mmqr's products and on EF's (q6_K one row)
AB_BITS_ENV="INFERD_MMQH=16 INFERD_MMQ6W=16" \
    SAN="q4_K llama3-ffn-down,qwen7b-attn-kv 512;q6_K llama3-ffn-down,qwen7b-ffn-up,qwen7b-ffn-down 1" \
    AB_TYPES=q4_K,q6_K AB_N=1,512 AB_SHAPES=llama3-ffn-down,qwen7b-ffn-up,qwen7b-ffn-down \
    AB_PP=512 AB_TG=64 AB_SECONDS=300 bash bench/ab-call.sh > /dev/null 2>&1
echo "======== ab (prev = main; bin = wip-q6ef + MMQR_TURN_AT 2)"
cat $out/summary.txt
timeout 300 bash bench/int8feed-call.sh > $out/int8feed.txt 2>&1
cat $out/int8feed.txt
