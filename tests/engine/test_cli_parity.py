#!/usr/bin/env python3
"""test_cli_parity — `inferd generate --numerics llamacpp` against llama.cpp.

usage: test_cli_parity.py PATH/TO/inferd REFERENCE.json [...]

For every case of each ../shared/reference file: the real binary, greedy,
with llama.cpp's batch-dependent kernels, must tokenize the prompt to the
reference's prompt_tokens and produce the reference's 32 completion tokens
exactly (its numbers are llama.cpp's bit for bit, so even steps whose top-2
are close agree). Exit 77 (skip) without ../shared.
"""
import json
import os
import subprocess
import sys


def main():
    exe, refs = sys.argv[1], sys.argv[2:]
    shared = os.environ.get("INFERD_SHARED", "")
    if not shared or not os.path.isdir(os.path.join(shared, "reference")):
        print("skip: INFERD_SHARED not set")
        return 77
    bad = total = 0
    for name in refs:
        ref = json.load(open(os.path.join(shared, "reference", name)))
        model = os.path.join(shared, "models", ref["model_file"])
        for i, case in enumerate(ref["cases"]):
            want = case["completion_tokens"]
            cmd = [exe, "generate", "--model", model, "--prompt", case["prompt"],
                   "--max-tokens", str(len(want)), "--temperature", "0", "--ignore-eos",
                   "--numerics", "llamacpp", "--json"]
            out = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
            total += 1
            if out.returncode != 0:
                print(f"{name} case {i}: exit {out.returncode}: {out.stderr.strip()}")
                bad += 1
                continue
            got = json.loads(out.stdout)
            if got["prompt_tokens"] != case["prompt_tokens"]:
                print(f"{name} case {i}: prompt tokens {got['prompt_tokens']} "
                      f"!= {case['prompt_tokens']}")
                bad += 1
            elif got["completion_tokens"] != want:
                k = next(j for j, (a, b) in enumerate(zip(got["completion_tokens"], want))
                         if a != b) if len(got["completion_tokens"]) == len(want) else -1
                print(f"{name} case {i}: completion differs at step {k}: "
                      f"{got['completion_tokens']} != {want}")
                bad += 1
    print(f"{total - bad} of {total} cases equal llama.cpp's greedy continuation")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
