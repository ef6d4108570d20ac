#!/usr/bin/env python3
"""test_stall -- no request may stall the others (ROBUSTNESS 20).

One client streams a long completion and times the gap between its events
while five others keep sending maximal bodies (the 4 MB default
max_body_bytes): a 1.3M-entry token array, a 200k-entry logit_bias, a
multi-megabyte prompt string, a valid request padded with a huge unknown
field, and the longest text /tokenize takes (1 MiB). Each of those gets its
400 (or 200) answer, and the stream must not stall: gaps 50 ms above the
same stream's alone for as long (the machine's noise floor; the bound
itself is below; INFERD_TEST_SLOW scales it). That holds only when JSON
parsing, validation and tokenization run off the loop thread (api/parse_pool.c;
with them on the loop the longest gap was 5.1 s) and when the workers,
which run at a low priority, never hold a lock the loop thread needs
(their JSON trees come from a per-worker arena: with glibc's malloc the
loop blocked 31-39 ms on a free() of a worker's memory while that worker
was preempted), and when the loop thread copies body bytes only into
pages written before: a fresh 4 MB buffer's first-touch page faults cost
the loop 19 ms and more on the paravirtualized machines CI runs on (perf,
2026-12-05: 45-70 ms of the loop's CPU in one iteration, gaps of 60-160 ms
in a third of the measurements, CI failing at 137.7 then 74.6 ms);
api/body_cache.c keeps large bodies' buffers and writes four at startup
(longest gap over single measurements: 47-129 ms before, 17-62 ms with
reuse alone, 16-64 ms after).
What is left on a shared 2-core machine is CPU scheduling: a stream alone
shows 5-45 ms gaps there when other processes run, and with the heavy
clients the engine and loop threads can share one core in 1.5 ms slices
(perf sched: both preempted runnable) while the nice-10 threads weigh on
the other; one gap of 40-64 ms still comes in some measurements, alone,
never one per heavy request. Work on the loop thread for a request stalls
the stream once per heavy request (parsing on the loop, planted: p99 and
longest gap 2.2 s). So the bound is: the 99th percentile under 50 ms above
the same stream's alone, no gap over a second, and at most MAX_STALLS gaps
over 50 ms above the longest alone. A miss still runs the whole
measurement once more, on a fresh daemon, and only a second miss fails (as
test_connections does).
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
# gaps over the bound one measurement may show and pass (module doc)
MAX_STALLS = 2


def bodies():
    big_ids = b'{"model":"%s","prompt":[' % MODEL.encode() + b",".join([b"1"] * 1300000) + b'],"max_tokens":4}'
    # distinct keys: duplicates are a 400 of their own (JSON_REJECT_DUPLICATES)
    bias = b'{"model":"%s","prompt":"Hi","max_tokens":4,"logit_bias":{' % MODEL.encode() + \
        b",".join(b'"%d":1' % i for i in range(200000)) + b"}}"
    prompt = b'{"model":"%s","prompt":"' % MODEL.encode() + b"Once upon a time " * 200000 + b'","max_tokens":4}'
    padded = b'{"model":"%s","prompt":"Hi","max_tokens":2,"junk":[' % MODEL.encode() + \
        b",".join([b'{"a":[1,2,3]}'] * 250000) + b"]}"
    # the longest text /tokenize takes (1 MiB): ~0.2 s of tokenizing
    tokenize = b'{"prompt":"' + b"Once upon a time " * 61680 + b'"}'
    return [("ids", "/v1/completions", big_ids, 400), ("logit_bias", "/v1/completions", bias, 400),
            ("prompt", "/v1/completions", prompt, 400), ("padded", "/v1/completions", padded, 200),
            ("tokenize", "/tokenize", tokenize, 200)]


def post_raw(port, path, body):
    s = socket.create_connection(("127.0.0.1", port), timeout=60)
    try:
        s.sendall(b"POST %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n" % path.encode() +
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


class LatencyMiss(Exception):
    """A gap bound missed (every answer was right)."""


def test_heavy_bodies_do_not_stall_a_stream(exe):
    heavy_bodies = bodies()  # built once: building them holds this GIL for a while
    try:
        stall_once(exe, heavy_bodies)
    except LatencyMiss as e:
        print("stall: %s; measuring once more" % e)
        stall_once(exe, heavy_bodies)


def stall_once(exe, heavy_bodies):
    d = D.Daemon(exe, model=D.model_path(MODEL + ".gguf"),
                 args=["--n-ctx", "2048", "--log-level", "info"])
    try:
        # the noise floor: the same stream alone, for a few seconds
        p = start_streamer(d.port, 1900, repeat=True)
        check(streamer_wait_started(p), "the stream did not start")
        time.sleep(3.0)
        quiet, _ = streamer_result(p, stop=True)
        print("alone:       " + stats(quiet))
        p = start_streamer(d.port, 1900, repeat=True)
        check(streamer_wait_started(p), "the stream did not start")
        answers = []
        stop = threading.Event()

        def heavy(name, path, body, want):
            # this client's own threads must not starve the streamer process
            # of CPU (the daemon's share is what is measured): nice 10, as
            # the daemon's parse workers
            try:
                os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 10)
            except (AttributeError, OSError):
                pass
            while not stop.is_set():
                st, b = post_raw(d.port, path, body)
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
        # the bodies' buffers: the four written at startup at least, the
        # eight slots at most (api/body_cache.h)
        kept = d.metrics()["inferd_body_buffer_bytes"]
        check(4 * (4 << 20) < kept <= 8 * ((4 << 20) + 1),
              "inferd_body_buffer_bytes %d after the heavy bodies" % int(kept))
        during = [a for a in answers if a[4] <= t_end]
        check(len(during) >= len(heavy_bodies) and
              len(set(a[0] for a in during)) == len(heavy_bodies),
              "not every heavy body was answered while the stream ran: %r" % [a[0] for a in during])
        # The bound, above this machine's noise floor (the same
        # stream alone: CPU contention from other processes on a shared
        # 2-core machine, which no daemon can remove).
        gs, qs = sorted(g), sorted(quiet)
        p99 = gs[min(len(gs) - 1, int(len(gs) * 0.99))]
        q99 = qs[min(len(qs) - 1, int(len(qs) * 0.99))]
        misses = []
        if not p99 < 0.050 * SLOW + q99:
            misses.append("p99 gap %.1f ms (alone %.1f ms)" % (p99 * 1e3, q99 * 1e3))
        # A stall: a gap 50 ms above the longest alone. Work on the loop
        # thread stalls the stream once per heavy request (each of them was
        # answered twice or more meanwhile); CPU scheduling on two cores
        # gives one or two, at random (see the module doc).
        bound = 0.050 * SLOW + qs[-1]
        stalls = [x for x in gs if x >= bound]
        if len(stalls) > MAX_STALLS or gs[-1] > 1.0 * SLOW:
            misses.append("%d gaps over %.1f ms, longest %.1f ms (alone %.1f ms)" % (
                len(stalls), bound * 1e3, gs[-1] * 1e3, qs[-1] * 1e3))
        if misses:
            raise LatencyMiss("; ".join(misses))
        if stalls:
            print("stall: %d gap(s) over %.1f ms (at most %d allowed): %s ms" % (
                len(stalls), bound * 1e3, MAX_STALLS, ", ".join("%.1f" % (x * 1e3) for x in stalls)))
    finally:
        rc = d.stop()
        d.close()
    check(rc == 0, "exit %s" % rc)


def main():
    D.run([test_heavy_bodies_do_not_stall_a_stream], sys.argv)


if __name__ == "__main__":
    main()
