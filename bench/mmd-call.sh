#!/usr/bin/env bash
# bench/mmd-call.sh [check|bench|verify|json|lever] — the device calls of cuda/mm_deq.cu
# (batch_invariant = false: K-quant batches as F16 through cuBLASLt), written
# 2026-12-04 when no device was lent. Two phases, one device call each (the
# tool's 10-minute limit; ~5 min each):
#   check  run-on-gpu self ops model (cuda-ops mm-deq, the prewarm of a
#          batch-variant backend), the model gates in that mode (tiny-llama,
#          the 7B-shaped q7; INFERD_MMD_MIN=9 so prefill takes the path),
#          memcheck of bench --op and of a model run through it
#   bench  bench --op at n = 16..2048 on four shapes, the 7B's pp512/pp2048/
#          tg128 and bench-serve (512-token prompts, 1/8/64 streams), each
#          batch_invariant true vs false interleaved; bench-serve --json false
#          vs true (response_format's cost); ncu of the path's kernels
#   verify the sm_90 default (256 rows) with nothing set
#   lever  the F16 path's A/B knobs (INFERD_MMD_DQ2, INFERD_MMC_CVT8,
#          INFERD_MMC_TUNE): their numbers, then base vs each vs all interleaved
#   json   JSON-constrained sampling on the device (allowed bits uploaded):
#          cuda-sample, the API's JSON/tool tests on a GPU daemon, bench-serve
#          --json on the device vs on the host (INFERD_JSON_ON_BACKEND=0)
# Here: BUILD=build-d90 MODELS="stories260K tiny-llama-Q4_K_M" tests/cuda/device-prep.sh;
# device tool: carry ["devcarry.tgz"], command `bash bench/mmd-call.sh check` (then
# `... bench`). Leaves in $OUT: summary.txt; bench also ab.md (the A/B table) and
# ncu-short.txt; o.tgz every log.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
phase=${1:-check}
tar xzf devcarry.tgz # always: a warm machine may hold an older devcarry/
d=$PWD/devcarry
export LD_LIBRARY_PATH=$d/lib INFERD_SHARED=$d/shared INFERD_SRC=$PWD
# check / bench: the path from 64 rows (the sm_90 default is 256 since the
# bench phase measured the crossover); verify: the binary's own default
[ "$phase" = verify ] || export INFERD_MMD_MIN=${INFERD_MMD_MIN:-64}
out=/tmp/o-$phase; rm -rf $out; mkdir -p $out/ab
S=$out/summary.txt
date -u +%T | tee $S

q7() { # the 7B-shaped Q4_K_M, made here (a warm machine keeps /tmp)
    [ -s /tmp/q7.gguf ] || timeout 100 $d/bin/inferd mkmodel --preset qwen2.5-7b --quant q4_k_m \
        --vocab $d/shared/vocab/ggml-vocab-qwen2.gguf --out /tmp/q7.gguf > $out/mk.log 2>&1
    cp tests/cuda/q7-gpu-vs-cpu.json $d/shared/reference/ && ln -sf /tmp/q7.gguf $d/shared/models/q7.gguf
}

