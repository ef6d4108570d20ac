#!/usr/bin/env python3
"""test_lifecycle -- the daemon as a process: signals, sd_notify, config, limits.

SIGTERM during a stream (drained, exit 0), SIGTERM past the drain timeout
(canceled cleanly, exit 0), client disconnects free their sequences (KV blocks
back in /metrics), sd_notify over a fake NOTIFY_SOCKET (path and abstract),
a stuck engine stopping the WATCHDOG=1 pings (test-only fault hook),
SIGHUP with good and bad configs, the shipped etc/inferd.conf, queue full (429
+ Retry-After), connection caps, bad flags and a bad model file.
usage: test_lifecycle.py <inferd binary>
"""
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

sys.dont_write_bytecode = True  # keep the source tree clean
import daemon as D  # noqa: E402
from daemon import check

MODEL = "stories260K"


def start_stream(d, **kw):
    req = {"model": MODEL, "prompt": "Once upon a time", "max_tokens": 480, "temperature": 0,
           "stream": True, "ignore_eos": True}
    req.update(kw)
    s = D.post_stream(d, req, 30)
    return s, D.first_event(s)


def read_all(s, buf=b""):
    s.settimeout(30)
    return D.read_to_close(s, buf)


def wait_metric(d, pred, timeout=5.0):
    t0 = time.time()
    while time.time() - t0 < timeout:
        m = d.metrics()
        if pred(m):
            return m
        time.sleep(0.02)
    return d.metrics()


def test_sigterm_mid_stream_drains(exe):
    d = D.Daemon(exe, args=["--n-ctx", "512"])
    try:
        s, buf = start_stream(d, max_tokens=300)
        d.signal(signal.SIGTERM)
        time.sleep(0.2)
        refused = False
        try:
            c = socket.create_connection(("127.0.0.1", d.port), timeout=2)
            c.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
            r = c.recv(1000)
            refused = r == b"" or b" 503 " in r.split(b"\r\n")[0]
            c.close()
        except OSError:
            refused = True
        check(refused, "new connections still accepted while draining")
        body = read_all(s, buf)
        s.close()
        text = D.dechunk(body.split(b"\r\n\r\n", 1)[1]) if b"chunked" in body.split(b"\r\n\r\n")[0].lower() else body
        ev = D.sse_events(text)
        check(ev[-1] == "[DONE]", ev[-2:])
        n = 0
        for e in ev[:-1]:
            c = json.loads(e)
            check("error" not in c, "drained stream got an error: %r" % c)
            n += 1
        check(json.loads(ev[-2])["choices"][0]["finish_reason"] == "length", ev[-2])
        rc = d.proc.wait(30)
        check(rc == 0, "exit status %d" % rc)
        check("STOPPING" not in d.log() or True, "")
    finally:
        d.close()


def test_sigterm_drain_timeout_cancels(exe):
    d = D.Daemon(exe, args=["--n-ctx", "512", "--drain-timeout-s", "0"])
    try:
        s, buf = start_stream(d, n=8)
        d.signal(signal.SIGTERM)
        body = read_all(s, buf)
        s.close()
        head, rest = body.split(b"\r\n\r\n", 1)
        ev = D.sse_events(D.dechunk(rest) if b"chunked" in head.lower() else rest)
        check(ev[-1] == "[DONE]", ev[-2:])
        last = json.loads(ev[-2])
        check("error" in last or all(c["finish_reason"] for c in last["choices"]), last)
        rc = d.proc.wait(30)
        check(rc == 0, "exit status %d" % rc)
    finally:
        d.close()


