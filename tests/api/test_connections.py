#!/usr/bin/env python3
"""test_connections -- many connections at once (ROBUSTNESS 26, 27, 30).

- flood: 1,000 concurrent connections from 127.0.0.2 ... 127.0.0.9 (125 each,
  max_connections_per_ip 64, max_connections 600): exactly the 488 over the
  per-address cap are refused, each within milliseconds of its connect; the
  512 admitted ones are then served; /health from 127.0.0.1 (another
  process, so this one's GIL does not count) keeps a p99 under 50 ms
  throughout.
- slowloris: 500 connections sending a request line and headers one byte at
  a time cannot starve a good client (its completions and /health stay
  fast), and every one of them is closed by the read deadline.
- storm: 1,000 streaming clients that close at a random point (right after
  sending, after the headers, after 1-8 events) leave zero running
  sequences, zero waiting requests and zero used KV blocks; the daemon
  serves normally afterwards and exits 0.
INFERD_TEST_SLOW=<factor> scales the latency bounds (valgrind suite).
usage: test_connections.py <inferd binary>
"""
import json
import os
import random
import resource
import selectors
import socket
import subprocess
import sys
import threading
import time

sys.dont_write_bytecode = True  # keep the source tree clean
import daemon as D  # noqa: E402
from daemon import check

MODEL = "stories260K"
SLOW = float(os.environ.get("INFERD_TEST_SLOW", "1") or 1)
ADDRS = ["127.0.0.%d" % i for i in range(2, 10)]

# 1,000 sockets here plus as many in the daemon (it inherits this limit)
_soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
if _soft < 4096:
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(_hard, 8192), _hard))

# The /health prober: a separate process, one request per new connection
# every 10 ms, prints its latencies (ms) as one JSON line at the end.
PROBER = r"""
import json, socket, sys, time
port, dur = int(sys.argv[1]), float(sys.argv[2])
out, errs, t_end = [], 0, time.time() + dur
while time.time() < t_end:
    t0 = time.perf_counter()
    try:
        s = socket.create_connection(("127.0.0.1", port), timeout=5)
        s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        b = b""
        while True:
            x = s.recv(4096)
            if not x:
                break
            b += x
        s.close()
        if b.startswith(b"HTTP/1.1 200"):
            out.append((time.perf_counter() - t0) * 1e3)
        else:
            errs += 1
    except OSError:
        errs += 1
    time.sleep(0.01)
print(json.dumps({"lat": out, "errors": errs}))
"""


def start_prober(port, seconds):
    return subprocess.Popen([sys.executable, "-c", PROBER, str(port), str(seconds)],
                            stdout=subprocess.PIPE)


def prober_result(p):
    out, _ = p.communicate(timeout=120)
    r = json.loads(out.decode())
    lat = sorted(r["lat"])
    check(lat, "the /health prober got no answer at all (%d errors)" % r["errors"])
    p99 = lat[min(len(lat) - 1, int(len(lat) * 0.99))]
    return p99, lat[-1], len(lat), r["errors"]


def connect_from(addr, port, timeout=5):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(timeout)
    s.bind((addr, 0))
    s.connect(("127.0.0.1", port))
    return s


def is_closed(s):
    """Non-blocking: 1 when the peer closed (EOF or reset), 0 when open, None
    when data arrived."""
    try:
        s.setblocking(False)
        x = s.recv(1)
        return 1 if x == b"" else None
    except (BlockingIOError, InterruptedError):
        return 0
    except OSError:
        return 1
    finally:
        s.setblocking(True)


def pct(v, q):
    v = sorted(v)
    return v[min(len(v) - 1, int(len(v) * q))] if v else 0.0


class LatencyMiss(Exception):
    """A latency bound missed (the counts and the behaviour were right)."""


def test_flood_1000(exe):
    """1,000 connections from 8 addresses: exactly those over the caps are
    refused, quickly, and /health keeps its p99. The latency bounds are checked
    on a shared 2-core machine, where one window can miss by a few ms: a miss
    runs the flood once more on a fresh daemon, and only a second miss fails.
    Counts and behaviour are checked in every run."""
    try:
        flood_once(exe)
    except LatencyMiss as e:
        print("flood: %s; running it once more" % e)
        flood_once(exe)


