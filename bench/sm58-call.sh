#!/usr/bin/env bash
# bench/sm58-call.sh — session 58, for the next session's first call: mmq4p's
# one set with the shift between the planes and the min term issued with
# plane 1 (cuda/mmq4p.cu MMQ4P_SM=1: bin), the planes frame's consumer waits
# by polling (cuda/mmqp.cuh MMQP_SPIN=1: b3) and both (b4), against main at
# its defaults (prev). bin's bits (cuda-ops, the 7B-shaped gate, racecheck
# and synccheck of the q4_K 512-row product: its waits between the planes
# are new); bench --op q4_K (and q6_K for the waits) two rounds
# interleaved; mmq_trace back to back (prev, bin, b3, b4 and lev2: the
# no-v1-chain lever that keeps the sums read) and the marks of bin and b3;
# on an H200 #11's table too. SPIN's bits: b3 and b4 are not run through
# cuda-ops here (polling changes no arithmetic); keep either only after a
# call with it as bin.
#   ARGS="-DMMQ4P_SM=1" KERNELS="mmq4p" bench/ab-prep.sh
#   build-ab2 with -Dcuda_args="-DMMQP_SPIN=1", build-ab3 "-DMMQP_SPIN=1 -DMMQ4P_SM=1"
#   (ninja daemon/inferd bench/mmq_trace in each); then
#   cp build-d90/bench/mmq_trace devcarry/prev/; mkdir devcarry/lev2 devcarry/b3 devcarry/b4
#   nvcc <build-d90's mmq_trace command> -DMMQ4P_LEVER=2 -o devcarry/lev2/mmq_trace
#   cp build-ab2/{daemon/inferd,bench/mmq_trace} devcarry/b3/ (build-ab3's to b4)
#   strip devcarry/*/*; tar czf devcarry.tgz devcarry (~58 MB)
# device tool: carry ["devcarry.tgz"], command `bash bench/sm58-call.sh`.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
. bench/call-lib.sh
call_head
call_bits q4_K 512 llama3-ffn-down
date -u +%T
for r in 1 2; do
    for v in prev bin b3 b4; do
        echo "== $v round $r"
        call_rows $v
    done
done 2>&1 | tee $out/ab.txt
for v in prev bin b3 b4 lev2; do
    call_tr "$v mmq4p" $d/$v/mmq_trace mmq4p q4_K 14336 4096 512
done | tee $out/trace.txt
for v in bin b3 lev2; do
    timeout 30 $d/$v/mmq_trace mmq4p q4_K 14336 4096 512 > $out/marks-$v.txt 2>&1
    echo "== marks $v"; sed -n 2,2p $out/marks-$v.txt | cut -c1-160; sed -n 26,28p $out/marks-$v.txt | cut -c1-160
done
date -u +%T
# on an H200 also #11's table (bench/table57-call.sh, with bin: its q4_K
# rows from 256 rows are MMQ4P_SM's, every other row main's kernels), the
# halves A/B, the ready time and the one-row floor
case "$(nvidia-smi --query-gpu=name --format=csv,noheader)" in *H200*) bash bench/table57-call.sh ;; esac
date -u +%T
