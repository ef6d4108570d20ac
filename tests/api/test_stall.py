#!/usr/bin/env python3
"""test_stall -- no request may stall the others (ROBUSTNESS 20).

One client streams a long completion and times the gap between its events
while four others keep sending maximal bodies (the 4 MB default
max_body_bytes): a 1.3M-entry token array, a 200k-entry logit_bias, a
multi-megabyte prompt string, and a valid request padded with a huge unknown
field. Each of those gets its 400 (or 200) answer; the stream's gaps must
stay under 50 ms at the 99th percentile and under 250 ms at worst, above
the same stream's figures alone (the machine's noise floor; INFERD_TEST_SLOW
scales the bounds), which holds only when JSON parsing,
validation and tokenization run off the loop thread (api/parse_pool.c;
with them on the loop the longest gap was 5.1 s).
The gap statistics of the same stream without the heavy clients are printed
for comparison.
usage: test_stall.py <inferd binary>
"""
import json
import os
import socket
import subprocess
import sys
import threading
import time

sys.dont_write_bytecode = True  # keep the source tree clean
import daemon as D  # noqa: E402
from daemon import check

# tiny-llama: about 2 ms a token here, long enough a stream to be disturbed
MODEL = "tiny-llama-Q4_K_M"
SLOW = float(os.environ.get("INFERD_TEST_SLOW", "1") or 1)


def bodies():
    big_ids = b'{"model":"%s","prompt":[' % MODEL.encode() + b",".join([b"1"] * 1300000) + b'],"max_tokens":4}'
    # distinct keys: duplicates are a 400 of their own (JSON_REJECT_DUPLICATES)
    bias = b'{"model":"%s","prompt":"Hi","max_tokens":4,"logit_bias":{' % MODEL.encode() + \
        b",".join(b'"%d":1' % i for i in range(200000)) + b"}}"
    prompt = b'{"model":"%s","prompt":"' % MODEL.encode() + b"Once upon a time " * 200000 + b'","max_tokens":4}'
    padded = b'{"model":"%s","prompt":"Hi","max_tokens":2,"junk":[' % MODEL.encode() + \
        b",".join([b'{"a":[1,2,3]}'] * 250000) + b"]}"
    return [("ids", big_ids, 400), ("logit_bias", bias, 400), ("prompt", prompt, 400),
            ("padded", padded, 200)]


def post_raw(port, body):
    s = socket.create_connection(("127.0.0.1", port), timeout=60)
    try:
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                  b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
        st, _, b = D.parse_response(D.read_response_bytes(s))
        return st, b
    finally:
        s.close()


# The stream is read by a separate process, so the heavy senders here (and
# this process's GIL) cannot delay its time stamps. It prints one JSON line
# {"gaps": [seconds...], "events": n} and writes "started" to stderr after
# its third event. With repeat it starts the next stream when one ends,
# until "stop" arrives on its stdin (gaps are taken within each stream).
STREAMER = r"""
import json, select, socket, sys, time
port, model, max_tokens, repeat = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), sys.argv[4] == "1"
body = json.dumps({"model": model, "prompt": "Once upon a time", "max_tokens": max_tokens,
                   "stream": True, "ignore_eos": True, "temperature": 0}).encode()
gaps, total, stop, watch = [], 0, False, [sys.stdin]
while not stop:
    s = socket.create_connection(("127.0.0.1", port), timeout=60)
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
              b"Content-Length: %d\r\n\r\n" % len(body) + body)
    last, buf, n = None, b"", 0
    while True:
        r, _, _ = select.select([s] + watch, [], [], 60)
        if sys.stdin in r:
            if sys.stdin.readline().strip() == "stop":  # the test has seen enough
                stop = True
                break
            watch = []  # stdin closed
            continue
        x = s.recv(65536)
        now = time.perf_counter()
        if not x:
            break
        buf += x
        k = buf.count(b"data: {")
        if k:
            if last is not None and n > 2:  # past the first events (prefill)
                gaps.append(now - last)
            last = now
            n += k
            if total == 0 and n >= 3 and n - k < 3:
                sys.stderr.write("started\n")
                sys.stderr.flush()
            buf = buf[buf.rfind(b"data: {") + 7:]
        if b"[DONE]" in buf:
            break
    s.close()
    total += n
    if not repeat:
        break
print(json.dumps({"gaps": gaps, "events": total}))
"""


