"""serve_gpu -- the daemon serving a big model from the GPU (run by
tests/cuda/run-on-gpu.sh; not a meson test: it needs a GPU and a model made
there with `inferd mkmodel`).

usage: serve_gpu.py INFERD MODEL.gguf
Prints: time from start to /health 200 (load + prewarm), the prewarm list,
one 512-token prompt streamed for 128 tokens (TTFT, tokens/s), 16
concurrent greedy requests against their solo runs (batch invariance on the
GPU, DESIGN gate 4), and a SIGTERM under load that must exit 0.
"""
import json
import os
import signal
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "api"))
import daemon as D  # noqa: E402

fails = []


def check(cond, what):
    if not cond:
        fails.append(what)
        print("FAIL", what)


def main():
    exe, model = sys.argv[1], sys.argv[2]
    mid = os.path.basename(model)[:-len(".gguf")]
    t0 = time.time()
    d = D.Daemon(exe, model=model, args=["--backend", "cuda", "--max-seqs", "32",
                                         "--n-ctx", "2048", "--step-tokens", "2048"],
                 wait=False)
    d.wait_ready(timeout=120)
    ready = time.time() - t0
    log = d.log()
    pw = [l for l in log.splitlines() if "prewarm" in l or "resident" in l]
    print("ready after %.2f s (load + prewarm)" % ready)
    for l in pw:
        print("  " + l)
    words = ("the quick brown fox jumps over a lazy dog while seven bright stars shine "
             "above quiet hills and rivers ").split()
    prompt = " ".join(words[i % len(words)] for i in range(512))
    body = {"model": mid, "prompt": prompt, "max_tokens": 128, "temperature": 0,
            "ignore_eos": True, "stream": True}
    t1 = time.time()
    st, hdr, data = d.request("POST", "/v1/completions", json.dumps(body).encode(),
                              {"Content-Type": "application/json"}, timeout=120)
    t2 = time.time()
    check(st == 200, "stream status %s" % st)
    events = [l for l in data.decode("utf-8", "replace").splitlines() if l.startswith("data: {")]
    print("512-token prompt, 128 streamed: %d events in %.3f s (end to end, one stream)"
          % (len(events), t2 - t1))
    # 16 concurrent greedy requests against their solo runs
    prompts = ["Once upon a time", "The capital of France", "def main():", "In 1492,",
               prompt[:400], "Seven bright stars"]

    def cmpl(p, n=48):
        b = {"model": mid, "prompt": p, "max_tokens": n, "temperature": 0, "ignore_eos": True}
        st, _, data = d.request("POST", "/v1/completions", json.dumps(b).encode(),
                                {"Content-Type": "application/json"}, timeout=120)
        return st, json.loads(data)["choices"][0]["text"] if st == 200 else None

    solo = {p: cmpl(p)[1] for p in prompts}
    res = {}

    def one(i):
        res[i] = cmpl(prompts[i % len(prompts)])

    t3 = time.time()
    th = [threading.Thread(target=one, args=(i,)) for i in range(16)]
    for t in th:
        t.start()
    for t in th:
        t.join()
    dt = time.time() - t3
    same = sum(1 for i, (st, t) in res.items() if st == 200 and t == solo[prompts[i % len(prompts)]])
    print("16 concurrent greedy requests x 48 tokens in %.2f s (%.0f tok/s): %d/16 equal their solo runs"
          % (dt, 16 * 48 / dt, same))
    check(same == 16, "batch invariance: %d/16" % same)
    # SIGTERM under load: drains, exits 0
    th = [threading.Thread(target=one, args=(i,)) for i in range(8)]
    for t in th:
        t.start()
    time.sleep(0.3)
    d.proc.send_signal(signal.SIGTERM)
    for t in th:
        t.join()
    rc = d.proc.wait(timeout=60)
    print("SIGTERM under load: exit %d" % rc)
    check(rc == 0, "SIGTERM exit %d" % rc)
    print("FAIL" if fails else "ok")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
