#!/usr/bin/env python3
"""test_oom -- a recoverable allocation failure in a step (ROBUSTNESS 34):
the requests of that batch get 503 with a JSON error naming it, the daemon
stays up, /health stays 200, and the next requests are served with the same
text as before. The failure comes from the engine's test hook
INFERD_FAULT_STEP=N (engine/fault.h, compiled into test builds only: step N
reports INF_ENOMEM, as a backend's failed allocation does), so it runs on
every backend: the CPU in
CI, the GPU with INFERD_BACKEND=cuda (tests/cuda/run-on-gpu.sh).
test_model_does_not_fit (ROBUSTNESS 33): with the test hook
INFERD_FAULT_DEVICE_FREE (the device has that many bytes free; on the CPU
the daemon's fit check believes it, on the GPU the CUDA backend's
allocations do too) the daemon exits 78 (CMD_CONFIG, which the systemd
units do not restart) within seconds, with one log line naming the weights,
KV cache and activation sizes and the free/total memory: before the weights
upload when they do not fit, else with them resident.
usage: test_oom.py <inferd binary>
"""
import json
import os
import re
import sys
import time

sys.dont_write_bytecode = True  # keep the source tree clean
import daemon as D  # noqa: E402
from daemon import check

REQ = {"model": "stories260K", "prompt": "Once upon a time", "max_tokens": 8, "temperature": 0}


def test_enomem_step_is_503(exe):
    ref = D.Daemon(exe, args=["--n-ctx", "256"])
    try:
        st, _, b = ref.post("/v1/completions", REQ)
        check(st == 200, "reference: status %d" % st)
        want = json.loads(b)["choices"][0]["text"]
    finally:
        check(ref.stop() == 0, "reference daemon exit status")
    # step 3 fails: inside the first request (a prefill and a few decodes)
    d = D.Daemon(exe, args=["--n-ctx", "256"], env={"INFERD_FAULT_STEP": "3"})
    try:
        if "fault hook:" not in d.log():
            print("skip: this build has no fault hooks (meson -Dfault_hooks)")
            return
        st, _, b = d.post("/v1/completions", REQ)
        check(st == 503, "the failed step's request: status %d, %r" % (st, b[:300]))
        err = json.loads(b).get("error", {})
        check("memory" in err.get("message", "").lower(), "503 does not say why: %r" % err)
        st, _, _ = d.request("GET", "/health")
        check(st == 200, "/health after the failure: %d" % st)
        for i in range(3):
            st, _, b = d.post("/v1/completions", REQ)
            check(st == 200, "request %d after the failure: status %d" % (i, st))
            check(json.loads(b)["choices"][0]["text"] == want, "request %d after the failure differs" % i)
        m = d.metrics()
        used = [v for k, v in m.items() if k.startswith("inferd_kv_blocks_used")]
        check(not used or used[0] == 0, "KV blocks still used after the requests: %r" % used)
    finally:
        check(d.stop() == 0, "daemon exit status after a failed step")


def nofit(exe, budget, args=()):
    d = D.Daemon(exe, args=["--n-ctx", "256"] + list(args),
                 env={"INFERD_FAULT_DEVICE_FREE": str(budget)}, wait=False)
    try:
        t0 = time.time()
        rc = d.proc.wait(60 * D.SLOW)
        return rc, time.time() - t0, d.log()
    finally:
        d.close()


def test_model_does_not_fit(exe):
    rc, dt, log = nofit(exe, 1000)
    if "fault hook:" not in log:
        print("skip: this build has no fault hooks (meson -Dfault_hooks)")
        return
    check(rc == 78, "exit status %d, wanted 78 (CMD_CONFIG):\n%s" % (rc, log[-2000:]))
    m = re.search(r"the model does not fit in .* \(before the weights upload\): weights "
                  r"([0-9.]+) MiB, KV cache not sized yet, activations not sized yet; "
                  r"([0-9.]+) MiB free of ([0-9.]+) MiB", log)
    check(m, "no line naming the sizes:\n" + log[-2000:])
    check(float(m.group(1)) > 0 and float(m.group(2)) < 0.01, m.group(0))
    check("uploaded" not in log and "model loaded" not in log, "weights went up first:\n" + log)
    check("exit 78" in log, log[-1000:])
    # the weights fit (they are less than the file), the KV cache does not
    rc, dt, log = nofit(exe, os.path.getsize(D.model_path()) + 4096, ["--kv-tokens", "65536"])
    check(rc == 78, "exit status %d, wanted 78:\n%s" % (rc, log[-2000:]))
    m = re.search(r"the model does not fit in .* \(with the weights resident\): weights "
                  r"([0-9.]+) MiB \(resident\), KV cache ([0-9.]+) MiB, activations ([0-9.]+) MiB; "
                  r"([0-9.]+) MiB free of ([0-9.]+) MiB", log)
    check(m, "no line naming the sizes:\n" + log[-2000:])
    # stories260K: 5 layers x 2 x (65536 + 16) slots x 32 F16 values
    check(abs(float(m.group(2)) - 5 * 2 * 65552 * 64 / 1048576.0) < 0.01, m.group(0))
    check(float(m.group(3)) > 0, m.group(0))
    check(dt < 30 * D.SLOW, "took %.1f s to give up" % dt)


def main():
    D.run([test_enomem_step_is_503, test_model_does_not_fit], sys.argv)


if __name__ == "__main__":
    main()