def start_streamer(port, max_tokens, repeat=False):
    return subprocess.Popen([sys.executable, "-c", STREAMER, str(port), MODEL, str(max_tokens),
                             "1" if repeat else "0"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def streamer_wait_started(p, timeout=30):
    line = p.stderr.readline()
    return line.strip() == b"started"


def streamer_result(p, stop=False):
    out, _ = p.communicate(b"stop\n" if stop else None, timeout=300)
    r = json.loads(out.decode())
    return r["gaps"], r["events"]


def stats(g):
    g = sorted(g)
    return "events %d, median gap %.2f ms, p99 %.2f ms, max %.2f ms" % (
        len(g) + 3, g[len(g) // 2] * 1e3, g[int(len(g) * 0.99)] * 1e3, g[-1] * 1e3)


def test_heavy_bodies_do_not_stall_a_stream(exe):
    d = D.Daemon(exe, model=D.model_path(MODEL + ".gguf"),
                 args=["--n-ctx", "2048", "--log-level", "info"])
    try:
        heavy_bodies = bodies()  # built first: building them holds this GIL for a while
        p = start_streamer(d.port, 1200)
        quiet, _ = streamer_result(p)
        print("alone:       " + stats(quiet))
        p = start_streamer(d.port, 1900, repeat=True)
        check(streamer_wait_started(p), "the stream did not start")
        answers = []
        stop = threading.Event()

        def heavy(name, body, want):
            while not stop.is_set():
                st, b = post_raw(d.port, body)
                answers.append((name, st, want, b[:200], time.time()))

        hs = [threading.Thread(target=heavy, args=b) for b in heavy_bodies]
        for h in hs:
            h.start()
        # until each heavy body was answered twice
        t_lim = time.time() + 60 * SLOW
        while time.time() < t_lim and p.poll() is None:
            kinds = [a[0] for a in answers]
            if all(kinds.count(k[0]) >= 2 for k in heavy_bodies):
                break
            time.sleep(0.05)
        g, n = streamer_result(p, stop=True)
        t_end = time.time()
        stop.set()
        for h in hs:
            h.join()
        print("with bodies: " + stats(g) + "; %d heavy requests answered meanwhile"
              % sum(1 for a in answers if a[4] <= t_end))
        for name, st, want, b, _ in answers:
            check(st == want, "%s body: %d, wanted %d: %r" % (name, st, want, b))
        during = [a for a in answers if a[4] <= t_end]
        check(len(during) >= 4 and len(set(a[0] for a in during)) == 4,
              "not every heavy body was answered while the stream ran: %r" % [a[0] for a in during])
        # The loop's share is what this proves: with parsing on the loop the
        # longest gap was seconds. On a loaded 2-core CI machine a stream
        # alone shows 20 ms gaps from CPU contention, so the bound is on the
        # 99th percentile, with a ceiling for the longest one.
        # The noise floor of this machine (the same stream alone) is added.
        gs, qs = sorted(g), sorted(quiet)
        p99 = gs[min(len(gs) - 1, int(len(gs) * 0.99))]
        q99 = qs[min(len(qs) - 1, int(len(qs) * 0.99))]
        check(p99 < 0.050 * SLOW + q99, "the stream's p99 gap was %.1f ms (alone %.1f ms)"
              % (p99 * 1e3, q99 * 1e3))
        check(gs[-1] < 0.250 * SLOW + qs[-1], "the stream stalled %.1f ms" % (gs[-1] * 1e3))
    finally:
        rc = d.stop()
        d.close()
    check(rc == 0, "exit %s" % rc)


def main():
    D.run([test_heavy_bodies_do_not_stall_a_stream], sys.argv)


if __name__ == "__main__":
    main()