def test_disconnect_frees_sequence(exe):
    d = D.Daemon(exe, args=["--n-ctx", "512"])
    try:
        m0 = d.metrics()
        total = m0["inferd_kv_blocks_capacity"]
        gen0 = m0["inferd_engine_generated_tokens_total"]
        # streamed: close after the first event
        s, _ = start_stream(d)
        s.close()
        m = wait_metric(d, lambda m: m["inferd_running_sequences"] == 0 and m["inferd_kv_blocks_used"] == 0)
        check(m["inferd_kv_blocks_used"] == 0 and m["inferd_kv_blocks_free"] == total,
              "KV blocks not freed: %r" % {k: v for k, v in m.items() if "kv" in k})
        gen1 = m["inferd_engine_generated_tokens_total"]
        check(gen1 - gen0 < 480, "the engine kept generating for a gone client (%d tokens)" % (gen1 - gen0))
        check(m["inferd_client_disconnects_total"] >= 1, m["inferd_client_disconnects_total"])
        # not streamed: the client leaves while its request is suspended
        body = json.dumps({"model": MODEL, "prompt": "Once upon a time", "max_tokens": 480,
                           "temperature": 0, "ignore_eos": True, "n": 4}).encode()
        s = socket.create_connection(("127.0.0.1", d.port), timeout=30)
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
        wait_metric(d, lambda m: m["inferd_running_sequences"] >= 1, 5)
        s.close()
        m = wait_metric(d, lambda m: m["inferd_running_sequences"] == 0 and m["inferd_kv_blocks_used"] == 0)
        check(m["inferd_kv_blocks_used"] == 0, "KV blocks not freed (non-stream)")
        gen2 = m["inferd_engine_generated_tokens_total"]
        check(gen2 - gen1 < 4 * 480, "non-stream request ran to the end for a gone client")
        check(m["inferd_client_disconnects_total"] >= 2, m["inferd_client_disconnects_total"])
        st, j = d.json("POST", "/v1/completions", {"model": MODEL, "prompt": "Hi", "max_tokens": 3})
        check(st == 200, j)
        check(d.stop() == 0, "exit status")
    finally:
        d.close()


def recv_all(sock, until, timeout):
    msgs = []
    t0 = time.time()
    sock.settimeout(0.2)
    while time.time() - t0 < timeout:
        try:
            m = sock.recv(4096).decode()
            msgs.append(m)
            if until(msgs):
                break
        except socket.timeout:
            pass
    return msgs


def test_sd_notify(exe):
    for abstract in (False, True):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        tmpdir = tempfile.mkdtemp(prefix="inferd-notify-")
        if abstract:
            name = "@inferd-test-%d-%d" % (os.getpid(), time.time_ns() % 1000000)
            sock.bind("\0" + name[1:])
        else:
            name = os.path.join(tmpdir, "notify.sock")
            sock.bind(name)
        env = {"NOTIFY_SOCKET": name, "WATCHDOG_USEC": "1000000"}
        d = D.Daemon(exe, env=env, wait=False)
        try:
            msgs = recv_all(sock, lambda ms: any("READY=1" in m for m in ms), 30)
            flat = "\n".join(msgs)
            check("READY=1" in flat, "no READY=1: %r" % msgs)
            check("STATUS=loading" in flat, "no STATUS=loading before READY: %r" % msgs)
            check("EXTEND_TIMEOUT_USEC=" in flat, "no EXTEND_TIMEOUT_USEC: %r" % msgs)
            st, _, _ = d.request("GET", "/health")
            check(st == 200, "READY=1 sent before /health is 200")
            # WATCHDOG=1 from the engine loop, every WATCHDOG_USEC/2 at most
            more = recv_all(sock, lambda ms: sum("WATCHDOG=1" in m for m in ms) >= 2, 5)
            check(sum("WATCHDOG=1" in m for m in more) >= 2, "no WATCHDOG=1: %r" % more)
            d.signal(signal.SIGTERM)
            more = recv_all(sock, lambda ms: any("STOPPING=1" in m for m in ms), 10)
            check(any("STOPPING=1" in m for m in more), "no STOPPING=1: %r" % more)
            check(d.proc.wait(30) == 0, "exit status")
        finally:
            d.close()
            sock.close()
            if not abstract:
                os.unlink(name)
            os.rmdir(tmpdir)