rog() { # the GPU suites (tests/cuda/run-on-gpu.sh), their logs into $out
    OUT_SAVE=$OUT; export OUT=/tmp/rog; rm -rf $OUT; mkdir -p $OUT
    timeout 220 tests/cuda/run-on-gpu.sh self ops model > $out/rog.log 2>&1
    echo "run-on-gpu rc=$?" | tee -a $S
    grep -E "rc=" $OUT/summary.txt >> $S
    cp $OUT/*.log $out/ 2>/dev/null
    export OUT=$OUT_SAVE
}

if [ "$phase" = check ]; then
    rog
    grep -E "mm-deq|f16 cublas|FAIL" $out/ops.log | head -60 >> $S
    grep -E "f16 cublas|not picked" $out/self.log | head -12 >> $S
    INFERD_BATCH_VARIANT=1 INFERD_MMD_MIN=9 timeout 60 $d/bin/test_cuda_model tiny-llama-Q4_K_M.json \
        > $out/tl-var.log 2>&1
    echo "tiny-llama variant rc=$?" | tee -a $S
    tail -3 $out/tl-var.log >> $S
    timeout 60 compute-sanitizer --tool memcheck --error-exitcode 9 $d/bin/inferd bench --op --backend cuda \
        --types q4_K,q6_K --n 64,100 --shapes qwen7b-attn-kv --reps 2 --batch-invariant false \
        > $out/memcheck-op.log 2>&1
    echo "memcheck op rc=$?" | tee -a $S
    INFERD_MMD_MIN=9 timeout 90 compute-sanitizer --tool memcheck --error-exitcode 9 $d/bin/inferd bench \
        --backend cuda --model $d/shared/models/tiny-llama-Q4_K_M.gguf --pp 16 --tg 4 --reps 1 \
        --batch-invariant false > $out/memcheck-model.log 2>&1
    echo "memcheck model rc=$?" | tee -a $S
    q7
    timeout 120 $d/bin/test_cuda_model q7-gpu-vs-cpu.json > $out/q7.log 2>&1
    echo "q7 rc=$?" | tee -a $S
    tail -1 $out/q7.log | tee -a $S
    INFERD_BATCH_VARIANT=1 INFERD_MMD_MIN=9 timeout 120 $d/bin/test_cuda_model q7-gpu-vs-cpu.json \
        > $out/q7-var.log 2>&1
    echo "q7 variant rc=$?" | tee -a $S
    tail -3 $out/q7-var.log | tee -a $S
elif [ "$phase" = bench ]; then
    q7
    for r in 1 2; do for v in true false; do
        timeout 100 $d/bin/inferd bench --op --backend cuda --types q4_K,q6_K,q5_K \
            --n 16,32,48,64,96,128,256,512,2048 \
            --shapes llama3-ffn-down,qwen7b-ffn-up,qwen7b-attn-q,qwen7b-attn-kv --reps 20 \
            --batch-invariant $v > $out/ab/inv-$v.r$r.op.txt 2>&1 || true
    done; done
    date -u +%T | tee -a $S
    for r in 1 2; do for v in true false; do
        timeout 100 $d/bin/inferd bench --backend cuda --model /tmp/q7.gguf --pp 512,2048 --tg 128 \
            --reps 2 --batch-invariant $v > $out/ab/inv-$v.r$r.model.txt 2>&1
    done; done
    python3 tests/cuda/ab_table.py $out/ab inv-true inv-false > $out/ab.md 2>&1
    # serving: time to first token and throughput with 512-token prompts
    for v in true false; do
        timeout 90 $d/bin/inferd bench-serve --backend cuda --model /tmp/q7.gguf --concurrency 1,8,64 \
            --prompt-tokens 512 --max-tokens 128 --rounds 1 --batch-invariant $v > $out/serve-$v.txt 2>&1
        echo "serve batch_invariant=$v"
        tail -4 $out/serve-$v.txt
    done >> $S
    # response_format's cost on the GPU (host sampling of the downloaded rows,
    # the allowed sets worked out during the step): --json false vs true
    for v in false true; do
        timeout 60 $d/bin/inferd bench-serve --backend cuda --model /tmp/q7.gguf --concurrency 1,8 \
            --prompt-tokens 512 --max-tokens 128 --rounds 1 --json $v > $out/serve-json-$v.txt 2>&1
        echo "serve json=$v"
        tail -3 $out/serve-json-$v.txt
    done >> $S
    # the F16 path's kernels one by one (q4_K and q6_K 4096x14336 at n = 512)
    timeout 90 ncu --metrics gpu__time_duration.sum --launch-skip 40 --launch-count 12 $d/bin/inferd bench \
        --op --backend cuda --types q4_K,q6_K --n 512 --shapes llama3-ffn-down --reps 5 \
        --batch-invariant false > $out/ncu.txt 2>&1
    echo "ncu rc=$?" | tee -a $S
    grep -E "mmd_|gemm|sm90|Kernel|mmc_|gpu__time" $out/ncu.txt | head -40 > $out/ncu-short.txt
    cp $out/ab.md $out/ncu-short.txt $OUT/ 2>/dev/null
    # tiny-llama's variant gate (check phase: 0.89 nats with the path from 9
    # rows): the same mode without the F16 path, to say which part moves it
    INFERD_BATCH_VARIANT=1 INFERD_MMD_MIN=0 timeout 60 $d/bin/test_cuda_model tiny-llama-Q4_K_M.json \
        > $out/tl-var-nommd.log 2>&1
    echo "tiny-llama variant without mmd rc=$?" | tee -a $S
    tail -3 $out/tl-var-nommd.log >> $S
elif [ "$phase" = verify ]; then
    # the default (256 rows on sm_90) with nothing set: the GPU suites, the
    # 7B-shaped model's bits in both modes, pp/tg both modes
    rog
    q7
    timeout 120 $d/bin/test_cuda_model q7-gpu-vs-cpu.json > $out/q7.log 2>&1
    echo "q7 rc=$?" | tee -a $S
    tail -1 $out/q7.log | tee -a $S
    INFERD_BATCH_VARIANT=1 timeout 120 $d/bin/test_cuda_model q7-gpu-vs-cpu.json > $out/q7-var.log 2>&1
    echo "q7 variant rc=$?" | tee -a $S
    tail -2 $out/q7-var.log | tee -a $S
    for v in true false true false; do
        timeout 100 $d/bin/inferd bench --backend cuda --model /tmp/q7.gguf --pp 512 --tg 128 \
            --reps 2 --batch-invariant $v 2>&1 | tail -3 | sed "s/^/inv=$v /" >> $S
    done
elif [ "$phase" = json ]; then
    # JSON-constrained choices sampled on the device (2026-12-05, written with
    # no device lent): the op against the CPU's with allowed bits
    # (cuda-sample), the API's response_format and tool tests against a GPU
    # daemon, then bench-serve --json true with the bits uploaded (default) vs
    # INFERD_JSON_ON_BACKEND=0 (the host path), interleaved, and json false
    timeout 120 $d/bin/test_cuda_sample > $out/cuda-sample.log 2>&1
    echo "cuda-sample rc=$?" | tee -a $S
    tail -2 $out/cuda-sample.log >> $S
    # completions on stories260K; chat and tools need tiny-qwen2 (39 MB: carry
    # it with MODELS="stories260K tiny-qwen2-Q4_K_M" when the carry has room)
    for t in completions chat tools; do
        [ $t = completions ] || [ -f $d/shared/models/tiny-qwen2-Q4_K_M.gguf ] || {
            echo "api-$t: tiny-qwen2 not carried" | tee -a $S; continue; }
        INFERD_BACKEND=cuda timeout 150 python3 tests/api/test_$t.py $d/bin/inferd > $out/api-$t.log 2>&1
        echo "api-$t (cuda) rc=$?" | tee -a $S
    done
    q7
    for r in 1 2; do for j in dev host off; do
        case $j in dev) e=; js=true ;; host) e=INFERD_JSON_ON_BACKEND=0; js=true ;; off) e=; js=false ;; esac
        env $e timeout 60 $d/bin/inferd bench-serve --backend cuda --model /tmp/q7.gguf --concurrency 1,8,32 \
            --prompt-tokens 512 --max-tokens 128 --rounds 1 --json $js > $out/serve-json-$j.r$r.txt 2>&1
        echo "serve json=$j round $r"
        tail -4 $out/serve-json-$j.r$r.txt
    done; done >> $S
elif [ "$phase" = lever ]; then
    # the F16 path's three A/B knobs (2026-12-05, written with no device lent;
    # predictions in bench/RESULTS.md "2026-12-05 07:30"): INFERD_MMD_DQ2
    # (dequantization's second form), INFERD_MMC_CVT8 (activations eight a
    # thread), INFERD_MMC_TUNE (cuBLASLt's bucket algorithms timed at load).
    # First their numbers: cuda-ops (mm-deq, mm-cublas) with all three on.
    INFERD_MMD_DQ2=1 INFERD_MMC_CVT8=1 INFERD_MMC_TUNE=1 INFERD_MMD_MIN=64 timeout 200 \
        $d/bin/test_cuda_ops > $out/ops-lever.log 2>&1
    echo "cuda-ops (all three) rc=$?" | tee -a $S
    grep -E "mm-deq|mm-cublas|FAIL" $out/ops-lever.log | head -20 >> $S
    INFERD_MMD_DQ2=1 INFERD_MMC_CVT8=1 timeout 60 compute-sanitizer --tool memcheck --error-exitcode 9 \
        $d/bin/inferd bench --op --backend cuda --types q4_K,q5_K,q6_K --n 64,100 --shapes qwen7b-attn-kv \
        --reps 2 --batch-invariant false > $out/memcheck-lever.log 2>&1
    echo "memcheck (dq2, cvt8) rc=$?" | tee -a $S
    q7
    run_v() { # variant round: bench --op and the 7B's pp512 in that variant
        case $1 in base) e= ;; dq2) e=INFERD_MMD_DQ2=1 ;; cvt8) e=INFERD_MMC_CVT8=1 ;;
            tune) e=INFERD_MMC_TUNE=1 ;; all) e="INFERD_MMD_DQ2=1 INFERD_MMC_CVT8=1 INFERD_MMC_TUNE=1" ;; esac
        env $e timeout 60 $d/bin/inferd bench --op --backend cuda --types q4_K,q6_K --n 512,2048 \
            --shapes llama3-ffn-down,qwen7b-ffn-up --reps 10 --batch-invariant false \
            > $out/ab/$1.r$2.op.txt 2>&1 || true
        env $e timeout 60 $d/bin/inferd bench --backend cuda --model /tmp/q7.gguf --pp 512 --tg 16 \
            --reps 2 --batch-invariant false > $out/ab/$1.r$2.model.txt 2>&1 || true
    }
    for r in 1 2; do for v in base dq2 cvt8 tune all; do run_v $v $r; done; done
    for v in dq2 cvt8 tune all; do
        echo "## base vs $v"; python3 tests/cuda/ab_table.py $out/ab base $v
    done > $out/lever.md 2>&1
    grep -h "tuned:" $out/ab/tune.r1.*.txt | head -20 >> $S
    # the kernels one by one with all three on (q4_K and q6_K 4096x14336, n = 512)
    INFERD_MMD_DQ2=1 INFERD_MMC_CVT8=1 INFERD_MMC_TUNE=1 timeout 90 ncu --metrics gpu__time_duration.sum \
        --launch-skip 40 --launch-count 12 $d/bin/inferd bench --op --backend cuda --types q4_K,q6_K --n 512 \
        --shapes llama3-ffn-down --reps 5 --batch-invariant false > $out/ncu-lever.txt 2>&1
    echo "ncu rc=$?" | tee -a $S
    grep -E "mmd_|mmc_|nvjet|gemm|sm90|gpu__time" $out/ncu-lever.txt | head -40 > $out/ncu-lever-short.txt
    cp $out/lever.md $out/ncu-lever-short.txt $OUT/ 2>/dev/null
else
    echo "usage: bench/mmd-call.sh check|bench|verify|json|lever" >&2
    exit 2
fi
date -u +%T | tee -a $S
cp $S $OUT/
cd /tmp && tar czf "$OUT/o.tgz" "o-$phase"
