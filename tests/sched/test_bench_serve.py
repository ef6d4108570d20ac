#!/usr/bin/env python3
"""test_bench_serve -- `inferd bench-serve` with and without --json on stories260K.

Both runs must exit 0 (a failed request makes bench-serve fail) and print a
row per concurrency whose generated tokens are requests x --max-tokens: with
--json true every request is constrained to a JSON object whose one string
can never close (bench-serve's form), so it too runs to max_tokens (200:
more than the whitespace the constraint allows around a short object, so a
form that closed would show here, as would a constrained request that ended).
A bad --json value is refused with the usage status (2).
usage: test_bench_serve.py <inferd binary> <model file>
"""
import os
import subprocess
import sys


def run(exe, model, *extra):
    return subprocess.run([exe, "bench-serve", "--model", model, "--concurrency", "1,3",
                           "--max-tokens", "200", "--prompt-tokens", "8", "--rounds", "1",
                           "--threads", "1"] + list(extra),
                          capture_output=True, text=True, timeout=240)


def main():
    exe, model = sys.argv[1], sys.argv[2]
    if not os.path.exists(model):
        print("skip: %s not found" % model)
        return 77
    bad = 0
    for j in ("false", "true"):
        p = run(exe, model, "--json", j)
        if p.returncode != 0:
            print("--json %s: exit %d\n%s%s" % (j, p.returncode, p.stdout, p.stderr[-2000:]))
            bad += 1
            continue
        rows = [ln.split() for ln in p.stdout.splitlines() if ln.split()[:1] in (["1"], ["3"])]
        if len(rows) != 2 or any(int(r[2]) != int(r[1]) * 200 for r in rows):
            print("--json %s: rows %r, wanted requests x 200 tokens each\n%s" % (j, rows, p.stdout))
            bad += 1
        if j == "true" and "JSON-constrained" not in p.stdout:
            print("--json true: the header does not say the requests are constrained")
            bad += 1
    p = run(exe, model, "--json", "maybe")
    if p.returncode != 2 or "--json must be true or false" not in p.stderr:
        print("--json maybe: exit %d, %r" % (p.returncode, p.stderr))
        bad += 1
    print("ok" if not bad else "FAIL")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