def test_engine_stuck_stops_watchdog(exe):
    """ROBUSTNESS 36. WATCHDOG=1 is sent from the engine loop: a stuck engine
    (the test-only hook INFERD_FAULT_ENGINE_STALL, engine/fault.h, blocks the
    loop while a file exists) must stop the pings, so that systemd kills and
    restarts the daemon, while the loop thread keeps answering and /health
    says 503 "stalled" after engine_stall_s. Healthy, idle or busy, the pings
    keep coming more often than WATCHDOG_USEC; after the stall they resume
    and the request that waited completes."""
    wd_s = 1.0
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    tmpdir = tempfile.mkdtemp(prefix="inferd-stall-")
    name = os.path.join(tmpdir, "notify.sock")
    stall = os.path.join(tmpdir, "stall")
    sock.bind(name)
    env = {"NOTIFY_SOCKET": name, "WATCHDOG_USEC": str(int(wd_s * 1e6)),
           "INFERD_FAULT_ENGINE_STALL": stall}
    d = D.Daemon(exe, env=env, args=["--engine-stall-s", "2"], wait=False)
    pings = []  # arrival times of WATCHDOG=1

    def collect(seconds, until=None):
        msgs = []
        t_end = time.monotonic() + seconds
        sock.settimeout(0.05)
        while time.monotonic() < t_end:
            try:
                m = sock.recv(4096).decode()
            except socket.timeout:
                continue
            msgs.append(m)
            if "WATCHDOG=1" in m:
                pings.append(time.monotonic())
            if until and until(msgs):
                break
        return msgs

    def longest_silence(t0, t1):
        ts = [t0] + [t for t in pings if t0 <= t <= t1] + [t1]
        return max(b - a for a, b in zip(ts, ts[1:]))

    try:
        msgs = collect(30, lambda ms: any("READY=1" in m for m in ms))
        check(any("READY=1" in m for m in msgs), "no READY=1: %r" % msgs)
        if "fault hook:" not in d.log():
            print("skip: this build has no fault hooks (meson -Dfault_hooks)")
            return
        # healthy: idle, then busy
        t0 = time.monotonic()
        collect(2.0)
        busy = threading.Thread(target=lambda: [d.post("/v1/completions", {
            "model": MODEL, "prompt": "Once upon a time", "max_tokens": 200}) for _ in range(6)])
        busy.start()
        collect(2.0)
        busy.join()
        t1 = time.monotonic()
        quiet = longest_silence(t0, t1)
        check(quiet < wd_s, "pings %.2f s apart while healthy (WATCHDOG_USEC %.1f s)" % (quiet, wd_s))
        st, _, _ = d.request("GET", "/health")
        check(st == 200, "/health %d before the stall" % st)

        # stuck: the engine blocks at its next iteration
        open(stall, "w").close()
        waiting = []
        req = threading.Thread(target=lambda: waiting.append(d.post("/v1/completions", {
            "model": MODEL, "prompt": "Once upon a time", "max_tokens": 8}, timeout=60)))
        req.start()
        t_lim = time.monotonic() + 10
        while "engine loop stalled" not in d.log() and time.monotonic() < t_lim:
            collect(0.05)
        check("engine loop stalled" in d.log(), "the stall hook did not fire:\n" + d.log())
        t_stall = time.monotonic()
        collect(3.0)
        t_h = time.monotonic()
        st, _, body = d.request("GET", "/health", timeout=5)
        dt = time.monotonic() - t_h
        check(st == 503 and b"stalled" in body, "/health while stuck: %d %r" % (st, body))
        check(dt < 1.0, "/health took %.2f s while the engine was stuck" % dt)
        check(not waiting, "a completion finished while the engine was stuck")
        late = [t for t in pings if t > t_stall + 0.1]
        check(not late, "%d WATCHDOG=1 while the engine was stuck" % len(late))
        silent = time.monotonic() - max([t for t in pings if t <= t_stall + 0.1] or [t_stall])
        check(silent > 3 * wd_s, "only %.2f s without pings" % silent)
        check("engine loop has not run for" in d.log(), "no log line for the stall")

        # running again: pings, /health 200, the waiting request served
        os.unlink(stall)
        t_run = time.monotonic()
        collect(2.5)
        back = [t for t in pings if t > t_run]
        check(back and back[0] - t_run < wd_s, "pings did not resume: %r" % back)
        req.join(30)
        check(waiting and waiting[0][0] == 200, "the waiting completion: %r" % waiting)
        st, _, _ = d.request("GET", "/health")
        check(st == 200, "/health %d after the stall" % st)
        print("healthy: longest ping gap %.2f s; stuck: %.2f s without a ping (WATCHDOG_USEC %.1f s); "
              "first ping %.2f s after the resume" % (quiet, silent, wd_s, back[0] - t_run))
        d.signal(signal.SIGTERM)
        check(d.proc.wait(30) == 0, "exit status")
    finally:
        if os.path.exists(stall):
            os.unlink(stall)
        d.close()
        sock.close()
        os.unlink(name)
        os.rmdir(tmpdir)


