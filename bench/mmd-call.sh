#!/usr/bin/env bash
# bench/mmd-call.sh [check|bench|verify|json|f16r] — the device calls of cuda/mm_deq.cu
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
#   f16r   resident F16 copies (--f16-weights / f16_weights_mb): op cases,
#          memcheck, the 7B's variant gates, A/B op / model / serve
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

. tests/cuda/q7.sh
q7() { q7_make $out/mk.log; } # the 7B-shaped Q4_K_M (a warm machine keeps /tmp)

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
    for r in $(seq 1 ${JSON_ROUNDS:-2}); do for j in dev host off; do
        case $j in dev) e=; js=true ;; host) e=INFERD_JSON_ON_BACKEND=0; js=true ;; off) e=; js=false ;; esac
        env $e timeout 60 $d/bin/inferd bench-serve --backend cuda --model /tmp/q7.gguf --concurrency 1,8,32 \
            --prompt-tokens 512 --max-tokens 128 --rounds 1 --json $js > $out/serve-json-$j.r$r.txt 2>&1
        echo "serve json=$j round $r"
        tail -4 $out/serve-json-$j.r$r.txt
    done; done >> $S
elif [ "$phase" = f16r ]; then
    # resident F16 copies (config f16_weights_mb; 2026-12-05 session 38):
    # their op cases (cuda-ops mm-deq-res), then A/B interleaved: bench --op
    # in batch_invariant = false without copies (int8 below 256 rows, F16
    # with a copy a product from 256) vs with them (INFERD_MMD_RES_MIN=16:
    # the crossover against int8 read off the table), the 7B's pp/tg in
    # three modes, the 7B-shaped model's variant gates with copies from 9
    # rows, memcheck, a second round, bench-serve. Most important first,
    # the summary and table copied to $OUT as they grow, later parts left
    # out past F16R_SECONDS (default 480) so a short budget still reports.
    unset INFERD_MMD_MIN
    t0=$(date +%s); lim=${F16R_SECONDS:-480}
    left() { [ $(( $(date +%s) - t0 )) -lt $lim ] || { echo "time: the rest left out" | tee -a $S; return 1; }; }
    put() { python3 tests/cuda/ab_table.py $out/ab deq res > $out/f16r.md 2>&1
            echo "## 7B: invariant / variant / variant + copies" >> $out/f16r.md
            python3 tests/cuda/ab_table.py $out/ab inv deq res | sed -n '/model test/,$p' >> $out/f16r.md 2>&1
            cp $S $out/f16r.md $OUT/ 2>/dev/null; }
    timeout 200 $d/bin/test_cuda_ops > $out/ops-f16r.log 2>&1
    echo "cuda-ops rc=$?" | tee -a $S
    grep -E "mm-deq|FAIL" $out/ops-f16r.log | head -30 >> $S
    q7
    op_ab() { for v in deq res; do
        f=0; [ $v = res ] && f=4096
        INFERD_MMD_RES_MIN=16 timeout 100 $d/bin/inferd bench --op --backend cuda --types q4_K,q5_K,q6_K \
            --n 16,32,48,64,96,128,256,512,2048 \
            --shapes llama3-ffn-down,qwen7b-ffn-up,qwen7b-attn-q,qwen7b-attn-kv --reps 10 \
            --batch-invariant false --f16-weights $f > $out/ab/$v.r$1.op.txt 2>&1 || true
    done; }
    model_ab() { for v in inv deq res; do
        case $v in inv) a="--batch-invariant true" ;; deq) a="--batch-invariant false" ;;
            res) a="--batch-invariant false --f16-weights 65536" ;; esac
        timeout 100 $d/bin/inferd bench --backend cuda --model /tmp/q7.gguf --pp 512,2048 --tg 128 \
            --reps 2 $a > $out/ab/$v.r$1.model.txt 2>&1
    done; }
    op_ab 1; put
    left && { model_ab 1; grep -h "resident on the GPU" $out/ab/*.r1.model.txt | head -3 >> $S; put; }
    left && { INFERD_BATCH_VARIANT=1 INFERD_F16_WEIGHTS_MB=65536 INFERD_MMD_MIN=9 INFERD_MMD_RES_MIN=9 \
        timeout 120 $d/bin/test_cuda_model q7-gpu-vs-cpu.json > $out/q7-f16r.log 2>&1
        echo "q7 variant f16r rc=$?" | tee -a $S; tail -2 $out/q7-f16r.log | tee -a $S; put; }
    left && { timeout 60 compute-sanitizer --tool memcheck --error-exitcode 9 $d/bin/inferd bench --op \
        --backend cuda --types q4_K,q5_K,q6_K --n 16,100,300 --shapes qwen7b-attn-kv --reps 2 \
        --batch-invariant false --f16-weights 1024 > $out/memcheck-f16r.log 2>&1
        echo "memcheck (f16r) rc=$?" | tee -a $S; put; }
    left && { op_ab 2; model_ab 2; put; }
    left && for f in 0 65536; do
        timeout 90 $d/bin/inferd bench-serve --backend cuda --model /tmp/q7.gguf --concurrency 1,8,64 \
            --prompt-tokens 512 --max-tokens 128 --rounds 1 --batch-invariant false --f16-weights $f \
            > $out/serve-f16r-$f.txt 2>&1
        echo "serve batch_invariant=false f16_weights_mb=$f"
        tail -4 $out/serve-f16r-$f.txt
    done >> $S
    put
else
    echo "usage: bench/mmd-call.sh check|bench|verify|json|f16r" >&2
    exit 2
fi
date -u +%T | tee -a $S
cp $S $OUT/
cd /tmp && tar czf "$OUT/o.tgz" "o-$phase"
