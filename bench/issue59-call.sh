#!/usr/bin/env bash
# bench/issue59-call.sh — session 59, for the next session: where the ~1.0
# us from a warpgroup's landing to its products' retire goes in mmq4p and
# mmq6w<true> (the probe's rate gives 16 int8 steps ~0.6 us alone, ~1.1
# shared). mmq_trace's planes marks now include x0 / x1: each warpgroup's
# 16 steps issued (after its turn, activation and plane-slot waits), so
# land0 -> x0 is the waits and the issue, x0 -> park0 the steps in the
# pipe; since session 60 act0 / turn0 split land0 -> x0 further (warpgroup
# 0 past its activations' wait, then its turn's; x0 after its plane slots'
# and the issue). prev = main's mmq_trace (build-d90), lev1 =
# MMQ4P_LEVER=1 (no min term) with the same marks; then ncu of one prev
# launch (shared memory, tensor pipe, stalls). A ~4 MB carry (cudart is
# linked statically):
#   mkdir -p devlev; cp build-d90/bench/mmq_trace devlev/prev
#   nvcc <mmq_trace's command> -DMMQ4P_LEVER=1 -o devlev/lev1
#   strip devlev/*; tar czf devlev.tgz devlev
# device tool: carry ["devlev.tgz"], command `bash bench/issue59-call.sh`.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
. bench/call-lib.sh
call_head devlev
for v in prev lev1; do
    timeout 30 $d/$v mmq4p q4_K 14336 4096 512 > $out/marks-$v.txt 2>&1
    echo "== marks $v (mmq4p)"; sed -n 1,4p $out/marks-$v.txt | cut -c1-160; sed -n 26,29p $out/marks-$v.txt | cut -c1-160
done
timeout 30 $d/prev mmq6p q6_K 14336 4096 512 > $out/marks-q6.txt 2>&1
echo "== marks prev (mmq6p)"; sed -n 1,4p $out/marks-q6.txt | cut -c1-160; sed -n 26,29p $out/marks-q6.txt | cut -c1-160
# ncu of one prev launch (base clocks): is the SS form's shared memory the
# limit? (The probe's 68 cycles a step had no tensor copies beside it;
# here ~300 KB a super-block pass through shared memory: wgmma's A and B,
# the copies, the chain's loads.) Mem Busy / Max Bandwidth include it.
. bench/diag-lib.sh
timeout 120 ncu --kernel-name regex:"mmq4p_" --launch-skip 3 --launch-count 1 --section SpeedOfLight \
    --section MemoryWorkloadAnalysis --metrics "$(diag_metrics)" $d/prev mmq4p q4_K 14336 4096 512 \
    > $out/ncu.txt 2>&1
echo "ncu rc=$?"
grep -E "Duration|Mem Busy|Max Bandwidth|Mem Pipes|Shared|shared|tensor|issue_active|stalled_(long|short|wait|barrier|mio|math|lg|dispatch|no_inst)" \
    $out/ncu.txt | sed -E 's/ +/ /g' | cut -c1-150 | head -40
date -u +%T
