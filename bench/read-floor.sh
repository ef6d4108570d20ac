# bench/read-floor.sh — sourced by the device call scripts that measure a
# one-row product's floor (int8feed-call.sh, h200-floor-call.sh):
# read_floor TRACE GEOMETRY... runs /tmp/read_probe's plain reads, its bulk
# pattern at each "ROWS ROW_BYTES RB RUN D" geometry, and TRACE's (an
# mmq_trace build) mmvt q6_K / q4_K at 4096 x 14336, two rounds.
read_floor() {
    local tr=$1 a r k
    shift
    echo "== read_probe (plain reads, MB)"
    timeout 60 /tmp/read_probe 33.03 40 44 48.17 64 128
    for a in "$@"; do
        timeout 30 /tmp/read_probe bulk $a
    done
    for r in 1 2; do
        for k in "mmvt q6_K" "mmvt q4_K"; do
            timeout 30 $tr $k 14336 4096 1 2>&1 | head -1
        done
    done
}
