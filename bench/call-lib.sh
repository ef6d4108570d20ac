# bench/call-lib.sh — sourced by the device call scripts (bench/ab-call.sh,
# bench/q6p*-call.sh), from the repository root on the device:
#   call_start                       unpack devcarry.tgz; set d (devcarry), out ($OUT or
#                                    /tmp/out) and the libraries' path
#   call_op DIR VARS TYPES N SHAPES  one `bench --op` table of devcarry/DIR's inferd under
#                                    VARS ("A=1 B=2"; "" none), its rows, cut to 100 columns
#   call_q7 DIR VARS PP TG           the 7B-shaped model's bench (/tmp/q7.gguf: q7_make)
call_start() {
    tar xzf devcarry.tgz
    d=$PWD/devcarry
    export LD_LIBRARY_PATH=$d/lib INFERD_SHARED=$d/shared INFERD_SRC=$PWD
    out=${OUT:-/tmp/out}
    mkdir -p "$out"
}
call_op() {
    env $2 timeout 60 "$d/$1/inferd" bench --op --backend cuda --types "$3" --n "$4" --shapes "$5" 2>&1 |
        grep -E '^\| q[0-9]_' | cut -c1-100
}
call_q7() {
    env $2 timeout 60 "$d/$1/inferd" bench --backend cuda --model /tmp/q7.gguf --pp "$3" --tg "$4" --reps 2 2>&1 |
        grep -E '\| (pp|tg)[0-9]+ ' | head -4
}
