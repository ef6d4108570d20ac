#!/usr/bin/env bash
# bench/l2tiles-call.sh — session 52's question for weights pre-expanded at
# load (bench/RESULTS.md session 52, "Where session 52 leaves the 512-row
# rows"): can the L2 feed a blocked product's tiles at the rate the
# tensor cores would take them? read_probe tiles, 4096 x 14336 x 512 (32
# row blocks x 4 column blocks, one wave), the bytes a block takes a
# super-block as each kernel takes them today and as the expanded forms
# would; the 7B's ffn-down (28 x 4 blocks, 74 super-blocks) for mmqr's.
# Written, not run (no device time left in session 52). On an H200 also
# bench/h200-floor-call.sh's part. No carry. device tool: `bash
# bench/l2tiles-call.sh`.
cd "$(dirname "$0")/.." || exit 1
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
nvcc -O3 -std=c++17 -arch=sm_90 -I. -o /tmp/read_probe bench/read_probe.cu || exit 1
t() { echo "== $1"; timeout 30 /tmp/read_probe tiles $2; }
for r in 1 2; do
    echo "==== round $r"
    t "mmqr today: raw Q4_K 128 x 144 B + f16 activations 128 x 512 B a super-block" "32 4 56 18432 65536 2"
    t "mmqr pre-expanded: f16 A 128 x 256 B + activations, half super-blocks" "32 4 112 32768 32768 3"
    t "mmq6w today: expanded copy 128 x 288 B + int8 activations 128 x 256 B" "32 4 56 36864 32768 3"
    t "mmq6w pre-expanded planes: 128 x 512 B + activations" "32 4 56 65536 32768 2"
    t "mmqr today, the 7B's ffn-down" "28 4 74 18432 65536 2"
    t "mmqr pre-expanded, the 7B's ffn-down" "28 4 148 32768 32768 3"
done
case "$(nvidia-smi --query-gpu=name --format=csv,noheader)" in
*H200*) timeout 90 bash bench/h200-floor-call.sh ;;
esac
