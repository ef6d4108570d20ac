#!/usr/bin/env bash
# bench/q6halves-call.sh — session 52's one device call: mmq6w's halves
# form (MMQ6W_HALVES in cuda/mmq6w.cu) against the plain form.
#  1. mmq_trace (built here, no carry needed), 4096 x 14336 x 512 and the
#     7B's ffn-down, HALVES 0 vs 1 interleaved, two rounds, with marks;
#  2. with carry devcarry.tgz (bin = the engine built with HALVES 1, prev
#     = the same tree with HALVES 0, devcarry/sass = both mmq6w objects and
#     mmqr's): the bits (cuda-ops with INFERD_MMQ6W=16, q7 GPU vs CPU, the
#     three sanitizers on q6_K 512 rows) and the A/B (bench --op q6_K
#     512 / 2048, pp512) through bench/ab-call.sh;
#  3. bench/chain6-call.sh (the chain alone, int8 RS as n64 halves, the
#     SASS census of the three objects);
#  4. on an H200 only: bench/h200-floor-call.sh.
# device tool: `bash bench/q6halves-call.sh`, carry ["devcarry.tgz"].
cd "$(dirname "$0")/.." || exit 1
out=${OUT:-/tmp/out}; mkdir -p "$out"
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
args="-std=c++17 -O2 -I. -gencode arch=compute_90a,code=sm_90a -DINFERD_MMQW=1 -DINFERD_CUDA_TRACE"
for h in 0 1; do
    nvcc $args -DMMQ6W_HALVES=$h bench/mmq_trace.cu -o /tmp/trh_$h > /tmp/bh_$h.log 2>&1 &
done
wait
for r in 1 2; do
    for h in 0 1; do
        for shp in "14336 4096 512" "18944 3584 512" "3584 18944 512"; do
            echo "== round $r MMQ6W_HALVES=$h q6_K $shp"
            timeout 30 /tmp/trh_$h mmq6w q6_K $shp 2>&1 | head -1 || tail -5 /tmp/bh_$h.log
        done
    done
done 2>&1 | tee $out/trace.txt
for h in 0 1; do
    echo "== marks MMQ6W_HALVES=$h"
    timeout 30 /tmp/trh_$h mmq6w q6_K 14336 4096 512 2>&1 | sed -n 2,16p | cut -c1-150
done 2>&1 | tee -a $out/trace.txt
if [ -f devcarry.tgz ]; then
    AB_BITS_ENV="INFERD_MMQ6W=16" SAN="q6_K llama3-ffn-down,qwen7b-ffn-down 512" \
        AB_TYPES=q6_K AB_N=512,2048 AB_SHAPES=llama3-ffn-down,qwen7b-ffn-up,qwen7b-ffn-down \
        AB_PP=512 AB_TG=32 AB_SECONDS=240 timeout 480 bash bench/ab-call.sh > $out/ab-call.log 2>&1
    echo "======== ab (prev = HALVES 0; bin = HALVES 1)"
    cat $out/summary.txt
fi
timeout 90 bash bench/chain6-call.sh > $out/chain6.txt 2>&1
cat $out/chain6.txt | grep -v "^ *[0-9]* [A-Z]" | head -60
case "$(nvidia-smi --query-gpu=name --format=csv,noheader)" in
*H200*) timeout 60 bash bench/h200-floor-call.sh 2>&1 | tee $out/floor.txt ;;
esac
