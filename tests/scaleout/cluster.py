"""cluster -- N real `inferd serve` daemons and a real HAProxy in front of them,
all on 127.0.0.1, configured from the shipped deploy/haproxy/haproxy.cfg.

The shipped file is used as is except for what cannot work unprivileged or
on fixed ports: user/group/chroot go, the log goes to stdout, the admin
socket moves to a temporary directory, the listen and server addresses get
free ports. Every substitution must happen exactly as often as expected, so
a change to the shipped file that the test would silently stop covering
fails the test instead.

Python 3 standard library only; helpers for raw HTTP come from tests/api.
"""
import http.client
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "api"))
import daemon as D  # noqa: E402  (tests/api/daemon.py)

SKIP = D.SKIP
check = D.check
SRC = os.environ.get("INFERD_SRC") or os.path.join(HERE, "..", "..")
HAPROXY_CFG = os.path.join(SRC, "deploy", "haproxy", "haproxy.cfg")


def free_ports(n):
    """n distinct ports nobody listens on right now."""
    socks, ports = [], []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
        ports.append(s.getsockname()[1])
    for s in socks:
        s.close()
    return ports


class Backend:
    """One inferd daemon on a fixed port (so that a restart comes back where
    HAProxy expects it)."""

    def __init__(self, exe, model, port, name, args=()):
        self.exe, self.model, self.port, self.name = exe, model, port, name
        self.args = list(args)
        self.logf = tempfile.NamedTemporaryFile(prefix="inferd-%s-" % name, suffix=".log",
                                                delete=False)
        self.proc = None
        self.d = D.Daemon.__new__(D.Daemon)  # reuse its request helpers on our port
        self.d.port = port

    def start(self, wait=True):
        cmd = [self.exe, "serve", "--model", self.model, "--host", "127.0.0.1",
               "--port", str(self.port), "--log-level", "info"] + self.args
        e = dict(os.environ)
        e.pop("NOTIFY_SOCKET", None)
        e.pop("INFERD_API_KEY", None)
        self.proc = subprocess.Popen(cmd, stdout=self.logf, stderr=subprocess.STDOUT, env=e)
        if wait:
            self.wait_ready()

    def wait_ready(self, timeout=60.0):
        t0 = time.time()
        while time.time() - t0 < timeout:
            if self.proc.poll() is not None:
                raise RuntimeError("%s exited with %d:\n%s" % (self.name, self.proc.returncode,
                                                               self.log()[-3000:]))
            try:
                if self.d.request("GET", "/health", timeout=2)[0] == 200:
                    return
            except (OSError, AssertionError):
                pass
            time.sleep(0.05)
        raise RuntimeError("%s not ready after %.0f s" % (self.name, timeout))

    def log(self):
        with open(self.logf.name, errors="replace") as f:
            return f.read()

    def metrics(self):
        return self.d.metrics()

    def health(self):
        """(status, body) of GET /health on a new connection."""
        st, _, b = self.d.request("GET", "/health", timeout=5)
        return st, b

    def signal(self, sig):
        self.proc.send_signal(sig)

    def wait(self, timeout=60.0):
        return self.proc.wait(timeout)

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def close(self):
        self.stop()
        try:
            os.unlink(self.logf.name)
        except OSError:
            pass


def render_haproxy_cfg(src, lb_port, stats_port, sock, backend_ports, agent_ports):
    """The shipped config with test addresses (see the module comment)."""
    text = open(src).read()
    n = {"drop": 0, "log": 0, "sock": 0, "bind": 0, "stats": 0, "server": 0, "agent": 0}
    out = []
    for line in text.splitlines():
        s = line.strip()
        if re.match(r"(user|group|chroot)\s", s):
            n["drop"] += 1
            continue
        if s.startswith("log /dev/log"):
            line, n["log"] = "    log stdout format raw local0", n["log"] + 1
        elif s.startswith("stats socket "):
            line, n["sock"] = "    stats socket %s mode 600 level admin" % sock, n["sock"] + 1
        elif s == "bind :8080":
            line, n["bind"] = "    bind 127.0.0.1:%d" % lb_port, n["bind"] + 1
        elif s == "bind 127.0.0.1:8404":
            line, n["stats"] = "    bind 127.0.0.1:%d" % stats_port, n["stats"] + 1
        else:
            m = re.match(r"(\s*server inferd(\d+) )127\.0\.0\.1:\d+(.*)$", line)
            if m:
                i = int(m.group(2)) - 1
                check(0 <= i < len(backend_ports), "server %s beyond the test's backends" % s)
                rest = m.group(3)
                a = re.match(r"(.* agent-port )\d+( .*)$", rest)
                if a:
                    rest = "%s%d%s" % (a.group(1), agent_ports[i], a.group(2))
                    n["agent"] += 1
                line = "%s127.0.0.1:%d%s" % (m.group(1), backend_ports[i], rest)
                n["server"] += 1
        out.append(line)
    want = {"drop": 3, "log": 1, "sock": 1, "bind": 1, "stats": 1,
            "server": 2 * len(backend_ports), "agent": len(backend_ports)}
    check(n == want, "deploy/haproxy/haproxy.cfg changed shape: substitutions %r, "
          "expected %r" % (n, want))
    return "\n".join(out) + "\n"


