#!/usr/bin/env bash
# run-on-gpu — everything the CUDA backend must show on a GPU machine, in one
# device call: the self-test, the per-op tests (CUDA vs CPU), the whole model
# against the CPU backend and llama.cpp's references, the generate CLI, the
# API suite against a daemon serving from the GPU, compute-sanitizer, and
# the benchmarks. Expects devcarry/ from tests/cuda/device-prep.sh (built
# here: the GPU machine has no libmicrohttpd, jansson or libuv).
#   tests/cuda/run-on-gpu.sh [PHASE ...]   phases: self ops model cli api sanitize bench op
#                                          (and on request: variants ncu ab;
#                                          ab: see AB_VARIANTS below)
# (default: all). Logs go to $OUT (the device tool brings them back), one
# file per phase, and a summary line per step to $OUT/summary.txt.
set -uo pipefail
cd "$(dirname "$0")/../.."
d=$PWD/devcarry
export LD_LIBRARY_PATH="$d/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export INFERD_SHARED=$d/shared INFERD_SRC=$PWD PYTHONUNBUFFERED=1
out=${OUT:-/tmp/out}
mkdir -p "$out"
phases=${*:-self ops model cli api sanitize bench op}
summary=$out/summary.txt
. tests/cuda/q7.sh # q7_make
step() { # name command...: run, log, one summary line with the status and time
    local name=$1; shift
    local t0=$(date +%s%N)
    "$@" >>"$out/$phase.log" 2>&1
    local rc=$?
    local ms=$(( ($(date +%s%N) - t0) / 1000000 ))
    printf '%-8s %-44s rc=%-3s %6d ms\n' "$phase" "$name" "$rc" "$ms" | tee -a "$summary"
}
echo "== $(date -u +%FT%TZ) $(nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv,noheader)" | tee "$summary"
for phase in $phases; do
    case $phase in
    self)
        step selftest $d/bin/test_cuda
        step info-devices $d/bin/inferd info --devices ;;
    ops)
        step cuda-ops $d/bin/test_cuda_ops
        # the float-kernel fallback of the F32/F16/BF16 products (no cuBLASLt)
        INFERD_NO_CUBLAS=1 step "cuda-ops (no cublas)" $d/bin/test_cuda_ops
        # mmqt's weight stages a bulk copy a row instead of a tensor copy (A/B knob)
        INFERD_TMA=0 step "cuda-ops (INFERD_TMA=0)" $d/bin/test_cuda_ops
        # (cuda-ops runs the dispatcher's Q4_K / Q6_K batches through mmqr /
        # mmq6w from 128 rows itself) the exact F16 Q4_K product's
        # shared-memory wgmma form (cuda/mmqw.cu, the default before mmqr)
        INFERD_MMQW=1 step "cuda-ops (INFERD_MMQW=1: mmqw)" $d/bin/test_cuda_ops
        step cuda-sample $d/bin/test_cuda_sample ;;
    model)
        for m in $d/shared/reference/*.json; do
            b=$(basename "$m")
            case $b in prompts-*) continue ;; esac
            step "cuda-model $b" $d/bin/test_cuda_model "$b"
        done ;;
    cli)
        for m in stories260K tiny-llama-Q4_K_M; do
            [ -f $d/shared/models/$m.gguf ] || { echo "cli: $m not carried" | tee -a "$summary"; continue; }
            step "generate --backend cuda $m" $d/bin/inferd generate --backend cuda \
                --model $d/shared/models/$m.gguf --prompt "Once upon a time" --max-tokens 48
        done ;;
    api)
        # the API suite against a daemon on the GPU (INFERD_BACKEND pins it)
        for t in completions errors lifecycle oom device_lost connections; do
            INFERD_BACKEND=cuda step "api-$t (cuda)" python3 tests/api/test_$t.py $d/bin/inferd
        done ;;
    sanitize)
        # memcheck on every per-op case and on a whole model; racecheck (slow:
        # it serializes shared memory) on a whole quantized model, which runs
        # the shared-memory kernels (MMQ, the decode product, attention)
        # (--report-api-errors no: test_transfers asks for a cache that cannot
        # fit on purpose, and memcheck would count the refused cudaMalloc)
        step "memcheck cuda-ops" timeout ${MEMCHECK_TIMEOUT:-300} compute-sanitizer --tool memcheck \
            --report-api-errors no --error-exitcode 9 $d/bin/test_cuda_ops
        step "memcheck cuda-model stories" timeout 120 compute-sanitizer --tool memcheck \
            --error-exitcode 9 $d/bin/test_cuda_model stories260K.json
        # racecheck serializes shared memory: the shared-memory kernels on
        # small inputs (MMQ and mmvq on a 3584 x 512 product; the attention
        # kernels through the small models)
        step "racecheck mmq/mmvq 3584x512 (q4_K,q6_K,q4_0,q8_0)" timeout ${RACE_TIMEOUT:-150} compute-sanitizer \
            --tool racecheck --error-exitcode 9 $d/bin/inferd bench --op --backend cuda \
            --types q4_K,q6_K,q4_0,q8_0 --n 1,8,64 --shapes qwen7b-attn-kv --reps 1
        # the 64 x 128 tile, forced (the tile table keeps 64 x 64
        # for a grid this small)
        step "racecheck mmq bn=128 3584x512 n=256 (q4_K,q5_K,q6_K,q4_0,q8_0)" env INFERD_MMQ_BN=128 timeout ${RACE_TIMEOUT:-150} \
            compute-sanitizer --tool racecheck --error-exitcode 9 $d/bin/inferd bench --op --backend cuda \
            --types q4_K,q5_K,q6_K,q4_0,q8_0 --n 256 --shapes qwen7b-attn-kv --reps 1
        # whole models through `inferd generate` (a prompt past 32 tokens, so
        # the prefill runs the MMQ kernels and the two-rows-a-block attention,
        # then decode steps: every product,
        # attention and sampling kernel of the model's types; test_cuda_model
        # under racecheck ran past its bound); tiny-llama-mixed holds f16,
        # q4_0, q8_0, q4_K, q5_K and q6_K tensors
        for m in stories260K tiny-llama-Q4_K_M tiny-llama-mixed tiny-qwen2-Q4_K_M; do
            [ -f $d/shared/models/$m.gguf ] || { echo "sanitize: $m not carried" | tee -a "$summary"; continue; }
            step "racecheck generate $m" timeout ${RACE_TIMEOUT:-150} compute-sanitizer \
                --tool racecheck --error-exitcode 9 $d/bin/inferd generate --backend cuda \
                --model $d/shared/models/$m.gguf --max-tokens 4 \
                --prompt "Once upon a time there was a little girl who lived in a small house near the big forest. Every morning she walked to the river with her dog, and every evening she told her mother what she had seen"
        done ;;
    bench)
        # GPU vs CPU on the 7B-shaped model (issue 10): test_cuda_model's
        # gates on it, cases in tests/cuda/q7-gpu-vs-cpu.json
        step "mkmodel qwen2.5-7b q4_k_m" q7_make
        step "cuda-model q7 (7B-shaped, GPU vs CPU)" timeout 300 $d/bin/test_cuda_model q7-gpu-vs-cpu.json
        rm -f $d/shared/reference/q7-gpu-vs-cpu.json
        [ -f $d/shared/models/tiny-llama-Q4_K_M.gguf ] && step "bench tiny-llama cuda" $d/bin/inferd bench --backend cuda \
            --model $d/shared/models/tiny-llama-Q4_K_M.gguf --pp 128,512 --tg 128 --reps 3
        step "bench q7 cuda pp512 tg128" timeout 300 $d/bin/inferd bench --backend cuda \
            --model /tmp/q7.gguf --pp 512,2048 --tg 128 --reps 2
        step "serve q7 on the gpu" timeout 300 python3 tests/cuda/serve_gpu.py $d/bin/inferd /tmp/q7.gguf ;;
    op)
        step "bench --op (all shapes)" timeout 300 $d/bin/inferd bench --op --backend cuda \
            --shapes all --types q4_K,q6_K,q5_K,q8_0,q4_0 --n 1,8,512,2048 --reps ${OP_REPS:-30}
        step "bench --op f16" timeout 120 $d/bin/inferd bench --op --backend cuda \
            --shapes llama3-ffn-down --types f16 --n 1,8,512 --reps ${OP_REPS:-30}
        # cuBLAS's own per-n choice (config batch_invariant = false) beside
        # the default one-algorithm-per-shape rows above
        step "bench --op f16/bf16/f32 per-n" timeout 180 $d/bin/inferd bench --op --backend cuda \
            --shapes llama3-ffn-down --types f16,bf16,f32 --n 1,8,512 --batch-invariant false \
            --reps ${OP_REPS:-30} ;;
    variants)
        # the tile table's rows, forced (INFERD_MMQ_KDR, INFERD_NO_Q6K_EXPAND),
        # interleaved in one call: which KDR / EXP is faster at which shape
        for round in 1 2; do
            for kdr in 1 2; do
                INFERD_MMQ_KDR=$kdr step "op kdr=$kdr round $round" $d/bin/inferd bench --op \
                    --backend cuda --types q4_K,q5_K,q6_K --n 16,64,512,2048 --shapes llama3-ffn-down
                INFERD_MMQ_KDR=$kdr INFERD_NO_Q6K_EXPAND=1 step "op kdr=$kdr raw-q6K round $round" \
                    $d/bin/inferd bench --op --backend cuda --types q6_K --n 64,512,2048 \
                    --shapes llama3-ffn-down
            done
        done ;;
    ncu)
        # the counters that decide the next kernel change (seeds' method)
        m=l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum
        m=$m,smsp__inst_executed.sum,sm__pipe_tensor_op_imma_cycles_active.avg.pct_of_peak_sustained_active
        m=$m,smsp__inst_executed_pipe_fma.sum,smsp__inst_executed_pipe_alu.sum,smsp__inst_executed_pipe_lsu.sum
        m=$m,dram__throughput.avg.pct_of_peak_sustained_elapsed,gpu__time_duration.sum
        sec="--section SpeedOfLight --section Occupancy --section WarpStateStats --section SchedulerStats"
        for spec in "mmqk_kernel q4_K 512" "mmqk_kernel q6_K 512" "mmvq_kernel q4_K 1" "mmvq_kernel q6_K 1" \
                    "mmvq_kernel q4_K 8"; do
            set -- $spec
            step "ncu $1 $2 n=$3" timeout 120 ncu --clock-control none -k regex:$1 --launch-skip 2 \
                --launch-count 1 $sec --metrics $m $d/bin/inferd bench --op --backend cuda --types $2 \
                --n $3 --shapes llama3-ffn-down
        done ;;
    ab)
        # A/B interleaved, same bytes, same call. AB_VARIANTS: names, each
        # NAME or NAME=DIR[:VAR=VALUE,...]: the inferd of devcarry/DIR (put
        # there by hand: a previous build's binary) under those variables
        # (default "prev bin": devcarry/prev/inferd against this build).
        # AB_ROUNDS rounds (2) of each variant's op table (AB_TYPES, AB_N,
        # AB_SHAPES) and 7B bench (AB_PP, AB_TG; AB_PP=0 skips it), then
        # one table of every figure side by side: $out/ab.md
        # (tests/cuda/ab_table.py). Example: AB_VARIANTS="bin bn64=bin:INFERD_MMQ_BN=64"
        q7_make
        mkdir -p "$out/ab"
        names=()
        for round in $(seq 1 ${AB_ROUNDS:-2}); do
            for spec in ${AB_VARIANTS:-prev bin}; do
                name=${spec%%=*}; rest=${spec#*=}; [ "$rest" = "$spec" ] && rest=$name
                dir=${rest%%:*}; vars=""; [ "$rest" != "$dir" ] && vars=${rest#*:}
                [ -x $d/$dir/inferd ] || { echo "ab: no devcarry/$dir/inferd" | tee -a "$summary"; continue; }
                [ $round = 1 ] && names+=("$name")
                step "op $name round $round" env ${vars//,/ } $d/$dir/inferd bench --op --backend cuda \
                    --types ${AB_TYPES:-q4_K,q6_K,q8_0} --n ${AB_N:-1,8,512} \
                    --shapes ${AB_SHAPES:-llama3-ffn-down,qwen7b-ffn-up,qwen7b-ffn-down}
                cp "$out/$phase.log" "$out/ab/$name.r$round.op.txt"; : > "$out/$phase.log"
                [ "${AB_PP:-512,2048}" = 0 ] && continue
                step "q7 $name round $round" env ${vars//,/ } $d/$dir/inferd bench --backend cuda \
                    --model /tmp/q7.gguf --pp ${AB_PP:-512,2048} --tg ${AB_TG:-128} --reps 2
                cp "$out/$phase.log" "$out/ab/$name.r$round.model.txt"; : > "$out/$phase.log"
            done
        done
        [ ${#names[@]} -gt 0 ] && python3 tests/cuda/ab_table.py "$out/ab" "${names[@]}" | tee "$out/ab.md" ;;
    *)
        echo "unknown phase $phase" | tee -a "$summary" ;;
    esac
done
