#!/usr/bin/env bash
# test — the project's test command (README, .ci/run):
#   1. the normal build (./build): every suite but `slow` (long runs: the
#      100k-request soak, valgrind, scale-out); cuda-only work
#      skips (77) without a GPU;
#   2. an ASan+UBSan build (./build-asan, CPU only) running the suites that
#      parse untrusted input: unit, gguf, tok, fuzz, engine, sched.
# Test data: ../shared beside the checkout, else data/ (a bare clone: the
# tests needing what only ../shared has skip, each naming the file).
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

# The data root (../shared, else data/) is chosen when meson configures
# (tests/meson.build): reconfigure a build dir set up before ../shared came
# (or after it went), so that no test skips that could run.
data_root_stale() { # $1 = build dir
    python3 - "$1" <<'PY'
import json, os, sys
try:
    tests = json.load(open(os.path.join(sys.argv[1], "meson-info", "intro-tests.json")))
except (OSError, ValueError):
    sys.exit(1)
roots = {t.get("env", {}).get("INFERD_SHARED") for t in tests} - {None}
want_shared = os.path.isdir(os.path.join("..", "shared", "models"))
for r in roots:
    if r.rstrip("/").endswith("/data") == want_shared:
        sys.exit(0)
sys.exit(1)
PY
}
reconfigure_if_stale() { # $1 = build dir
    if [ -d "$1" ] && data_root_stale "$1"; then
        echo "test: $1 was configured for another data root; meson setup --reconfigure"
        meson setup --reconfigure "$1" >/dev/null || exit 1
    fi
}

reconfigure_if_stale build
[ -d build ] || meson setup build >/dev/null || exit 1
ninja -C build || exit 1
# the slow suite (the 100k soak, valgrind, long scale-out runs) is left out:
# meson test -C build --suite slow
meson test -C build --no-rebuild --print-errorlogs --num-processes 2 --no-suite slow || rc=1
tally build

if [ "${INFERD_TEST_QUICK:-0}" != 1 ]; then
    reconfigure_if_stale build-asan
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
