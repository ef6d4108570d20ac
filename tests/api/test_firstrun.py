#!/usr/bin/env python3
"""test_firstrun -- what a newcomer meets first (README "Exit status"):
a port another daemon holds is refused ("port in use", exit 1) and the
running daemon keeps every request; a restart right after a stop binds at once
even with server-side TIME_WAIT connections on the port; a missing, unreadable
or directory model file, and no model at all, each get one line on stderr
naming the file and what to do (exit 1; no model: exit 2). Needs only
stories260K (data/ or ../shared).
usage: test_firstrun.py <inferd binary>
"""
import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

sys.dont_write_bytecode = True  # keep the source tree clean
import daemon as D  # noqa: E402
from daemon import check


def serve(exe, *args, user=None, timeout=20):
    """`inferd serve ARGS` expected to refuse to start: (rc, stderr text)."""
    env = dict(os.environ)
    env.pop("NOTIFY_SOCKET", None)
    kw = {"user": user} if user is not None else {}
    r = subprocess.run([exe, "serve"] + list(args), capture_output=True, text=True,
                       timeout=timeout, env=env, **kw)
    return r.returncode, r.stderr


def one_line(err):
    """The refusal is one line, prefixed like the other serve errors."""
    lines = err.strip().splitlines()
    check(len(lines) == 1, "want one line, got %r" % err)
    check(lines[0].startswith("inferd serve: "), lines[0])
    return lines[0]


def test_second_daemon_refused(exe):
    a = D.Daemon(exe)
    try:
        rc, err = serve(exe, "--model", a.model, "--host", "127.0.0.1", "--port", str(a.port))
        line = one_line(err)
        check(rc == 1, "second daemon: exit %d (%s)" % (rc, line))
        check("port in use" in line and str(a.port) in line, line)
        # the first one alone answers: none of these can land on another process
        for _ in range(8):
            st, _, _ = a.request("GET", "/health", timeout=5)
            check(st == 200, "health %d" % st)
        check(a.proc.poll() is None, "the first daemon exited")
    finally:
        a.close()


def time_wait_on(port):
    """Server-side TIME_WAIT sockets whose local port is `port` (/proc/net/tcp)."""
    n = 0
    for name in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = open(name).read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            f = row.split()
            if f[3] == "06" and int(f[1].rsplit(":", 1)[1], 16) == port:
                n += 1
    return n


def test_restart_binds_at_once(exe):
    a = D.Daemon(exe)
    port = a.port
    try:
        # "Connection: close": the server closes first, so its side of each
        # connection sits in TIME_WAIT on the listening port after the stop
        for _ in range(4):
            s = socket.create_connection(("127.0.0.1", port), timeout=10)
            s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            resp = b""
            while True:  # until the server's FIN: it closed first
                d = s.recv(65536)
                if not d:
                    break
                resp += d
            s.close()
            check(b" 200 " in resp.split(b"\r\n", 1)[0], resp[:100])
        rc = a.stop()
        check(rc == 0, "stop: exit %d" % rc)
        tw = time_wait_on(port)
        # the case this test is about (without SO_REUSEADDR the bind below fails)
        check(tw > 0 or not os.path.exists("/proc/net/tcp"),
              "no TIME_WAIT socket on port %d after server-closed connections" % port)
        t0 = time.time()
        # start on exactly the port just released
        cmd = [exe, "serve", "--model", a.model, "--host", "127.0.0.1", "--port", str(port)]
        env = dict(os.environ)
        env.pop("NOTIFY_SOCKET", None)
        logf = tempfile.TemporaryFile()
        p = subprocess.Popen(cmd, stdout=logf, stderr=subprocess.STDOUT, env=env)
        try:
            ok = False
            while time.time() - t0 < 20:
                check(p.poll() is None, "restart on port %d exited %s (TIME_WAIT sockets: %d): %s"
                      % (port, p.returncode, tw, (logf.seek(0), logf.read())[1][-400:]))
                try:
                    s = socket.create_connection(("127.0.0.1", port), timeout=2)
                    s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                    resp = D.read_response_bytes(s)
                    s.close()
                    if b" 200 " in resp.split(b"\r\n", 1)[0]:
                        ok = True
                        break
                except OSError:
                    pass
                time.sleep(0.05)
            check(ok, "restart never served on port %d" % port)
            print("  restart served after %.2fs with %d TIME_WAIT sockets on the port"
                  % (time.time() - t0, tw))
        finally:
            p.send_signal(signal.SIGTERM)
            p.wait(30)
    finally:
        a.close()


def test_model_missing(exe):
    rc, err = serve(exe, "--model", "/nonexistent/dir/model.gguf", "--port", "0")
    line = one_line(err)
    check(rc == 1, "missing model: exit %d" % rc)
    check("/nonexistent/dir/model.gguf" in line and "not found" in line and "--model" in line,
          line)
    # from a config file: the message says where to fix it
    with tempfile.NamedTemporaryFile("w", suffix=".conf", delete=False) as f:
        f.write("model = /nonexistent/m.gguf\nport = 0\n")
    try:
        rc, err = serve(exe, "--config", f.name)
        line = one_line(err)
        check(rc == 1 and f.name in line and "/nonexistent/m.gguf" in line, (rc, line))
    finally:
        os.unlink(f.name)


def test_model_directory(exe):
    d = tempfile.mkdtemp(prefix="inferd-dir-")
    try:
        rc, err = serve(exe, "--model", d, "--port", "0")
        line = one_line(err)
        check(rc == 1 and d in line and "directory" in line, (rc, line))
    finally:
        os.rmdir(d)


def test_model_unreadable(exe):
    d = tempfile.mkdtemp(prefix="inferd-perm-")
    os.chmod(d, 0o755)
    m = os.path.join(d, "m.gguf")
    shutil.copy(D.model_path(), m)
    os.chmod(m, 0)
    user = None
    if os.geteuid() == 0:  # root reads anything: refuse as nobody instead
        user = pwd.getpwnam("nobody").pw_uid
        if not os.access(exe, os.X_OK):
            print("  (unreadable: skipped, the binary is not runnable as nobody)")
            return
    try:
        rc, err = serve(exe, "--model", m, "--port", "0", user=user)
        if rc == 126 or "Permission denied" in err and "inferd serve" not in err:
            print("  (unreadable: skipped, the binary is not runnable as nobody)")
            return
        line = one_line(err)
        check(rc == 1 and m in line and "not readable" in line, (rc, line))
    finally:
        os.unlink(m)
        os.rmdir(d)


def test_no_model(exe):
    out = subprocess.run([exe, "serve", "--help"], capture_output=True, text=True, timeout=10)
    m = re.search(r"the bundled demo model (\S+) when installed", out.stdout)
    check(m is not None, "serve --help does not name the default model: %r" % out.stdout[:400])
    default = m.group(1)
    if os.path.exists(default):  # installed: it is served, and the log says so
        p = subprocess.Popen([exe, "serve", "--port", "0"], stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True)
        try:
            line = p.stderr.readline()
            check("no model configured: serving the bundled demo model " + default in line, line)
        finally:
            p.send_signal(signal.SIGTERM)
            p.wait(30)
        return
    rc, err = serve(exe, "--port", "0")
    line = one_line(err)
    check(rc == 2, "no model: exit %d" % rc)
    check("no model configured" in line and "--model" in line and default in line, line)


if __name__ == "__main__":
    D.run([test_second_daemon_refused, test_restart_binds_at_once, test_model_missing,
           test_model_directory, test_model_unreadable, test_no_model], sys.argv)
