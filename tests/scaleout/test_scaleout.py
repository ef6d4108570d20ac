#!/usr/bin/env python3
"""test_scaleout -- three inferd daemons (tiny-qwen2, one engine thread each)
behind HAProxy with the shipped deploy/haproxy/haproxy.cfg, all on 127.0.0.1,
driven by concurrent streaming clients through HAProxy:

  spread     independent requests reach every backend (each one's /metrics);
  hot-session nine concurrent requests of one session id spread past its
             daemon (bounded-load hash), serial ones stay on it;
  agent      a backend with more requests than max_seqs reports a lower
             weight on its agent port (free KV share / (1 + waiting)) and
             HAProxy applies it within seconds; back to full once they end;
  session    one X-Session-Id (or body "user", completions and chat) always
             lands on one backend, and its second turn is a prefix-cache hit
             in that backend's /metrics; different ids use more than one
             backend;
  sigterm    SIGTERM to a backend under load: /health on it answers 503 while
             its streams finish, HAProxy takes it out, no request fails, the
             daemon exits 0;
  sigkill    SIGKILL to a backend under load: only requests that were on it
             fail, every request started after the kill succeeds; restarted,
             HAProxy puts it back once /health is 200 and it gets work again;
  throughput the same load through HAProxy with one backend in service and
             with three: tokens/s printed (reported, not gated: on a 2-core
             machine three daemons cannot be 3x one).

usage: test_scaleout.py <inferd> [--long]
  --long  (the `slow` suite) longer loads, more workers, several kill and
          drain rounds, 20 s throughput runs.
"""
import json
import os
import signal
import socket
import sys
import time

import cluster as C

check = C.check
MODEL_FILE = "tiny-qwen2-Q4_K_M.gguf"
MODEL = "tiny-qwen2-Q4_K_M"
LONG = "--long" in sys.argv
# A daemon's settings: one engine thread (three daemons share 2 cores), a
# drain long enough for every stream the test starts.
DAEMON_ARGS = ["--threads", "1", "--n-ctx", "2048", "--max-seqs", "8", "--drain-timeout-s", "60"]


def body(max_tokens, prompt="Once upon a time there was a server", **kw):
    b = {"model": MODEL, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
         "stream": True, "ignore_eos": True, "stream_options": {"include_usage": True}}
    b.update(kw)
    if not b["stream"]:
        del b["stream_options"]
    return b


def counts(backends):
    """Successful completions per backend, from each one's /metrics."""
    return {b.name: b.metrics().get('inferd_completion_requests_total{status="200"}', 0)
            for b in backends}


def wait_active(b, n=1, timeout=20.0):
    """Until backend b has n streams in progress."""
    t0 = time.time()
    while time.time() - t0 < timeout:
        if b.metrics().get("inferd_active_streams", 0) >= n:
            return
        time.sleep(0.02)
    raise AssertionError("%s never had %d active streams" % (b.name, n))


def hold_stream(port, b, first=True):
    """A streaming request on a raw socket, returned once its first event
    arrived (first=False: at once, for a request that waits for admission;
    close the socket to hang up)."""
    data = json.dumps(b).encode()
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
              b"\r\nContent-Length: %d\r\n\r\n" % len(data) + data)
    if not first:
        return s
    got = b""
    while b"data: {" not in got:
        x = s.recv(65536)
        check(x, "held stream closed before its first event: %r" % got[:300])
        got += x
    return s