class HAProxy:
    def __init__(self, backend_ports, agent_ports):
        exe = shutil.which("haproxy") or ("/usr/sbin/haproxy"
                                          if os.path.exists("/usr/sbin/haproxy") else None)
        if not exe:
            print("skip: haproxy not installed")
            sys.exit(SKIP)
        self.dir = tempfile.mkdtemp(prefix="inferd-haproxy-")
        self.port, self.stats_port = free_ports(2)
        self.sock = os.path.join(self.dir, "admin.sock")
        self.cfg = os.path.join(self.dir, "haproxy.cfg")
        with open(self.cfg, "w") as f:
            f.write(render_haproxy_cfg(HAPROXY_CFG, self.port, self.stats_port, self.sock,
                                       backend_ports, agent_ports))
        r = subprocess.run([exe, "-c", "-f", self.cfg], capture_output=True, text=True)
        check(r.returncode == 0, "haproxy -c failed:\n%s%s" % (r.stdout, r.stderr))
        self.logf = open(os.path.join(self.dir, "haproxy.log"), "w")
        self.proc = subprocess.Popen([exe, "-db", "-f", self.cfg], stdout=self.logf,
                                     stderr=subprocess.STDOUT)
        t0 = time.time()
        while not os.path.exists(self.sock):
            check(self.proc.poll() is None, "haproxy exited:\n%s" % self.log())
            check(time.time() - t0 < 10, "haproxy admin socket never appeared")
            time.sleep(0.05)

    def log(self):
        self.logf.flush()
        with open(self.logf.name, errors="replace") as f:
            return f.read()

    def admin(self, cmd):
        s = socket.socket(socket.AF_UNIX)
        s.settimeout(5)
        s.connect(self.sock)
        s.sendall(cmd.encode() + b"\n")
        out = b""
        while True:
            x = s.recv(65536)
            if not x:
                break
            out += x
        s.close()
        return out.decode()

    def servers(self, backend="inferd_leastconn", field="status"):
        """{server name: field} from `show stat` (status: UP, DOWN, MAINT, ...;
        weight: the effective weight)."""
        lines = self.admin("show stat").splitlines()
        hdr = lines[0].lstrip("# ").split(",")
        ip, isv, ist = hdr.index("pxname"), hdr.index("svname"), hdr.index(field)
        out = {}
        for l in lines[1:]:
            f = l.split(",")
            if len(f) > ist and f[ip] == backend and f[isv] not in ("FRONTEND", "BACKEND"):
                out[f[isv]] = f[ist]
        return out

    def wait_idle(self, backend="inferd_session", timeout=10.0):
        """Wait until HAProxy counts no request in flight on `backend` (the
        BACKEND row's and every server's scur 0). A client has read a whole
        response a moment before HAProxy releases its stream, and until then
        the bounded-load hash counts it: a serial client's next turn sent in
        that moment may overflow to the next daemon (hash-balance-factor,
        documented in haproxy.cfg). A conversation's next turn is seconds
        later in practice; tests wait for the release instead of sleeping."""
        t0 = time.time()
        while True:
            lines = self.admin("show stat").splitlines()
            hdr = lines[0].lstrip("# ").split(",")
            ip, ic = hdr.index("pxname"), hdr.index("scur")
            cur = [l.split(",")[ic] for l in lines[1:]
                   if l.split(",")[ip] == backend and len(l.split(",")) > ic]
            if all(c in ("", "0") for c in cur):
                return time.time() - t0
            if time.time() - t0 > timeout:
                raise AssertionError("%s: requests still in flight after %.0f s: %r" %
                                     (backend, timeout, cur))
            time.sleep(0.02)

    def wait_status(self, name, pred, timeout=30.0):
        t0 = time.time()
        while time.time() - t0 < timeout:
            st = self.servers().get(name, "")
            if pred(st):
                return time.time() - t0
            time.sleep(0.1)
        raise AssertionError("%s: HAProxy status %r after %.0f s" %
                             (name, self.servers().get(name), timeout))

    def retried(self):
        """Requests HAProxy logged with retries (the 5th of the five
        connection counts; "+N" when redispatched)."""
        n = 0
        for l in self.log().splitlines():
            m = re.search(r" \d+/\d+/\d+/\d+/(\+?)(\d+) \d+/\d+ \"", l)
            if m and int(m.group(2)) > 0:
                n += 1
        return n

    def close(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.logf.close()
        shutil.rmtree(self.dir, ignore_errors=True)


class Result:
    __slots__ = ("status", "backend", "tokens", "ok", "error", "t0", "t1", "finish", "want")

    def __repr__(self):
        return "Result(status=%r backend=%r tokens=%r ok=%r error=%r t=%.2f..%.2f)" % (
            self.status, self.backend, self.tokens, self.ok, self.error, self.t0, self.t1)


def complete(port, body, headers=None, timeout=120.0, path="/v1/completions"):
    """One completion through `port` on a new connection. Streaming requests
    are read to the end and checked: every event a chunk, no error event,
    the last one [DONE]. Never raises: a failure is a Result with ok False."""
    r = Result()
    r.status, r.backend, r.tokens, r.ok, r.error, r.finish = None, None, 0, False, None, None
    r.want = body.get("max_tokens")
    r.t0 = time.time()
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
        h = {"Content-Type": "application/json", "Connection": "close"}
        h.update(headers or {})
        c.request("POST", path, json.dumps(body), h)
        resp = c.getresponse()
        r.status = resp.status
        r.backend = resp.getheader("X-Inferd-Backend")
        data = resp.read()
        c.close()
        if r.status != 200:
            r.error = "status %d: %r" % (r.status, data[:200])
        elif body.get("stream"):
            ev = D.sse_events(data)
            if not ev or ev[-1] != "[DONE]":
                r.error = "stream did not end with [DONE]: %r" % ev[-2:]
            else:
                for e in ev[:-1]:
                    j = json.loads(e)
                    if "error" in j:
                        r.error = "error event %r" % j
                        break
                    if j.get("choices"):
                        r.finish = j["choices"][0].get("finish_reason") or r.finish
                    if j.get("usage"):  # stream_options.include_usage
                        r.tokens = j["usage"]["completion_tokens"]
                if r.error is None and r.finish is None:
                    r.error = "stream without a finish_reason"
                r.ok = r.error is None
        else:
            j = json.loads(data)
            r.tokens = j["usage"]["completion_tokens"]
            r.finish = j["choices"][0]["finish_reason"]
            r.ok = True
    except Exception as ex:  # truncated stream, reset, timeout: all count as failed
        r.error = "%s: %s" % (type(ex).__name__, ex)
    r.t1 = time.time()
    return r


class Load:
    """`workers` threads, each sending one request after the other through
    `port` until stop(); worker i sends bodies[i % len(bodies)] (one body or
    a list); every Result is kept."""

    def __init__(self, port, workers, bodies, headers=None):
        self.port, self.headers = port, headers
        self.bodies = bodies if isinstance(bodies, list) else [bodies]
        self.results = []
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.threads = [threading.Thread(target=self._run, args=(i,), daemon=True)
                        for i in range(workers)]
        self.t_start = time.time()
        for t in self.threads:
            t.start()

    def _run(self, i):
        body = self.bodies[i % len(self.bodies)]
        while not self.stopping.is_set():
            r = complete(self.port, body, self.headers)
            with self.lock:
                self.results.append(r)

    def stop(self):
        self.stopping.set()
        for t in self.threads:
            t.join(180)
        self.t_stop = time.time()
        return self.results