def test_sighup_reload(exe):
    fd, conf = tempfile.mkstemp(prefix="inferd-", suffix=".conf")
    os.close(fd)

    def write(text):
        with open(conf + ".tmp", "w") as f:
            f.write(text)
        os.replace(conf + ".tmp", conf)

    write("# test config\nlog_level = debug\nmax_tokens = 100\n")
    d = D.Daemon(exe, config=conf)
    try:
        req = {"model": MODEL, "prompt": "Hi", "max_tokens": 50}
        st, j = d.json("POST", "/v1/completions", req)
        check(st == 200, j)
        # good reload: an API key and a lower cap
        write("log_level = debug\nmax_tokens = 20\napi_key = k1\n")
        d.signal(signal.SIGHUP)
        auth = {"Authorization": "Bearer k1"}
        t0 = time.time()
        while time.time() - t0 < 5 and d.request("GET", "/v1/models")[0] != 401:
            time.sleep(0.05)
        D.expect_error(d.request("GET", "/v1/models"), 401)
        D.expect_error(d.post("/v1/completions", req, headers=auth), 400, "max_tokens")
        # bad reload: syntax error and a new key; the old config stays
        write("log_level = debug\nmax_tokens = abc\napi_key = k2\n")
        d.signal(signal.SIGHUP)
        t0 = time.time()
        while time.time() - t0 < 5 and "keeping the current configuration" not in d.log():
            time.sleep(0.05)
        check("keeping the current configuration" in d.log(), d.log()[-2000:])
        check("max_tokens" in d.log().split("keeping the current configuration")[0][-300:], "reason not logged")
        st, j = d.json("GET", "/v1/models", headers=auth)
        check(st == 200, "old key lost after a bad reload: %r" % j)
        D.expect_error(d.request("GET", "/v1/models", headers={"Authorization": "Bearer k2"}), 401)
        # unknown key: also rejected as a whole
        write("log_level = debug\nmax_tokens = 30\napi_key = k3\nno_such_key = 1\n")
        d.signal(signal.SIGHUP)
        time.sleep(0.5)
        st, j = d.json("GET", "/v1/models", headers=auth)
        check(st == 200, j)
        # a key that needs a restart is reported, the rest applies
        write("log_level = debug\nmax_tokens = 30\napi_key = k1\nmax_seqs = 3\n")
        d.signal(signal.SIGHUP)
        t0 = time.time()
        while time.time() - t0 < 5 and "need a restart" not in d.log():
            time.sleep(0.05)
        check("max_seqs" in d.log().split("need a restart")[-1][:200], d.log()[-1000:])
        st, j = d.json("POST", "/v1/completions", dict(req, max_tokens=25), headers=auth)
        check(st == 200, j)
        check(d.stop() == 0, "exit status")
    finally:
        d.close()
        os.unlink(conf)


