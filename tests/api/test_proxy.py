#!/usr/bin/env python3
"""test_proxy -- trusted_proxies and X-Forwarded-For against the real daemon.

The daemon trusts 127.0.0.2 only (max_connections_per_ip 2):
- log lines name the forwarded client for requests from 127.0.0.2, and the
  peer for requests from 127.0.0.3 whatever X-Forwarded-For says;
- spoofed entries left of what the proxy appended are not believed;
- the proxy may hold more connections than max_connections_per_ip (its
  clients are limited instead): a third concurrent request for one
  forwarded client gets 429 + Retry-After while another client's request
  through the same proxy is served, and the limit frees when a request ends;
- an untrusted address stays under its per-address cap, header or not;
- a bad trusted_proxies value: the daemon refuses to start (exit 1, the
  entry named); on SIGHUP it keeps the old list and serves on.
usage: test_proxy.py <inferd binary>
"""
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time

sys.dont_write_bytecode = True  # keep the source tree clean
import daemon as D  # noqa: E402
from daemon import check

MODEL = "stories260K"


def conn(d, src):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(30)
    s.bind((src, 0))
    s.connect(("127.0.0.1", d.port))
    return s


def get(d, src, path="/v1/models", xff=None):
    s = conn(d, src)
    try:
        h = "GET %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n" % path
        for x in ([xff] if isinstance(xff, str) else (xff or [])):
            h += "X-Forwarded-For: %s\r\n" % x
        s.sendall((h + "\r\n").encode())
        return D.parse_response(D.read_response_bytes(s))
    finally:
        s.close()


def start_stream(d, src, xff):
    body = json.dumps({"model": MODEL, "prompt": "Once upon a time", "max_tokens": 2000,
                       "stream": True, "ignore_eos": True}).encode()
    s = conn(d, src)
    h = b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n" % len(body)
    if xff:
        h += b"X-Forwarded-For: " + xff.encode() + b"\r\n"
    s.sendall(h + b"\r\n" + body)
    buf = b""
    while b"\r\n\r\n" not in buf:
        x = s.recv(65536)
        if not x:
            break
        buf += x
    return s, buf


def log_clients(d, path):
    out = []
    for line in d.log().splitlines():
        if "request id=" in line and ("path=%s " % path) in line and "client=" in line:
            out.append(line.split("client=", 1)[1].split(" ", 1)[0])
    return out


def test_forwarded_for(exe):
    d = D.Daemon(exe, args=["--trusted-proxies", "127.0.0.2, 10.0.0.0/8",
                            "--max-connections-per-ip", "2", "--max-connections", "64",
                            "--max-seqs", "8"])
    held = []
    try:
        cases = [("127.0.0.2", "203.0.113.7", "/v1/models", "203.0.113.7"),
                 ("127.0.0.3", "203.0.113.7", "/health", "127.0.0.3"),
                 ("127.0.0.2", ["6.6.6.6, 203.0.113.8", "10.1.1.1"], "/metrics", "203.0.113.8"),
                 ("127.0.0.2", "unknown", "/tokenize", "127.0.0.2"),
                 ("127.0.0.2", None, "/detokenize", "127.0.0.2")]
        for src, xff, path, want in cases:
            st, _, b = get(d, src, path, xff)
            check(st in (200, 405), "%s from %s: %d %r" % (path, src, st, b[:200]))
            time.sleep(0.05)
            got = log_clients(d, path)
            check(got and got[-1] == want, "%s from %s with XFF %r logged client %r, wanted %s"
                  % (path, src, xff, got, want))

        # the proxy holds more connections than the per-address cap
        for i in range(4):
            s, head = start_stream(d, "127.0.0.2", "198.51.100.%d" % i)
            check(head.startswith(b"HTTP/1.1 200"), "proxied stream %d: %r" % (i, head[:80]))
            held.append(s)
        # a third request in flight for one forwarded client: 429
        s, head = start_stream(d, "127.0.0.2", "198.51.100.0")
        check(head.startswith(b"HTTP/1.1 200"), "second request of a client: %r" % head[:80])
        held.append(s)
        s, head = start_stream(d, "127.0.0.2", "198.51.100.0")
        check(head.startswith(b"HTTP/1.1 429") and b"Retry-After:" in head,
              "third request of a client: %r" % head[:200])
        s.close()
        # ... the same client named by an untrusted peer is a different key
        st, _, _ = get(d, "127.0.0.3", "/health", "198.51.100.0")
        check(st == 200, "untrusted peer: %d" % st)
        # ... and the limit frees when one of the client's requests ends
        held.pop().close()
        time.sleep(0.3)
        s, head = start_stream(d, "127.0.0.2", "198.51.100.0")
        check(head.startswith(b"HTTP/1.1 200"), "after one ended: %r" % head[:80])
        held.append(s)

        # an untrusted address keeps its per-address cap, header or not
        u = [conn(d, "127.0.0.3") for _ in range(2)]
        time.sleep(0.2)
        x = conn(d, "127.0.0.3")
        x.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nX-Forwarded-For: 1.1.1.1\r\n\r\n")
        try:
            r = x.recv(100)
        except OSError:
            r = b""
        check(r == b"", "third connection from an untrusted address served: %r" % r)
        for c in u + [x]:
            c.close()
    finally:
        for s in held:
            s.close()
        rc = d.stop()
        d.close()
    check(rc == 0, "exit status %s" % rc)


def test_bad_value(exe):
    out = subprocess.run([exe, "serve", "--model", D.model_path(), "--port", "0",
                          "--trusted-proxies", "127.0.0.1, not-an-ip"],
                         capture_output=True, text=True, timeout=30)
    check(out.returncode != 0, "started with a bad trusted_proxies")
    check("trusted_proxies" in out.stderr and "not-an-ip" in out.stderr, out.stderr[-500:])

    conf = tempfile.NamedTemporaryFile("w", suffix=".conf", delete=False)
    conf.write('trusted_proxies = "127.0.0.2"\n')
    conf.close()
    d = D.Daemon(exe, config=conf.name)
    try:
        with open(conf.name, "w") as f:
            f.write('trusted_proxies = "127.0.0.2/99"\n')
        d.signal(signal.SIGHUP)
        time.sleep(0.5)
        check(d.proc.poll() is None, "daemon died on SIGHUP")
        st, _, _ = get(d, "127.0.0.2", "/v1/models", "192.0.2.1")
        check(st == 200, st)
        time.sleep(0.05)
        check(log_clients(d, "/v1/models")[-1:] == ["192.0.2.1"], "old list not kept")
        check("127.0.0.2/99" in d.log(), "the bad value is not logged")
        with open(conf.name, "w") as f:
            f.write('trusted_proxies = ""\n')
        d.signal(signal.SIGHUP)
        time.sleep(0.5)
        st, _, _ = get(d, "127.0.0.2", "/v1/models", "192.0.2.1")
        check(st == 200, st)
        time.sleep(0.05)
        check(log_clients(d, "/v1/models")[-1:] == ["127.0.0.2"], "new empty list not applied")
    finally:
        d.close()
        os.unlink(conf.name)


def main():
    D.run([test_forwarded_for, test_bad_value], sys.argv)


if __name__ == "__main__":
    main()
