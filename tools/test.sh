#!/usr/bin/env bash
# test — the project's test command (README, .ci/run):
#   1. the normal build (./build): every suite but `slow`; cuda-only work
#      skips (77) without a GPU;
#   2. an ASan+UBSan build (./build-asan, CPU only) running the suites that
#      parse untrusted input: unit, gguf, tok, fuzz, engine, sched.
# Prints one closing line "N passed, N failed, N skipped".
# INFERD_TEST_QUICK=1 skips the sanitizer pass.
set -uo pipefail
cd "$(dirname "$0")/.."
if ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then
    export PATH="/usr/local/cuda/bin:$PATH"
fi

passed=0; failed=0; skipped=0; rc=0
tally() { # $1 = build dir
    local log="$1/meson-logs/testlog.json"
    [ -f "$log" ] || return
    read -r p f s < <(python3 - "$log" <<'PY'
import json, sys
p = f = s = 0
for line in open(sys.argv[1]):
    r = json.loads(line).get("result")
    if r in ("OK", "EXPECTEDFAIL"): p += 1
    elif r == "SKIP": s += 1
    else: f += 1
print(p, f, s)
PY
)
    passed=$((passed + p)); failed=$((failed + f)); skipped=$((skipped + s))
}

[ -d build ] || meson setup build >/dev/null || exit 1
ninja -C build || exit 1
# the slow suite (long scale-out runs) is left out: meson test -C build --suite slow
meson test -C build --no-rebuild --print-errorlogs --num-processes 2 --no-suite slow || rc=1
tally build

if [ "${INFERD_TEST_QUICK:-0}" != 1 ]; then
    if [ ! -d build-asan ]; then
        meson setup build-asan -Dcuda=disabled -Db_sanitize=address,undefined \
            -Db_lundef=false -Dbuildtype=debugoptimized >/dev/null || exit 1
    fi
    ninja -C build-asan || exit 1
    meson test -C build-asan --no-rebuild --print-errorlogs --num-processes 2 \
        --suite unit --suite gguf --suite tok --suite fuzz --suite engine --suite sched \
        --timeout-multiplier 4 || rc=1
    tally build-asan
fi

echo "$passed passed, $failed failed, $skipped skipped"
exit $rc
