#!/usr/bin/env bash
# fuzz — real fuzzing of one libFuzzer target for N minutes.
#
#   tools/fuzz.sh NAME MINUTES        NAME: gguf | request | tok | detok | chat
#
# Builds ./build-fuzz once (clang, ASan + UBSan with every finding fatal,
# coverage instrumentation of the whole library: -fsanitize=fuzzer-no-link),
# then runs tests/fuzz/fuzz_NAME_libfuzzer under nice (FUZZ_NICE, default
# 15) on a working corpus build-fuzz/corpus-NAME seeded from the committed
# tests/fuzz/corpus/NAME (libFuzzer adds its finds to the first directory,
# never to the repo's). Crashes land in build-fuzz/artifacts-NAME/ and the
# script exits non-zero; replay one with the normal build:
#   build/tests/fuzz/fuzz_NAME build-fuzz/artifacts-NAME/crash-...
# Prints libFuzzer's final stats (number of executed units, peak RSS).
# FUZZ_JOBS is not offered on purpose: one process (the machine is shared).
# Env: INFERD_SHARED (default ../shared), FUZZ_CC (default clang-14 or clang),
# FUZZ_ARGS (extra libFuzzer flags, e.g. -max_len=8192).
set -euo pipefail
cd "$(dirname "$0")/.."
name="${1:-}"; minutes="${2:-}"
case "$name" in gguf|request|tok|detok|chat) ;; *)
    echo "usage: tools/fuzz.sh gguf|request|tok|detok|chat MINUTES" >&2; exit 2;; esac
case "$minutes" in ''|*[!0-9]*) echo "MINUTES must be a whole number" >&2; exit 2;; esac

cc="${FUZZ_CC:-}"
if [ -z "$cc" ]; then
    if command -v clang-14 >/dev/null; then cc=clang-14; else cc=clang; fi
fi
if [ ! -d build-fuzz ]; then
    CC="$cc" nice -n "${FUZZ_NICE:-15}" meson setup build-fuzz -Dcuda=disabled \
        -Db_sanitize=address,undefined -Db_lundef=false -Dbuildtype=debugoptimized \
        -Dc_args='-fsanitize=fuzzer-no-link -fno-sanitize-recover=all' >/dev/null
fi
nice -n "${FUZZ_NICE:-15}" ninja -C build-fuzz -j1 "tests/fuzz/fuzz_${name}_libfuzzer"

export INFERD_SHARED="${INFERD_SHARED:-$(cd .. && pwd)/shared}"
export ASAN_OPTIONS="${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
work="build-fuzz/corpus-$name"; art="build-fuzz/artifacts-$name"
mkdir -p "$work" "$art"
cp -n tests/fuzz/corpus/"$name"/* "$work"/ 2>/dev/null || true
dict=()
[ "$name" = request ] && dict=(-dict=tests/fuzz/request.dict)
# -rss_limit_mb: a bounded run; -timeout: one input taking 10 s is a finding
# (a stall of the loop thread in the daemon).
# shellcheck disable=SC2086
exec nice -n "${FUZZ_NICE:-15}" "build-fuzz/tests/fuzz/fuzz_${name}_libfuzzer" \
    -max_total_time=$((minutes * 60)) -timeout=10 -rss_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="$art/" "${dict[@]}" ${FUZZ_ARGS:-} "$work"
