#!/usr/bin/env python3
"""test_oom -- a recoverable allocation failure in a step (ROBUSTNESS 33):
the requests of that batch get 503 with a JSON error naming it, the daemon
stays up, /health stays 200, and the next requests are served with the same
text as before. The failure comes from the engine's test hook
INFERD_FAULT_STEP=N (engine/fault.h, compiled into test builds only: step N
reports INF_ENOMEM, as a backend's failed allocation does), so it runs on
every backend: the CPU in
CI, the GPU with INFERD_BACKEND=cuda (tests/cuda/run-on-gpu.sh).
usage: test_oom.py <inferd binary>
"""
import json
import sys

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


def main():
    D.run([test_enomem_step_is_503], sys.argv)


if __name__ == "__main__":
    main()