def test_spread(lb, backends):
    before = counts(backends)
    load = C.Load(lb.port, 6, body(48))
    time.sleep(6 if LONG else 3)
    res = load.stop()
    bad = [r for r in res if not r.ok]
    check(not bad, "failed requests: %r" % bad[:3])
    after = counts(backends)
    per = {k: after[k] - before[k] for k in after}
    seen = {}
    for r in res:
        seen[r.backend] = seen.get(r.backend, 0) + 1
    print("  spread: %d requests; per backend (/metrics) %r; X-Inferd-Backend %r"
          % (len(res), per, seen))
    check(sum(per.values()) == len(res), "metrics count %r != %d requests" % (per, len(res)))
    for k, v in per.items():
        check(v >= max(1, len(res) // 10), "backend %s got %d of %d requests" % (k, v, len(res)))
    check(set(seen) == set(per), "backend header names %r vs %r" % (set(seen), set(per)))
    # one daemon's /metrics through the balancer would mislead: refused there
    st = C.D.parse_response(C.D.Daemon.raw(lb, b"GET /metrics HTTP/1.1\r\nHost: x\r\n"
                                               b"Connection: close\r\n\r\n"))[0]
    check(st == 404, "/metrics through HAProxy: %d" % st)


def test_hot_session(lb, backends):
    """Nine workers sending one session id at once: the bounded-load hash
    (hash-balance-factor 150) lets the id's daemon take at most ~1.5x the
    average and gives the rest to the next daemon on the ring (without it
    all would go to one). One client alone with the same id stays on one
    daemon (all 20, each sent once HAProxy has released the one before)."""
    hdr = {"X-Session-Id": "hot-session"}
    load = C.Load(lb.port, 9, body(48), headers=hdr)
    time.sleep(6 if LONG else 3)
    res = load.stop()
    check(res and all(r.ok for r in res), "failed: %r" % [r for r in res if not r.ok][:3])
    seen = {}
    for r in res:
        seen[r.backend] = seen.get(r.backend, 0) + 1
    print("  hot session, 9 at once: %d requests, by backend %r" % (len(res), seen))
    check(len(seen) >= 2, "one session id at 9 concurrent requests stayed on %r" % seen)
    check(max(seen.values()) <= 0.75 * len(res), "one daemon took %r" % seen)
    # One at a time: the id's daemon, every one. The bounded load counts a
    # request until HAProxy has released its stream, a moment after the
    # client read the end (CI 12-04: 1 of 28 moved; CI 12-05: a session's
    # second turn moved), so each request waits for that release first.
    lb.wait_idle()
    one = {}
    for _ in range(20):
        r = C.complete(lb.port, body(16), hdr)
        check(r.ok, "serial request failed: %r" % r)
        one[r.backend] = one.get(r.backend, 0) + 1
        lb.wait_idle()
    print("  one at a time: %r" % one)
    check(len(one) == 1, "serial requests of one id: %r" % one)


def test_agent(lb, backends):
    """Eleven long streams straight to inferd1 (max_seqs 8: three wait): its
    agent reports about a quarter of its weight and HAProxy takes it; the
    others stay at 100; hung up, inferd1 returns to 100."""
    b = backends[0]
    t0 = time.time()  # slowstart (10 s) may still ramp a daemon that just came up
    while time.time() - t0 < 15:
        w0 = lb.servers(field="weight")
        if all(int(w) == 100 for w in w0.values()):
            break
        time.sleep(0.2)
    check(all(int(w) == 100 for w in w0.values()), "weights at rest %r" % w0)
    socks = [hold_stream(b.port, body(1800))]
    try:
        for _ in range(10):
            socks.append(hold_stream(b.port, body(1800), first=False))
        t0 = time.time()
        while time.time() - t0 < 15:
            w = lb.servers(field="weight")
            if int(w[b.name]) <= 40:
                break
            time.sleep(0.2)
        print("  agent: busy %s weights %r after %.1f s" % (b.name, w, time.time() - t0))
        check(int(w[b.name]) <= 40, "HAProxy weight of the busy daemon %r" % w)
        check(all(int(v) >= 90 for k, v in w.items() if k != b.name), "the others %r" % w)
    finally:
        for s in socks:
            s.close()
    t0 = time.time()
    while time.time() - t0 < 15:
        w = lb.servers(field="weight")
        if int(w[b.name]) == 100:
            break
        time.sleep(0.2)
    check(int(w[b.name]) == 100, "weight after the streams ended %r" % w)


def test_session(lb, backends):
    by_name = {b.name: b for b in backends}
    # ~70 tokens of prompt: four full 16-token KV blocks to reuse
    turn1 = ("The quick brown fox jumps over the lazy dog while the server counts every "
             "token of the conversation so far, remembering each word it has read. ") * 2
    used = set()
    sessions = ["alice", "bob", "carol", "dave", "erin", "frank"]
    for i, sid in enumerate(sessions):
        via_user = i % 2 == 1  # every other one by the body's "user" field alone
        hdr = {} if via_user else {"X-Session-Id": sid}
        extra = {"user": sid} if via_user else {}
        p1 = "[%s] %s" % (sid, turn1)
        r1 = C.complete(lb.port, body(8, p1, **extra), hdr)
        check(r1.ok, "turn 1 of %s: %r" % (sid, r1))
        h0 = {b.name: b.metrics().get("inferd_prefix_cache_hits_total", 0) for b in backends}
        lb.wait_idle()  # turn 1 released by HAProxy (see HAProxy.wait_idle)
        r2 = C.complete(lb.port, body(8, p1 + " And then the second turn began.", **extra), hdr)
        check(r2.ok, "turn 2 of %s: %r" % (sid, r2))
        check(r1.backend == r2.backend, "session %s moved: %s then %s" % (sid, r1.backend,
                                                                          r2.backend))
        hits = by_name[r2.backend].metrics().get("inferd_prefix_cache_hits_total", 0)
        check(hits > h0[r2.backend], "session %s: no prefix-cache hit on %s (%r -> %r)" %
              (sid, r2.backend, h0[r2.backend], hits))
        for _ in range(3 if LONG else 1):  # later turns: still the same backend
            lb.wait_idle()
            r3 = C.complete(lb.port, body(4, p1 + " A third turn.", **extra), hdr)
            check(r3.ok and r3.backend == r1.backend, "session %s later: %r" % (sid, r3))
        used.add(r1.backend)
        print("  session %-5s (%s) -> %s, prefix-cache hits %d -> %d"
              % (sid, "user" if via_user else "header", r1.backend, h0[r2.backend], hits))
    check(len(used) >= 2, "six sessions all on %r" % used)
    # a chat conversation keyed by its "user" field: the second turn resends
    # the first (what chat clients do) and hits the prefix cache
    chat = "/v1/chat/completions"
    m1 = [{"role": "user", "content": turn1}]
    c1 = C.complete(lb.port, {"model": MODEL, "messages": m1, "max_tokens": 8, "user": "grace"},
                    path=chat)
    check(c1.ok, "chat turn 1: %r" % c1)
    h0 = by_name[c1.backend].metrics().get("inferd_prefix_cache_hits_total", 0)
    m2 = m1 + [{"role": "assistant", "content": "Yes."}, {"role": "user", "content": "More."}]
    lb.wait_idle()
    c2 = C.complete(lb.port, {"model": MODEL, "messages": m2, "max_tokens": 8, "user": "grace"},
                    path=chat)
    check(c2.ok and c2.backend == c1.backend, "chat turn 2: %r (turn 1 on %s)" %
          (c2, c1.backend))
    hits = by_name[c2.backend].metrics().get("inferd_prefix_cache_hits_total", 0)
    check(hits > h0, "chat session: no prefix-cache hit on %s" % c2.backend)
    print("  session grace (chat, user) -> %s, prefix-cache hits %d -> %d"
          % (c1.backend, h0, hits))


def test_sigterm(lb, backends, victim):
    # long streams to drain, and short requests that keep arriving while
    # HAProxy has not yet seen the 503s of /health
    retried0 = lb.retried()
    load = C.Load(lb.port, 8, [body(400), body(400), body(16), body(16, stream=False)])
    # and one stream of 4 x 2000 tokens sent to the victim directly: it keeps
    # the drain going (whatever the machine's speed) until HAProxy has taken
    # the victim out; then the test hangs up and the daemon cancels it
    held = hold_stream(victim.port, body(2000, n=4))
    wait_active(victim, 2)
    log0 = len(victim.log())
    t_term = time.time()
    victim.signal(signal.SIGTERM)
    # while its streams finish: a new connection to it gets /health 503, a
    # new completion 503 + Retry-After (what HAProxy retries elsewhere)
    time.sleep(0.1)
    st, hb = victim.health()
    check(st == 503 and b"stopping" in hb, "/health while draining: %d %r" % (st, hb))
    st, hd, b = victim.d.post("/v1/completions", body(4, stream=False))
    check(st == 503 and b"shutting_down" in b and hd.get("retry-after"),
          "a completion while draining: %d %r %r" % (st, hd, b[:200]))
    down_s = lb.wait_status(victim.name, lambda s: s.startswith("DOWN"), 15)
    still_draining = victim.proc.poll() is None
    held.close()
    time.sleep(2 if LONG else 1)
    res = load.stop()
    rc = victim.wait(60)
    bad = [r for r in res if not r.ok]
    drained = [r for r in res if r.backend == victim.name and r.t0 < t_term < r.t1]
    late = [r for r in res if r.backend == victim.name and r.t0 > t_term + down_s + 0.5]
    print("  sigterm %s: %d requests, %d failed, %d retried by HAProxy; %d streams on it "
          "drained; HAProxy took it out after %.1f s; exit %d"
          % (victim.name, len(res), len(bad), lb.retried() - retried0, len(drained), down_s, rc))
    check(not bad, "failed requests: %r" % bad[:3])
    check(still_draining, "%s was gone before HAProxy took it out" % victim.name)
    check(drained, "no stream on %s spanned the SIGTERM" % victim.name)
    check(all(r.tokens == r.want and r.finish == "length" for r in drained),
          "a drained stream was cut short: %r" % drained)
    check(not late, "%s got work after HAProxy marked it down: %r" % (victim.name, late[:2]))
    check(rc == 0, "drained daemon exit status %d" % rc)
    # HAProxy's checks saw /health 503 while it drained (one of the 503s in
    # its log is the test's own; the check that marks it DOWN may instead
    # find it gone when the drain was quick)
    checks_503 = victim.log()[log0:].count("path=/health status=503") - 1
    print("    HAProxy health checks answered 503 while draining: %d" % checks_503)
    check(checks_503 >= 1, "HAProxy's checks never saw /health 503 from %s" % victim.name)


def test_sigkill(lb, backends, victim):
    retried0 = lb.retried()
    load = C.Load(lb.port, 8, [body(400), body(400), body(16), body(16, stream=False)])
    wait_active(victim, 1)
    time.sleep(0.2)
    t_kill = time.time()
    victim.signal(signal.SIGKILL)
    victim.wait(10)
    down_s = lb.wait_status(victim.name, lambda s: s.startswith("DOWN"), 15)
    time.sleep(3 if LONG else 1.5)
    res = load.stop()
    bad = [r for r in res if not r.ok]
    after = [r for r in res if r.t0 > t_kill + 0.05]
    print("  sigkill %s: %d requests, %d failed (all were on it), %d started after the "
          "kill all fine, %d retried by HAProxy; HAProxy took it out after %.1f s"
          % (victim.name, len(res), len(bad), len(after), lb.retried() - retried0, down_s))
    for r in bad:
        check(r.t0 < t_kill + 0.05, "a request started after the kill failed: %r" % r)
        check(r.backend in (victim.name, None), "a request on another backend failed: %r" % r)
    check(bad, "nothing failed: the kill did not hit a request in flight")
    check(len(after) >= 8, "only %d requests after the kill" % len(after))
    # restart: HAProxy puts it back once /health is 200, and it gets work
    up_line = ("Server inferd_leastconn/%s is UP, reason: Layer7 check passed, code: 200"
               % victim.name)
    ups0 = lb.log().count(up_line)
    victim.start(wait=False)
    t_restart = time.time()
    victim.wait_ready()
    ready_s = time.time() - t_restart
    lb.wait_status(victim.name, lambda s: s.startswith("UP"), 20)
    up_s = time.time() - t_restart
    check(lb.log().count(up_line) > ups0, "HAProxy log: %s not put back by /health 200"
          % victim.name)
    load = C.Load(lb.port, 6, body(32))
    got = 0
    t0 = time.time()
    while time.time() - t0 < 20 and got == 0:
        time.sleep(0.5)
        got = victim.metrics().get('inferd_completion_requests_total{status="200"}', 0)
    res = load.stop()
    print("  restart %s: /health 200 after %.1f s, HAProxy UP after %.1f s; then it "
          "served %d of %d requests" % (victim.name, ready_s, up_s, got, len(res)))
    check(got > 0, "%s never got work after it came back" % victim.name)
    check(all(r.ok for r in res), "failures after the restart: %r" % [r for r in res if
                                                                        not r.ok][:3])


def cpu_seconds(pid):
    """User + system CPU time of a process so far (/proc/PID/stat)."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def throughput(lb, backends, seconds, workers):
    """(tokens/s, requests, CPU cores the daemons used, cores HAProxy and
    the clients used) of `workers` streaming clients for `seconds`."""
    pids = [b.proc.pid for b in backends]
    c0 = [cpu_seconds(p) for p in pids]
    h0, t0 = cpu_seconds(lb.proc.pid), os.times()
    load = C.Load(lb.port, workers, body(128))
    time.sleep(seconds)
    res = load.stop()
    bad = [r for r in res if not r.ok]
    check(not bad, "failed requests: %r" % bad[:3])
    # every token of every request over the time from the first start to
    # the last end (stop() lets the requests in flight finish)
    toks = sum(r.tokens for r in res)
    wall = max(r.t1 for r in res) - load.t_start
    daemons = sum(cpu_seconds(p) for p in pids) - sum(c0)
    t1 = os.times()
    others = cpu_seconds(lb.proc.pid) - h0 + (t1.user - t0.user) + (t1.system - t0.system)
    return toks / wall, len(res), daemons / wall, others / wall


def test_throughput(lb, backends):
    secs = 20 if LONG else 5
    workers = 12 if LONG else 9
    runs = []

    def one(n):
        if n == 1:
            for b in backends[1:]:
                lb.admin("set server inferd_leastconn/%s state maint" % b.name)
        try:
            check(list(lb.servers().values()).count("UP") == n, lb.servers())
            runs.append((n,) + throughput(lb, backends, secs, workers) + (os.getloadavg()[0],))
        finally:
            if n == 1:
                for b in backends[1:]:
                    lb.admin("set server inferd_leastconn/%s state ready" % b.name)
                for b in backends[1:]:
                    lb.wait_status(b.name, lambda s: s.startswith("UP"), 20)

    # three first (no slowstart ramp in it), then one; the long version
    # repeats both after the ramp (slowstart 10 s) so drift shows
    one(3)
    one(1)
    if LONG:
        time.sleep(11)
        one(3)
        one(1)
    print("  throughput through HAProxy, %d streaming clients, 128 tokens each, %d s runs, "
          "%d cores here:" % (workers, secs, os.cpu_count()))
    for n, tps, nreq, cd, co, la in runs:
        print("    %d backend%s: %7.0f tokens/s (%4d requests; daemons used %.2f cores = "
              "%.0f tokens per CPU-second; haproxy + clients %.2f cores; load average %.1f)"
              % (n, "s" if n > 1 else " ", tps, nreq, cd, tps / cd if cd else 0, co, la))
    t1 = sum(r[1] for r in runs if r[0] == 1) / sum(1 for r in runs if r[0] == 1)
    t3 = sum(r[1] for r in runs if r[0] == 3) / sum(1 for r in runs if r[0] == 3)
    print("    3 backends / 1 backend = %.2fx" % (t3 / t1))


def main():
    if len(sys.argv) < 2 or not os.path.exists(sys.argv[1]):
        print("skip: no inferd binary given")
        sys.exit(C.SKIP)
    exe = sys.argv[1]
    model = C.D.model_path(MODEL_FILE)
    ports = C.free_ports(6)
    ports, agent_ports = ports[:3], ports[3:]
    backends = [C.Backend(exe, model, p, "inferd%d" % (i + 1),
                          DAEMON_ARGS + ["--agent-port", str(agent_ports[i])])
                for i, p in enumerate(ports)]
    lb = None
    fails = 0
    try:
        for b in backends:
            b.start(wait=False)
        for b in backends:
            b.wait_ready()
        lb = C.HAProxy(ports, agent_ports)
        for b in backends:
            lb.wait_status(b.name, lambda s: s.startswith("UP"), 20)
        rounds = 2 if LONG else 1
        tests = [("spread", lambda: test_spread(lb, backends)),
                 ("session", lambda: test_session(lb, backends)),
                 ("hot-session", lambda: test_hot_session(lb, backends)),
                 ("agent", lambda: test_agent(lb, backends))]
        for k in range(rounds):
            v = backends[k % 3]
            tests.append(("sigterm", lambda v=v: test_sigterm(lb, backends, v)))
            tests.append(("restart", lambda v=v: (v.start(), lb.wait_status(
                v.name, lambda s: s.startswith("UP"), 20))))
            tests.append(("sigkill", lambda k=k: test_sigkill(lb, backends,
                                                              backends[(k + 1) % 3])))
        tests.append(("throughput", lambda: test_throughput(lb, backends)))
        for name, fn in tests:
            t0 = time.time()
            try:
                fn()
                print("ok   %-12s %.2fs" % (name, time.time() - t0))
            except Exception as ex:
                import traceback
                traceback.print_exc()
                print("FAIL %-12s %s" % (name, ex))
                fails += 1
                break  # the cluster's state is unknown now: later tests would mislead
            sys.stdout.flush()
    finally:
        if fails and lb:
            print("---- haproxy log (tail)\n" + lb.log()[-4000:])
            for b in backends:
                print("---- %s log (tail)\n%s" % (b.name, b.log()[-2000:]))
        if lb:
            lb.close()
        for b in backends:
            b.close()
    print("FAIL" if fails else "ok")
    sys.exit(1 if fails else 0)


if __name__ == "__main__":
    main()