def test_shipped_config(exe):
    src = os.environ.get("INFERD_SRC", os.path.join(os.path.dirname(__file__), "..", ".."))
    conf = os.path.join(src, "etc", "inferd.conf")
    check(os.path.exists(conf), conf)
    d = D.Daemon(exe, config=conf)  # --model/--port/--host on the command line override it
    try:
        st, j = d.json("GET", "/v1/models")
        check(st == 200 and j["data"][0]["id"] == MODEL, j)
    finally:
        d.close()
    # every key of `inferd serve --help` is documented in the file, with its default
    out = subprocess.run([exe, "serve", "--help"], capture_output=True, text=True, timeout=10)
    check(out.returncode == 0, out.stderr)
    text = open(conf).read()
    for line in out.stdout.splitlines():
        parts = line.split()
        if len(parts) >= 2 and line.startswith("  ") and "(default:" in line:
            key = parts[0]
            default = line.rsplit("(default: ", 1)[1].rstrip(")").strip('"')
            check(("\n%s = " % key) in text or ("\n# %s = " % key) in text, "key %s not in inferd.conf" % key)
            if key != "model":
                val = text.split("\n%s = " % key, 1)[1].split("\n", 1)[0].strip().strip('"')
                check(val == default, "inferd.conf %s = %r, default %r" % (key, val, default))


def test_usage_and_bad_model(exe):
    r = subprocess.run([exe, "serve", "--model", "x", "--no-such-flag", "1"], capture_output=True, timeout=10)
    check(r.returncode == 2, "unknown flag: exit %d" % r.returncode)
    # usage errors exit 2 (tools/cmds.h), as in the other subcommands
    r = subprocess.run([exe, "serve", "--port", "1"], capture_output=True, timeout=10)
    check(r.returncode == 2 and b"model" in r.stderr, "no model: exit %d" % r.returncode)
    r = subprocess.run([exe, "serve", "--model", "x", "--port", "70000"], capture_output=True, timeout=10)
    check(r.returncode == 2 and b"port" in r.stderr, "bad port: exit %d" % r.returncode)
    r = subprocess.run([exe, "serve", "--model", "x", "--max-tokens", "abc"], capture_output=True,
                       timeout=10)
    check(r.returncode == 2 and b"max_tokens" in r.stderr, "bad value: exit %d" % r.returncode)
    # attention_scores: exact or tensor (daemon/backend_open.c: attention_scores_parse)
    r = subprocess.run([exe, "serve", "--model", "x", "--attention-scores", "fast"], capture_output=True,
                       timeout=10)
    check(r.returncode == 2 and b"attention_scores" in r.stderr, "bad attention_scores: exit %d" % r.returncode)
    r = subprocess.run([exe, "bench", "--model", "x", "--attention-scores", "fast"], capture_output=True,
                       timeout=10)
    check(r.returncode == 2 and b"--attention-scores must be exact or tensor" in r.stderr,
          "bench --attention-scores: exit %d %r" % (r.returncode, r.stderr))
    # a bad config file is a runtime failure: exit 1, naming file and line
    with tempfile.NamedTemporaryFile("w", suffix=".conf", delete=False) as f:
        f.write("model = x\nport = banana\n")
    try:
        r = subprocess.run([exe, "serve", "--config", f.name], capture_output=True, timeout=10)
        check(r.returncode == 1 and (f.name + ":2").encode() in r.stderr,
              "bad config file: exit %d %r" % (r.returncode, r.stderr))
    finally:
        os.unlink(f.name)
    d = D.Daemon(exe, model="/nonexistent/model.gguf", wait=False)
    try:
        rc = d.proc.wait(30)
        check(rc == 1, "bad model: exit %d" % rc)
        check("/nonexistent/model.gguf" in d.log(), d.log())
    finally:
        d.close()


def test_queue_full_429(exe):
    d = D.Daemon(exe, args=["--n-ctx", "512", "--max-seqs", "1", "--queue-len", "1", "--retry-after-s", "2"])
    try:
        streams = [start_stream(d, max_tokens=400)]
        # the second waits in the queue; the third finds it full
        body = json.dumps({"model": MODEL, "prompt": "Hi", "max_tokens": 400, "ignore_eos": True}).encode()
        q = socket.create_connection(("127.0.0.1", d.port), timeout=30)
        q.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
        wait_metric(d, lambda m: m["inferd_waiting_requests"] >= 1, 5)
        r = d.post("/v1/completions", {"model": MODEL, "prompt": "Hi", "max_tokens": 5})
        D.expect_error(r, 429)
        check(r[1].get("retry-after") == "2", r[1])
        # nothing admitted is dropped: the queued one completes
        st, hd, b = D.parse_response(D.read_response_bytes(q))
        q.close()
        check(st == 200 and json.loads(b)["usage"]["completion_tokens"] == 400, (st, b[:200]))
        for s, buf in streams:
            check(b"data: [DONE]" in read_all(s, buf), "admitted stream dropped")
            s.close()
        st, j = d.json("POST", "/v1/completions", {"model": MODEL, "prompt": "Hi", "max_tokens": 3})
        check(st == 200, j)
    finally:
        d.close()


