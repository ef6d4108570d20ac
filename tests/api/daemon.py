"""daemon -- start the real `inferd serve` on 127.0.0.1 and talk raw HTTP to it.

Used by the tests in tests/api (Python 3 standard library only). The daemon
binary is argv[1] of each test (meson passes the built executable); models
come from $INFERD_SHARED/models. A missing model or binary exits 77 (skip).
"""
import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import time

SKIP = 77
# INFERD_TEST_SLOW: a factor for start and stop timeouts (valgrind suite)
SLOW = float(os.environ.get("INFERD_TEST_SLOW") or 1)


def shared(*parts):
    root = os.environ.get("INFERD_SHARED")
    if not root:
        here = os.path.dirname(os.path.abspath(__file__))
        root = os.path.join(here, "..", "..", "..", "shared")
    return os.path.join(root, *parts)


def model_path(name="stories260K.gguf"):
    p = shared("models", name)
    if not os.path.exists(p):
        print("skip: no model %s" % p)
        sys.exit(SKIP)
    return p


def free_port():
    """A port nobody listens on right now (the daemon binds it next)."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Daemon:
    def __init__(self, exe, model=None, args=(), env=None, config=None, wait=True):
        self.exe = exe
        self.port = free_port()
        self.model = model or model_path()
        self.logf = tempfile.NamedTemporaryFile(prefix="inferd-log-", suffix=".txt", delete=False)
        cmd = [exe, "serve", "--model", self.model, "--host", "127.0.0.1",
               "--port", str(self.port), "--log-level", "debug"]
        if config:
            cmd += ["--config", config]
        cmd += list(args)
        e = dict(os.environ)
        e.pop("NOTIFY_SOCKET", None)
        e.pop("INFERD_API_KEY", None)
        if env:
            e.update(env)
        # INFERD_TEST_WRAPPER: a command line the daemon runs under (the
        # valgrind suite, tests/api/valgrind_run.py)
        wrap = os.environ.get("INFERD_TEST_WRAPPER")
        if wrap:
            cmd = shlex.split(wrap) + cmd
        self.cmd = cmd
        self.proc = subprocess.Popen(cmd, stdout=self.logf, stderr=subprocess.STDOUT, env=e)
        if wait:
            self.wait_ready()

    def log(self):
        with open(self.logf.name, "r", errors="replace") as f:
            return f.read()

    def wait_ready(self, timeout=60.0 * SLOW):
        t0 = time.time()
        while time.time() - t0 < timeout:
            if self.proc.poll() is not None:
                raise RuntimeError("daemon exited with %d:\n%s" % (self.proc.returncode, self.log()))
            try:
                st, _, _ = self.request("GET", "/health", timeout=2)
                if st == 200:
                    return
            except OSError:
                pass
            time.sleep(0.05)
        raise RuntimeError("daemon not ready after %.0f s:\n%s" % (timeout, self.log()))

    def raw(self, data, timeout=10.0, read=True, shut=False):
        """Send raw bytes, return the raw response bytes (until close or one full response)."""
        s = socket.create_connection(("127.0.0.1", self.port), timeout=timeout)
        try:
            try:
                s.sendall(data)
            except (BrokenPipeError, ConnectionResetError):
                # The server may answer early (413 before the body is read)
                # and close while we still send: its response is what counts.
                if not read:
                    return b""
                try:
                    return read_response_bytes(s)
                except ConnectionResetError:
                    return b""
            if shut:
                s.shutdown(socket.SHUT_WR)
            if not read:
                return b""
            return read_response_bytes(s)
        finally:
            s.close()

    def request(self, method, path, body=None, headers=None, timeout=30.0 * SLOW):
        """One request on a new connection -> (status, headers dict (lowercase), body bytes)."""
        h = {"Host": "127.0.0.1", "Connection": "close"}
        if headers:
            h.update(headers)
        if body is not None and not isinstance(body, (bytes, bytearray)):
            body = json.dumps(body).encode()
            h.setdefault("Content-Type", "application/json")
        if body is not None:
            h["Content-Length"] = str(len(body))
        req = "%s %s HTTP/1.1\r\n" % (method, path)
        req += "".join("%s: %s\r\n" % (k, v) for k, v in h.items()) + "\r\n"
        data = req.encode() + (body or b"")
        return parse_response(self.raw(data, timeout=timeout))

    # 60 s a request, scaled like every other bound (valgrind_run.py sets
    # INFERD_TEST_SLOW=20: a constrained chat of 2 x 200 tokens on a 152K
    # vocabulary took longer than 60 s under memcheck)
    def post(self, path, obj, headers=None, timeout=60.0 * SLOW):
        st, hd, b = self.request("POST", path, obj, headers, timeout)
        return st, hd, b

    def json(self, method, path, obj=None, headers=None, timeout=60.0 * SLOW):
        st, hd, b = self.request(method, path, obj, headers, timeout)
        try:
            return st, json.loads(b.decode())
        except ValueError:
            raise AssertionError("not JSON (status %d): %r" % (st, b[:500]))

    def metrics(self, headers=None):
        st, _, b = self.request("GET", "/metrics", headers=headers)
        assert st == 200, st
        out = {}
        for line in b.decode().splitlines():
            if line.startswith("#") or not line.strip():
                continue
            k, v = line.rsplit(" ", 1)
            out[k] = float(v)
        return out

    def signal(self, sig):
        self.proc.send_signal(sig)

    def wait_exit(self, bound, after):
        """Wait up to bound seconds for the daemon to exit by itself (a
        failure if it has not: "still running N s AFTER"); returns its exit
        status and the seconds waited."""
        t0 = time.time()
        while self.proc.poll() is None and time.time() - t0 < bound:
            time.sleep(0.05)
        if self.proc.poll() is None:
            raise AssertionError("still running %.0f s %s" % (bound, after))
        return self.proc.returncode, time.time() - t0

    def stop(self, timeout=30.0 * SLOW):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        rc = self.proc.returncode
        return rc

    def close(self):
        self.stop()
        try:
            os.unlink(self.logf.name)
        except OSError:
            pass


def post_stream(d, req, timeout):
    """POST req (a dict) to /v1/completions on a new connection that the
    server closes when done; the socket (the caller reads the response)."""
    body = json.dumps(req).encode()
    s = socket.create_connection(("127.0.0.1", d.port), timeout=timeout)
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
              b"Content-Length: %d\r\n\r\n" % len(body) + body)
    return s


def first_event(s):
    """Read s up to its first SSE data event; what was read."""
    buf = b""
    while b"data: {" not in buf:
        x = s.recv(65536)
        check(x, "stream closed before the first event: %r" % buf)
        buf += x
    return buf


def read_to_close(s, buf=b""):
    """buf and whatever s gives until the server closes it (or it fails)."""
    while True:
        try:
            x = s.recv(65536)
        except OSError:
            break
        if not x:
            break
        buf += x
    return buf


def read_response_bytes(s):
    """Read one HTTP response (Content-Length or chunked) or until EOF."""
    buf = b""
    while b"\r\n\r\n" not in buf:
        d = s.recv(65536)
        if not d:
            return buf
        buf += d
    head, rest = buf.split(b"\r\n\r\n", 1)
    hl = head.decode("latin-1").lower()
    if "content-length:" in hl:
        n = int(hl.split("content-length:", 1)[1].split("\r\n", 1)[0].strip())
        while len(rest) < n:
            d = s.recv(65536)
            if not d:
                break
            rest += d
        return head + b"\r\n\r\n" + rest
    if "transfer-encoding: chunked" in hl:
        while not rest.endswith(b"0\r\n\r\n"):
            d = s.recv(65536)
            if not d:
                break
            rest += d
        return head + b"\r\n\r\n" + rest
    while True:
        d = s.recv(65536)
        if not d:
            break
        rest += d
    return head + b"\r\n\r\n" + rest


def dechunk(b):
    out = b""
    while b:
        line, b = b.split(b"\r\n", 1)
        n = int(line.split(b";")[0], 16)
        if n == 0:
            break
        out += b[:n]
        b = b[n + 2:]
    return out


def parse_response(data):
    if b"\r\n\r\n" not in data:
        raise AssertionError("incomplete response: %r" % data[:300])
    head, body = data.split(b"\r\n\r\n", 1)
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ")[1])
    hd = {}
    for l in lines[1:]:
        k, v = l.split(":", 1)
        hd[k.strip().lower()] = v.strip()
    if hd.get("transfer-encoding", "").lower() == "chunked":
        body = dechunk(body)
    return status, hd, body


def sse_events(body):
    """Split an SSE body into its data payloads (comments dropped)."""
    out = []
    text = body.decode("utf-8")
    assert text.endswith("\n\n"), "stream does not end with a blank line: %r" % text[-80:]
    for ev in text.split("\n\n"):
        if not ev:
            continue
        for line in ev.split("\n"):
            if line.startswith(":"):
                continue
            assert line.startswith("data: "), "bad SSE line %r" % line
            out.append(line[6:])
    return out


def check(cond, what):
    if not cond:
        raise AssertionError(what)


def expect_error(resp, status, param="__any__", code="__any__"):
    """resp = (status, headers, body): check an OpenAI error object."""
    st, hd, b = resp
    check(st == status, "status %d, wanted %d: %r" % (st, status, b[:300]))
    check(hd.get("content-type", "").startswith("application/json"),
          "error content-type %r" % hd.get("content-type"))
    j = json.loads(b.decode())
    e = j.get("error")
    check(isinstance(e, dict), "no error object: %r" % j)
    check(isinstance(e.get("message"), str) and e["message"], "no message: %r" % j)
    check("type" in e and "param" in e and "code" in e, "error fields missing: %r" % j)
    if param != "__any__":
        check(e["param"] == param, "param %r, wanted %r (%s)" % (e["param"], param, e["message"]))
    if code != "__any__":
        check(e["code"] == code, "code %r, wanted %r" % (e["code"], code))
    return e


def run(tests, argv):
    """Run test functions; argv[1] is the inferd binary. Exit 0 / 1."""
    if len(argv) < 2 or not os.path.exists(argv[1]):
        print("skip: no inferd binary given")
        sys.exit(SKIP)
    fails = 0
    for t in tests:
        t0 = time.time()
        try:
            t(argv[1])
            print("ok   %-40s %.2fs" % (t.__name__, time.time() - t0))
        except Exception as ex:  # report and continue with the next test
            import traceback
            traceback.print_exc()
            print("FAIL %-40s %s" % (t.__name__, ex))
            fails += 1
        sys.stdout.flush()
    print("%d/%d passed" % (len(tests) - fails, len(tests)))
    sys.exit(1 if fails else 0)
