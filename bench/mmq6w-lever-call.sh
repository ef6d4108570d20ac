#!/usr/bin/env bash
# bench/mmq6w-lever-call.sh — mmq6w's lever sweep (the seeds' method;
# MMQ6W_LEVER in cuda/mmq6w.cu: 1 no chain, 2 no first drain, 3 no plane
# expansion; wrong results, timing only), 4096 x 14336 x 512, mmq_trace
# builds interleaved over two rounds, with the marks of the plain build;
# on an H200 also bench/h200-floor-call.sh's read_probe part. No carry.
# device tool: `bash bench/mmq6w-lever-call.sh`.
cd "$(dirname "$0")/.." || exit 1
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
args="-std=c++17 -O2 -I. -gencode arch=compute_90a,code=sm_90a -DINFERD_MMQW=1 -DINFERD_CUDA_TRACE"
for l in 0 1 2 3; do
    nvcc $args -DMMQ6W_LEVER=$l bench/mmq_trace.cu -o /tmp/tr6_$l > /tmp/b6_$l.log 2>&1 &
done
wait
for r in 1 2; do
    for l in 0 1 2 3; do
        echo "== round $r MMQ6W_LEVER=$l"
        timeout 30 /tmp/tr6_$l mmq6w q6_K 14336 4096 512 2>&1 | head -1 || cat /tmp/b6_$l.log
    done
done
for l in 0 1 2; do
    echo "== marks MMQ6W_LEVER=$l"
    timeout 30 /tmp/tr6_$l mmq6w q6_K 14336 4096 512 2>&1 | sed -n 2,16p | cut -c1-150
done
case "$(nvidia-smi --query-gpu=name --format=csv,noheader)" in
*H200*) bash bench/h200-floor-call.sh ;;
esac
