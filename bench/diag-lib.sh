# bench/diag-lib.sh — sourced by the device diagnosis scripts
# (bench/mmvt-diag.sh, bench/mmqw-diag.sh): diag_setup NAME FILE unpacks
# devcarry/ when absent, points the loader at its libraries, makes a fresh
# /tmp/o-NAME ($o) and starts its summary FILE ($S) with the GPU's name and
# clock. Sets d (devcarry), o and S.
diag_setup() {
    [ -d devcarry ] || tar xzf devcarry.tgz
    d=$PWD/devcarry
    export LD_LIBRARY_PATH=$d/lib
    o=/tmp/o-$1; rm -rf "$o"; mkdir -p "$o"
    S=$o/$2
    nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader | tee "$S"
}

# diag_ncu_mem OUT SUMMARY: ncu of one mmqr and one mmq6w launch at 4096 x
# 14336 x 512 (bench/mmq_trace from devcarry, $d): their memory side (L2
# and DRAM throughput, bytes through the L2), the full report in
# OUT/ncu.txt, the lines that matter appended to SUMMARY (session 49:
# bench/table-call.sh; wip-nap's nap-call.sh wrote the same loop inline)
diag_ncu_mem() {
    local out=$1 sum=$2 k kn ty
    for k in mmqr:q4_K mmq6w:q6_K; do
        IFS=: read -r kn ty <<< "$k"
        echo "## $k" >> "$out/ncu.txt"
        timeout 90 ncu --kernel-name regex:${kn}_ --launch-count 1 --section SpeedOfLight \
            --section MemoryWorkloadAnalysis --metrics lts__t_bytes.sum,dram__bytes_read.sum,gpu__time_duration.sum \
            "$d/bin/mmq_trace" $kn $ty 14336 4096 512 >> "$out/ncu.txt" 2>&1
        echo "ncu $k rc=$?" >> "$sum"
    done
    grep -E "^## |Duration|Throughput|lts__|dram__bytes|Hit Rate|Busy" "$out/ncu.txt" >> "$sum"
}

# diag_metrics: the ncu counters that say where a wgmma product's stage
# goes (issue, tensor pipe, shared-memory wavefronts and bank conflicts,
# the pipes, stall reasons a issued instruction), for --metrics
diag_metrics() {
    local m=gpu__time_duration.sum,sm__inst_executed.sum,smsp__issue_active.avg.pct_of_peak_sustained_active
    m=$m,sm__warps_active.avg.pct_of_peak_sustained_active,lts__t_sector_hit_rate.pct
    m=$m,dram__throughput.avg.pct_of_peak_sustained_elapsed,lts__throughput.avg.pct_of_peak_sustained_elapsed
    m=$m,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum
    m=$m,"regex:sm__pipe_tensor_[a-z_]*cycles_active\.avg\.pct_of_peak_sustained_active"
    m=$m,"regex:sm__inst_executed_pipe_[a-z_]*\.avg\.pct_of_peak_sustained_active"
    m=$m,"regex:smsp__average_warps_issue_stalled_[a-z_]*_per_issue_active\.ratio"
    echo "$m"
}

# diag_stalls REPORT N: an ncu report of the SourceCounters section as its
# source CSV beside it (REPORT less .ncu-rep, .csv), read by
# bench/stall_sum.py: the warp stall samples summed by opcode, then the N
# SASS instructions with the most (percent of all)
diag_stalls() {
    local csv=${1%.ncu-rep}.csv
    ncu -i "$1" --page source --csv --print-source sass > "$csv" 2> "$csv.err" ||
        ncu -i "$1" --page source --csv > "$csv" 2>> "$csv.err"
    head -c 400 "$csv.err"
    python3 "${BASH_SOURCE[0]%/*}/stall_sum.py" "$csv" "$2"
}

# diag_src_q4 INFERD OUT N: ncu's warp-state samples per SASS instruction
# (SourceCounters) of one product mmq4p launch (INFERD's bench --op, q4_K
# 4096 x 14336 x 512), the report OUT/src-q4.ncu-rep and its source CSV;
# prints diag_stalls' sums by opcode and N top instructions (session 61:
# the trace marks perturb the planes kernels 12-19%, these samples do not)
diag_src_q4() {
    timeout 120 ncu --section SourceCounters --section WarpStateStats -k regex:mmq4p_kernel --launch-skip 2 \
        --launch-count 1 -o "$2/src-q4" "$1" bench --op --backend cuda --types q4_K --n 512 \
        --shapes llama3-ffn-down --reps 3 > "$2/src-q4.log" 2>&1
    echo "ncu source rc=$?"
    diag_stalls "$2/src-q4.ncu-rep" "$3"
}