def test_connection_caps(exe):
    d = D.Daemon(exe, args=["--max-connections-per-ip", "4", "--max-connections", "8"])
    try:
        held = [socket.create_connection(("127.0.0.1", d.port), timeout=5) for _ in range(4)]
        time.sleep(0.3)
        extra = socket.create_connection(("127.0.0.1", d.port), timeout=5)
        t0 = time.time()
        try:
            extra.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
            got = extra.recv(100)
        except OSError:
            got = b""
        check(got == b"", "5th connection from one address served: %r" % got)
        check(time.time() - t0 < 2, "refusal was slow")
        extra.close()
        m = None
        for s in held:
            s.close()
        time.sleep(0.3)
        st, _, _ = d.request("GET", "/health")
        check(st == 200, st)
        m = d.metrics()
        check(m["inferd_refused_connections_total"] >= 1, m["inferd_refused_connections_total"])
    finally:
        d.close()


def test_ping_idle_stream(exe):
    """A stream waiting in the queue gets ': ping' comments (interval 1 s here).
    The slowest test model (152k vocabulary) and a rate measured over enough
    tokens that request overhead does not hide the engine's speed: an
    underestimated rate ends the blocking request before the first ping."""
    model = D.model_path("tiny-qwen2-Q4_K_M.gguf")
    d = D.Daemon(exe, model=model, args=["--n-ctx", "2048", "--max-seqs", "1", "--ping-interval-s", "1"])
    try:
        mid = "tiny-qwen2-Q4_K_M"
        t0 = time.time()
        st, j = d.json("POST", "/v1/completions", {"model": mid, "prompt": "Hi", "max_tokens": 128,
                                                   "ignore_eos": True})
        check(st == 200, j)
        rate = 128 / max(time.time() - t0, 1e-3)
        n = int(min(2000, rate * 6))
        if n / rate < 3:
            print("skip-part: engine too fast (%.0f tok/s) to keep a stream idle" % rate)
            return
        body = json.dumps({"model": mid, "prompt": "Hi", "max_tokens": n, "ignore_eos": True}).encode()
        q = socket.create_connection(("127.0.0.1", d.port), timeout=60)
        q.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                  b"Content-Length: %d\r\n\r\n" % len(body) + body)
        wait_metric(d, lambda m: m["inferd_running_sequences"] >= 1, 5)
        s, buf = start_stream(d, model=mid, prompt="Hi", max_tokens=2)
        check(b": ping\n\n" in buf.split(b"data: {")[0], "no ping before the first event: %r" % buf[:300])
        check(b"data: [DONE]" in read_all(s, buf), "stream did not finish")
        s.close()
        read_all(q)
        q.close()
    finally:
        d.close()