def flood_once(exe):
    misses = []
    d = D.Daemon(exe, args=["--max-connections", "600", "--max-connections-per-ip", "64",
                            "--read-timeout-s", "60", "--idle-timeout-s", "60"])
    socks = []
    try:
        prober = start_prober(d.port, 6.0)
        time.sleep(0.5)
        sel = selectors.DefaultSelector()
        t_conn, t_closed = {}, {}
        for i in range(1000):
            s = connect_from(ADDRS[i % len(ADDRS)], d.port)
            socks.append(s)
            t_conn[i] = time.perf_counter()
            sel.register(s, selectors.EVENT_READ, i)
            for key, _ in sel.select(0):  # refusals that arrived meanwhile
                t_closed[key.data] = time.perf_counter()
                sel.unregister(key.fileobj)
        t_end = time.time() + 1.0
        while time.time() < t_end:
            for key, _ in sel.select(0.05):
                t_closed[key.data] = time.perf_counter()
                sel.unregister(key.fileobj)
        refused = [i for i in t_closed if is_closed(socks[i]) == 1]
        check(len(refused) == len(t_closed), "data on a connection that sent nothing")
        check(len(refused) == 1000 - 64 * len(ADDRS),
              "%d refused, wanted %d" % (len(refused), 1000 - 64 * len(ADDRS)))
        per_addr = {}
        for i in range(1000):
            if i not in t_closed:
                per_addr[ADDRS[i % len(ADDRS)]] = per_addr.get(ADDRS[i % len(ADDRS)], 0) + 1
        check(all(v == 64 for v in per_addr.values()), "admitted per address: %r" % per_addr)
        waits = [(t_closed[i] - t_conn[i]) * 1e3 for i in refused]
        print("flood: %d refused, refusal p50 %.2f ms p99 %.2f ms max %.2f ms"
              % (len(refused), pct(waits, 0.5), pct(waits, 0.99), max(waits)))
        # a refusal's wait counts from its connect() here to this loop seeing
        # the close, and this one process opens 1,000 sockets meanwhile: on 2
        # cores the median is ~40 ms of which most is this loop, so the bound
        # is 100 ms (the /health bound below stays the 50 ms)
        if not pct(waits, 0.99) < 100 * SLOW:
            misses.append("refusals are slow: p99 %.1f ms" % pct(waits, 0.99))
        # the admitted connections work: one /health each
        admitted = [socks[i] for i in range(1000) if i not in t_closed]
        for s in admitted:
            s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        ok = 0
        for s in admitted:
            try:
                r = D.read_response_bytes(s)
                ok += r.startswith(b"HTTP/1.1 200")
            except OSError:
                pass
        check(ok == len(admitted), "%d of %d admitted connections served" % (ok, len(admitted)))
        p99, mx, n, errs = prober_result(prober)
        print("flood: /health from 127.0.0.1: %d probes, p99 %.2f ms, max %.2f ms, %d errors"
              % (n, p99, mx, errs))
        check(errs == 0, "%d /health probes failed" % errs)
        if not p99 < 50 * SLOW:
            misses.append("/health p99 %.1f ms during the flood" % p99)
        m = d.metrics()
        check(m["inferd_refused_connections_total"] >= len(refused), m["inferd_refused_connections_total"])
    finally:
        for s in socks:
            s.close()
        rc = d.stop()
        d.close()
    check(rc == 0, "daemon exit status %s" % rc)
    if misses:
        raise LatencyMiss("; ".join(misses))


def test_slowloris_500(exe):
    rt = 3
    d = D.Daemon(exe, args=["--max-connections", "600", "--max-connections-per-ip", "64",
                            "--read-timeout-s", str(rt), "--n-ctx", "256"])
    socks = []
    try:
        for i in range(500):
            socks.append(connect_from(ADDRS[i % len(ADDRS)], d.port))
        t0 = time.time()
        prober = start_prober(d.port, rt + 2.0)
        req = b"GET /v1/models HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 64
        stop = threading.Event()
        pos = [0] * len(socks)
        closed_at = [None] * len(socks)

        def trickle():
            # one byte per connection per 0.5 s (slower than any real client)
            while not stop.is_set():
                for i, s in enumerate(socks):
                    if closed_at[i] is not None or pos[i] >= len(req):
                        continue
                    try:
                        s.sendall(req[pos[i]:pos[i] + 1])
                        pos[i] += 1
                    except OSError:
                        closed_at[i] = time.time() - t0
                stop.wait(0.5)

        th = threading.Thread(target=trickle)
        th.start()
        good = []
        while time.time() - t0 < rt + 1.0:
            t1 = time.perf_counter()
            st, j = d.json("POST", "/v1/completions", {"model": MODEL, "prompt": "Hi", "max_tokens": 4})
            good.append((time.perf_counter() - t1) * 1e3)
            check(st == 200, "good client refused during slowloris: %d %r" % (st, j))
            time.sleep(0.05)
        p99, mx, n, errs = prober_result(prober)
        print("slowloris: %d good completions, max %.1f ms; /health p99 %.2f ms (%d probes, %d errors)"
              % (len(good), max(good), p99, n, errs))
        check(errs == 0, "%d /health probes failed" % errs)
        check(p99 < 50 * SLOW, "/health p99 %.1f ms during slowloris" % p99)
        check(max(good) < 1000 * SLOW, "a good completion took %.0f ms" % max(good))
        # every slow connection is closed by the read deadline (+ one tick)
        t_lim = time.time() + 5
        while time.time() < t_lim:
            for i, s in enumerate(socks):
                if closed_at[i] is None and is_closed(s) == 1:
                    closed_at[i] = time.time() - t0
            if all(c is not None for c in closed_at):
                break
            time.sleep(0.1)
        stop.set()
        th.join()
        open_left = sum(1 for c in closed_at if c is None)
        check(open_left == 0, "%d slow connections still open after %.0f s" % (open_left, rt + 5))
        late = max(closed_at)
        print("slowloris: all 500 closed, the last %.1f s after the start (read_timeout_s %d)" % (late, rt))
        check(late < rt + 3, "slow connections closed late: %.1f s" % late)
        m = d.metrics()
        check(m["inferd_slow_clients_closed_total"] >= 500, m["inferd_slow_clients_closed_total"])
    finally:
        for s in socks:
            s.close()
        rc = d.stop()
        d.close()
    check(rc == 0, "daemon exit status %s" % rc)


