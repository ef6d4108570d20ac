#!/usr/bin/env bash
# bench/q6halves-call.sh — session 52's one device call: the halves forms
# of mmq6w (MMQ6W_HALVES, q6_K) and mmqr (MMQR_HALVES, q4_K) against the
# plain forms.
#  1. mmq_trace (built here, no carry needed), 4096 x 14336 x 512 and the
#     7B's ffn-down, halves 0 vs 1 vs 2 (both switches; 2 also
#     defers the chains' last parts across the loop's turn as floats)
#     interleaved, two rounds, with marks;
#  2. with carry devcarry.tgz (bin = the engine built with both halves
#     forms, prev = main before them, devcarry/sass = main's mmq6w and
#     mmqr objects and the halves mmq6w's): the bits (cuda-ops with
#     INFERD_MMQH=16 INFERD_MMQ6W=16, q7 GPU vs CPU, the three sanitizers on q6_K and
#     q4_K 512 rows) and the A/B (bench --op q4_K and q6_K 512,
#     pp512; the two forms touch disjoint rows) through bench/ab-call.sh;
#  3. bench/chain6-call.sh (the chain alone, int8 RS as n64 halves, the
#     SASS census of the three objects);
#  4. on an H200 only: bench/h200-floor-call.sh.
# device tool: `bash bench/q6halves-call.sh`, carry ["devcarry.tgz"].
# Run once (session 52, call 1, bench/RESULTS.md) on the tree at 4c837ee,
# the carry from its bench/halves-prep.sh (now bench/ab-prep.sh with
# ARGS="-DMMQ6W_HALVES=1 -DMMQR_HALVES=1"); the forms were withdrawn after
# it, so on later trees the switches it passes do nothing: the record of
# the call (which ran the q4_K sanitizers in a loop of its own after the
# A/B; ab-call's SAN now takes both specs, the same checks).
cd "$(dirname "$0")/.." || exit 1
out=${OUT:-/tmp/out}; mkdir -p "$out"
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
args="-std=c++17 -O2 -I. -gencode arch=compute_90a,code=sm_90a -DINFERD_MMQW=1 -DINFERD_CUDA_TRACE"
for h in 0 1 2; do
    nvcc $args -DMMQ6W_HALVES=$h -DMMQR_HALVES=$h bench/mmq_trace.cu -o /tmp/trh_$h > /tmp/bh_$h.log 2>&1 &
done
wait
for r in 1 2; do
    for h in 0 1 2; do
        for shp in "14336 4096 512" "18944 3584 512"; do
            echo "== round $r HALVES=$h q6_K $shp"
            timeout 30 /tmp/trh_$h mmq6w q6_K $shp 2>&1 | head -1 || tail -5 /tmp/bh_$h.log
            echo "== round $r HALVES=$h q4_K $shp"
            timeout 30 /tmp/trh_$h mmqr q4_K $shp 2>&1 | head -1
        done
    done
done 2>&1 | tee $out/trace.txt
for h in 0 1; do
    for k in "mmq6w q6_K" "mmqr q4_K"; do
        echo "== marks HALVES=$h $k"
        timeout 30 /tmp/trh_$h $k 14336 4096 512 2>&1 | sed -n 2,12p | cut -c1-150
    done
done 2>&1 | tee -a $out/trace.txt
if [ -f devcarry.tgz ]; then
    AB_BITS_ENV="INFERD_MMQH=16 INFERD_MMQ6W=16" \
        SAN="q6_K llama3-ffn-down,qwen7b-ffn-down 512;q4_K llama3-ffn-down,qwen7b-attn-kv 512" \
        AB_TYPES=q4_K,q6_K AB_N=512 AB_SHAPES=llama3-ffn-down,qwen7b-ffn-down \
        AB_PP=512 AB_TG=16 AB_SECONDS=150 timeout 360 bash bench/ab-call.sh > $out/ab-call.log 2>&1
    echo "======== ab (prev = main; bin = both halves forms)"
    cat $out/summary.txt
fi
timeout 60 bash bench/chain6-call.sh > $out/chain6.txt 2>&1
cat $out/chain6.txt | grep -v "^ *[0-9]* [A-Z]" | head -60
case "$(nvidia-smi --query-gpu=name --format=csv,noheader)" in
*H200*) timeout 60 bash bench/h200-floor-call.sh 2>&1 | tee $out/floor.txt ;;
esac
