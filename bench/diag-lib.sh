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
