#!/usr/bin/env bash
# bench/int8feed-call.sh — session 50's two questions for the next device
# call, no carry needed (everything is built there with nvcc, ~1 min):
# (1) does wgmma's int8 m64n128k32 with A from registers (mmq6w's form)
#     run at the int8 dense rate (64 cycles a k32 step) or near f16's
#     (128)? bench/wgmma_probe's int8 mode: f16 RS / SS beside int8 RS /
#     SS, one and two warpgroups, and RS with mmq6w's plane expansion
#     between commit groups;
# (2) does the feed's tensor-copy traffic into shared memory slow mmqr's
#     and mmq6w's products? bench/mmq_trace built as is and with
#     -DWGRS_LEVER=1 (the copies stop once each ring slot was filled once:
#     stale stages, timing only), both kernels at 4096 x 14336 x 512;
# (3) does mmqr gain when a warpgroup passes the turn after its third
#     commit group instead of its last? mmq_trace built with
#     -DMMQR_TURN_AT=2 (timing only here: the bits do not depend on it,
#     but a kept form must pass the usual bits call).
# (4) (session 51) how far is q6_K's one-row product (15.4 us on the H200,
#     #11's target 13.4) from a plain read of its 48.2 MB, and from the
#     bulk-copy pattern mmvt streams it with, without mmvt's arithmetic?
#     bench/read_probe (plain and `bulk`) beside mmq_trace's mmvt.
# device tool command: `bash bench/int8feed-call.sh`.
cd "$(dirname "$0")/.." || exit 1
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
args="-std=c++17 -O2 -I. -gencode arch=compute_90a,code=sm_90a -DINFERD_MMQW=1 -DINFERD_CUDA_TRACE"
nvcc $args -DMMQR_TURN_AT=3 bench/mmq_trace.cu -o /tmp/trace_l0 > /tmp/b0.log 2>&1 &
nvcc $args -DMMQR_TURN_AT=3 -DWGRS_LEVER=1 bench/mmq_trace.cu -o /tmp/trace_l1 > /tmp/b1.log 2>&1 &
nvcc $args -DMMQR_TURN_AT=2 bench/mmq_trace.cu -o /tmp/trace_t2 > /tmp/b2.log 2>&1 &
nvcc -O3 -std=c++17 -arch=sm_90a -I. -o /tmp/read_probe bench/read_probe.cu > /tmp/b3.log 2>&1 &
nvcc -O3 -std=c++17 -arch=sm_90a -I. -o /tmp/wgmma_probe bench/wgmma_probe.cu > /tmp/b4.log 2>&1 &
wait
# (4) first: the shortest and session 51's own question
. bench/read-floor.sh
read_floor /tmp/trace_l0 "4096 11760 32 1680 3" "4096 11760 32 1680 4" "4096 11760 16 3360 3" \
    "4096 11760 32 3360 2" "4096 11760 16 1680 3" "4096 11760 8 1680 4" "4096 11760 8 3360 3" \
    "4096 8064 32 2016 3"
timeout 120 /tmp/wgmma_probe int8 || cat /tmp/b4.log
for l in 0 1; do
    for k in "mmqr q4_K" "mmq6w q6_K"; do
        echo "== WGRS_LEVER=$l $k"
        timeout 30 /tmp/trace_l$l $k 14336 4096 512 2>&1 | head -16 | cut -c1-120
    done
done
for r in 1 2; do # interleaved: the turn after group 3 (the engine's) and after group 2
    for t in l0 t2; do
        echo "== round $r trace_$t mmqr"
        timeout 30 /tmp/trace_$t mmqr q4_K 14336 4096 512 2>&1 | head -1
    done
done