def test_loading_503(exe):
    """While the model loads: /health 503 "loading", completions 503 + Retry-After.
    The model is a FIFO, so the load blocks until the test opens it."""
    tmpdir = tempfile.mkdtemp(prefix="inferd-fifo-")
    fifo = os.path.join(tmpdir, "model.gguf")
    os.mkfifo(fifo)
    d = D.Daemon(exe, model=fifo, wait=False)
    try:
        t0 = time.time()
        while True:
            try:
                r = d.request("GET", "/health", timeout=2)
                break
            except OSError:
                check(time.time() - t0 < 20, "daemon never listened")
                time.sleep(0.05)
        st, hd, b = r
        check(st == 503 and json.loads(b) == {"status": "loading"}, (st, b))
        r = d.post("/v1/completions", {"model": "model", "prompt": "x"})
        D.expect_error(r, 503)
        check("retry-after" in r[1], r[1])
        st, j = d.json("GET", "/v1/models")
        check(st == 200, j)
        m = d.metrics()
        check(m["inferd_ready"] == 0, m["inferd_ready"])
        # SIGTERM while loading: the load finishes (here: fails), then exit 0
        d.signal(signal.SIGTERM)
        time.sleep(0.3)
        check(d.proc.poll() is None, "exited before the load finished")
        with open(fifo, "wb"):
            pass  # EOF: the GGUF reader fails
        rc = d.proc.wait(30)
        check(rc == 0, "exit %d after SIGTERM during load\n%s" % (rc, d.log()))
    finally:
        if d.proc.poll() is None:
            try:
                fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
                os.close(fd)
            except OSError:
                pass
        d.close()
        os.unlink(fifo)
        os.rmdir(tmpdir)
    # without SIGTERM a model that fails to load is exit 1
    d = D.Daemon(exe, model="/dev/null", wait=False)
    try:
        check(d.proc.wait(30) == 1, "bad model exit status")
        check("/dev/null" in d.log(), d.log())
    finally:
        d.close()


def test_kv_sizing(exe):
    """kv_bytes sizes the KV cache (the log and /metrics say how many tokens and
    blocks); a cache too small for n_ctx fails startup naming the sizes;
    kv_percent on the CPU backend warns and keeps the default; on the GPU
    (INFERD_BACKEND=cuda) it sizes the cache from the memory left."""
    # stories260K: 5 layers x (4 KV heads x 8) F16 = 64 bytes a row, K and V: 640 B/token
    cpu = {"INFERD_BACKEND": "cpu"}  # these three are about the CPU backend, whatever the run pins
    d = D.Daemon(exe, args=["--backend", "cpu", "--kv-bytes", str(640 * 4100), "--n-ctx", "1024"],
                 env=cpu)
    try:
        check("KV cache: 4100 tokens" in d.log() and "(kv_bytes)" in d.log(), d.log())
        m = d.metrics()
        check(m["inferd_kv_blocks_capacity"] == (4100 + 15) // 16, m["inferd_kv_blocks_capacity"])
    finally:
        d.close()
    d = D.Daemon(exe, args=["--backend", "cpu", "--kv-bytes", str(640 * 100), "--n-ctx", "256"],
                 env=cpu, wait=False)
    try:
        # 78: a configuration that cannot work, not restarted (tools/cmds.h CMD_CONFIG)
        check(d.proc.wait(30) == 78, "a KV cache below n_ctx must fail startup with 78")
        check("holds 100 tokens" in d.log() and "n_ctx 256" in d.log(), d.log())
    finally:
        d.close()
    d = D.Daemon(exe, args=["--backend", "cpu", "--kv-percent", "50", "--n-ctx", "128",
                            "--max-seqs", "4"], env=cpu)
    try:
        check("kv_percent applies to the cuda backend" in d.log(), d.log())
        check("KV cache: 512 tokens" in d.log(), d.log())
    finally:
        d.close()
    if os.environ.get("INFERD_BACKEND") == "cuda":
        d = D.Daemon(exe, args=["--kv-percent", "1", "--n-ctx", "128", "--max-seqs", "4"])
        try:
            log = d.log()
            check("(kv_percent)" in log and "KV cache:" in log, log)
            m = d.metrics()
            check(m["inferd_kv_blocks_capacity"] > 512 // 16, m["inferd_kv_blocks_capacity"])
        finally:
            d.close()


def main():
    tests = [test_kv_sizing, test_loading_503, test_ping_idle_stream, test_sigterm_mid_stream_drains, test_sigterm_drain_timeout_cancels,
             test_disconnect_frees_sequence, test_sd_notify, test_engine_stuck_stops_watchdog,
             test_sighup_reload,
             test_shipped_config, test_usage_and_bad_model, test_queue_full_429,
             test_connection_caps]
    D.run(tests, sys.argv)


if __name__ == "__main__":
    main()
