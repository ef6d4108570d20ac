# bench/call-lib.sh — sourced by the device call scripts (bench/ab-call.sh,
# bench/q6p*-call.sh), from the repository root on the device:
#   call_start [NAME]                unpack NAME.tgz (default devcarry); set d (its folder),
#                                    out ($OUT or /tmp/out) and the libraries' path
#   call_head [NAME]                 call_start, then the time and the GPU's name and clock
#   call_op DIR VARS TYPES N SHAPES  one `bench --op` table of devcarry/DIR's inferd under
#                                    VARS ("A=1 B=2"; "" none), its rows, cut to 100 columns
#   call_rows DIR                    the planes kernels' A/B rows (sessions 58-61) of devcarry/DIR's
#                                    inferd: q4_K 4096 x 14336 at 256, 512, 2048 rows; the 7B's ffn-up /
#                                    ffn-down, q4_K and q6_K, at 512; q6_K 4096 x 14336 at 256, 512
#                                    (type, shape, n, us)
#   call_tr LABEL BIN ARGS...        one mmq_trace run (BIN ARGS): LABEL and its first line, the
#                                    product's back-to-back time
#   call_q7 DIR VARS PP TG           the 7B-shaped model's bench (/tmp/q7.gguf: q7_make)
#   call_ops_q7                      devcarry/bin's cuda-ops and the 7B-shaped GPU-vs-CPU gate
#                                    (makes /tmp/q7.gguf; logs in $out)
#   call_san TOOL TYPES N SHAPES [LOG]  compute-sanitizer TOOL over devcarry/bin's bench --op
#                                    products (log $out/san-LOG.log, default TOOL): its rc and
#                                    first reports
#   call_bits TYPES N SHAPES [TOOLS] devcarry/bin's bits: cuda-ops, the 7B-shaped GPU-vs-CPU
#                                    gate (makes /tmp/q7.gguf), then each sanitizer of TOOLS
#                                    (default "racecheck synccheck") over its bench --op
#                                    products (logs in $out)
call_start() {
    local n=${1:-devcarry}
    tar xzf "$n.tgz"
    d=$PWD/$n
    export LD_LIBRARY_PATH=$d/lib INFERD_SHARED=$d/shared INFERD_SRC=$PWD
    out=${OUT:-/tmp/out}
    mkdir -p "$out"
}
call_head() {
    call_start "$@"
    date -u +%T
    nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
}
call_op() {
    env $2 timeout 60 "$d/$1/inferd" bench --op --backend cuda --types "$3" --n "$4" --shapes "$5" 2>&1 |
        grep -E '^\| q[0-9]_' | cut -c1-100
}
call_rows() {
    call_op "$1" "" q4_K 256,512,2048 llama3-ffn-down | cut -d'|' -f2-5
    call_op "$1" "" q4_K,q6_K 512 qwen7b-ffn-up,qwen7b-ffn-down | cut -d'|' -f2-5
    call_op "$1" "" q6_K 256,512 llama3-ffn-down | cut -d'|' -f2-5
}
call_tr() {
    local label=$1
    shift
    echo "$label: $(timeout 30 "$@" 2>&1 | head -1)"
}
call_q7() {
    env $2 timeout 60 "$d/$1/inferd" bench --backend cuda --model /tmp/q7.gguf --pp "$3" --tg "$4" --reps 2 2>&1 |
        grep -E '\| (pp|tg)[0-9]+ ' | head -4
}
call_ops_q7() {
    timeout 170 $d/bin/test_cuda_ops > $out/ops.log 2>&1
    echo "cuda-ops (bin) rc=$? $(tail -1 $out/ops.log)"
    grep -E "FAIL" $out/ops.log | head -5
    . tests/cuda/q7.sh
    q7_make $out/mk.log
    timeout 150 $d/bin/test_cuda_model q7-gpu-vs-cpu.json > $out/q7.log 2>&1
    echo "q7 (bin) rc=$?"
    tail -1 $out/q7.log | cut -c1-200
}
call_san() {
    local log=$out/san-${5:-$1}.log
    timeout 90 compute-sanitizer --tool "$1" --error-exitcode 9 $d/bin/inferd bench --op --backend cuda \
        --types "$2" --n "$3" --shapes "$4" --reps 2 > "$log" 2>&1
    echo "$1 (bin $2 $4 n=$3) rc=$?"
    grep -m2 -E "Error|Hazard|RACE" "$log" | cut -c1-160
}
call_bits() {
    call_ops_q7
    local tool
    for tool in ${4:-racecheck synccheck}; do
        call_san $tool "$1" "$2" "$3"
    done
}