def storm_client(port, addr, mode, max_tokens, rnd):
    """One streaming client that goes away; returns what it saw."""
    body = json.dumps({"model": MODEL, "prompt": "Once upon a time", "max_tokens": max_tokens,
                       "stream": True, "ignore_eos": True, "temperature": 0.8,
                       "seed": rnd.randrange(1 << 30)}).encode()
    s = connect_from(addr, port, timeout=30)
    try:
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n"
                  % len(body) + body)
        if mode == 0:
            return "sent"
        buf = b""
        want = 0 if mode == 1 else mode - 1  # events to wait for
        while True:
            x = s.recv(65536)
            if not x:
                return "eof"
            buf += x
            if b"\r\n\r\n" in buf and not buf.startswith(b"HTTP/1.1 200"):
                return buf.split(b" ", 2)[1].decode()  # 429 etc.
            if b"\r\n\r\n" in buf and buf.count(b"data: {") >= want:
                return "events"
    except OSError:
        return "error"
    finally:
        # RST instead of FIN for half of them: both must be noticed
        if rnd.random() < 0.5:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        s.close()


def test_storm_1000(exe):
    d = D.Daemon(exe, args=["--max-connections", "600", "--max-connections-per-ip", "64",
                            "--queue-len", "512", "--max-seqs", "16", "--n-ctx", "512"])
    try:
        rnd = random.Random(12)
        results = {}
        lock = threading.Lock()
        jobs = [(ADDRS[i % len(ADDRS)], rnd.randrange(10), rnd.choice([64, 200, 400]),
                 random.Random(i)) for i in range(1000)]
        it = iter(jobs)

        def worker():
            while True:
                with lock:
                    j = next(it, None)
                if j is None:
                    return
                r = storm_client(d.port, j[0], j[1], j[2], j[3])
                with lock:
                    results[r] = results.get(r, 0) + 1

        t0 = time.time()
        ths = [threading.Thread(target=worker) for _ in range(200)]
        for t in ths:
            t.start()
        for t in ths:
            t.join()
        print("storm: 1000 clients in %.1f s: %r" % (time.time() - t0, results))
        check(sum(results.values()) == 1000, results)
        check(results.get("events", 0) >= 300, "too few clients saw events: %r" % results)
        t_lim = time.time() + 15 * SLOW
        m = d.metrics()
        while time.time() < t_lim:
            m = d.metrics()
            if (m["inferd_running_sequences"] == 0 and m["inferd_waiting_requests"] == 0 and
                    m["inferd_kv_blocks_used"] == 0 and m["inferd_active_streams"] == 0):
                break
            time.sleep(0.1)
        print("storm: after %.1f s: running %d waiting %d kv used %d active streams %d disconnects %d"
              % (time.time() - t0, m["inferd_running_sequences"], m["inferd_waiting_requests"],
                 m["inferd_kv_blocks_used"], m["inferd_active_streams"],
                 m["inferd_client_disconnects_total"]))
        check(m["inferd_running_sequences"] == 0, "running sequences left: %r" % m["inferd_running_sequences"])
        check(m["inferd_waiting_requests"] == 0, "waiting requests left")
        check(m["inferd_kv_blocks_used"] == 0, "KV blocks still used: %r" % m["inferd_kv_blocks_used"])
        check(m["inferd_active_streams"] == 0, "active streams left")
        check(m["inferd_client_disconnects_total"] >= results.get("events", 0),
              "disconnects %r < clients that left mid-stream %r"
              % (m["inferd_client_disconnects_total"], results.get("events", 0)))
        st, j = d.json("POST", "/v1/completions", {"model": MODEL, "prompt": "Hi", "max_tokens": 8})
        check(st == 200 and j["choices"][0]["finish_reason"] in ("stop", "length"), j)
    finally:
        rc = d.stop()
        log = d.log()
        d.close()
    check(rc == 0, "daemon exit status %s:\n%s" % (rc, log[-2000:]))


def main():
    D.run([test_flood_1000, test_slowloris_500, test_storm_1000], sys.argv)


if __name__ == "__main__":
    main()
