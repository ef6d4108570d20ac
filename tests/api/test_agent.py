#!/usr/bin/env python3
"""test_agent -- the load balancer's agent-check port (agent_port, api/agent.c).

Every connection gets one line "NN%\\n" and is closed: 100% when idle, an
agent-send string is ignored, many connections in a row each answered; the
weight falls while the engine is busy and requests wait (free KV share / (1 +
waiting)) and comes back when they end; 0% while draining (SIGTERM); a taken
agent port stops the daemon at startup with a message naming agent_port, and
agent_port equal to port is a configuration error.
usage: test_agent.py <inferd binary>
"""
import os
import re
import signal
import socket
import sys
import time

sys.dont_write_bytecode = True  # keep the source tree clean
import daemon as D  # noqa: E402
from daemon import check

MODEL = "stories260K"


def agent_line(port, send=b"", timeout=5.0):
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout * D.SLOW)
    try:
        if send:
            s.sendall(send)
        data = b""
        while True:
            x = s.recv(64)
            if not x:
                return data
            data += x
    finally:
        s.close()


def weight(port, send=b""):
    line = agent_line(port, send)
    m = re.fullmatch(rb"(\d+)%\n", line)
    check(m is not None, "agent line %r" % line)
    w = int(m.group(1))
    check(0 <= w <= 100, "weight %d" % w)
    return w


def stream_req(max_tokens):
    return {"model": MODEL, "prompt": "Once upon a time", "max_tokens": max_tokens,
            "temperature": 0, "stream": True, "ignore_eos": True}


def test_idle(exe):
    ap = D.free_port()
    d = D.Daemon(exe, args=["--agent-port", str(ap)])
    try:
        check(weight(ap) == 100, "idle weight %d" % weight(ap))
        check(weight(ap, b"inferd_leastconn/inferd1\n") == 100, "with agent-send")
        ws = [weight(ap) for _ in range(50)]
        check(ws == [100] * 50, "50 checks in a row: %r" % ws)
        check("agent-check port 127.0.0.1:%d" % ap in d.log(), "no agent-check log line")
        m = d.metrics()
        check(m.get("inferd_agent_weight_percent") == 100, "/metrics weight %r"
              % m.get("inferd_agent_weight_percent"))
        # the API is unchanged beside it
        check(d.request("GET", "/health")[0] == 200, "health")
    finally:
        check(d.stop() == 0, "exit code")


def test_many_idle_agents(exe):
    """150 agent connections opened and left alone (never read, never
    closed) beside one that sends garbage without end: the API and new
    agent checks still answer at once, and the daemon closes the idle ones
    itself (its 5 s linger)."""
    ap = D.free_port()
    d = D.Daemon(exe, args=["--agent-port", str(ap)])
    socks = []

    def fds():
        return len(os.listdir("/proc/%d/fd" % d.proc.pid))

    try:
        fd0 = fds()
        for _ in range(150):
            socks.append(socket.create_connection(("127.0.0.1", ap), timeout=5 * D.SLOW))
        junk = socket.create_connection(("127.0.0.1", ap), timeout=5 * D.SLOW)
        junk.settimeout(0.2)
        t0 = time.time()
        try:
            while time.time() - t0 < 1.0:
                junk.sendall(b"x" * 4096)
        except OSError:
            pass  # the daemon shut its side or reset: fine
        check(d.request("GET", "/health")[0] == 200, "health beside the agent connections")
        check(weight(ap) == 100, "a new agent check beside them")
        closed = 0
        t0 = time.time()
        for s in socks:
            s.settimeout(max(0.1, 10 * D.SLOW - (time.time() - t0)))
            try:
                data = s.recv(64)
                while data and not data.endswith(b"\n"):
                    data += s.recv(64)
                if data and s.recv(64) == b"":
                    closed += 1
            except OSError:
                pass
        check(closed == len(socks), "%d of %d idle agent connections got line + FIN"
              % (closed, len(socks)))
        # the daemon's own ends: closed within its 5 s linger although the
        # clients keep theirs open
        t0 = time.time()
        n = fds()
        while n > fd0 + 2 and time.time() - t0 < 10 * D.SLOW:
            time.sleep(0.2)
            n = fds()
        check(n <= fd0 + 2, "daemon fds %d, %d before the 150 connections" % (n, fd0))
        print("  150 idle agent connections: the daemon closed its ends after %.1f s"
              % (time.time() - t0))
        junk.close()
    finally:
        for s in socks:
            s.close()
        check(d.stop() == 0, "exit code")


def test_weight_follows_load(exe):
    """One sequence at a time: one request runs, two wait; the weight is the
    free KV share over 1 + 2 while they wait, 100 again once they are gone."""
    if os.environ.get("INFERD_TEST_WRAPPER"):
        # under valgrind the engine thread holds the one running thread for
        # seconds at a time: the three requests end before an agent check
        # gets the loop thread (the other checks here still run there)
        print("  weight under load: not checked under a wrapper")
        return
    ap = D.free_port()
    d = D.Daemon(exe, args=["--agent-port", str(ap), "--max-seqs", "1", "--n-ctx", "512"])
    try:
        seen = []
        for _ in range(3):  # the engine may finish the three before a check lands
            s0 = D.post_stream(d, stream_req(480), 30)
            D.first_event(s0)
            s1 = D.post_stream(d, stream_req(480), 30)
            s2 = D.post_stream(d, stream_req(480), 30)
            t0 = time.time()
            while time.time() - t0 < 5 * D.SLOW:
                w = weight(ap)
                seen.append(w)
                if w <= 34:
                    mw = d.metrics().get("inferd_agent_weight_percent")
                    check(mw is not None and 0 <= mw <= 100, "/metrics weight %r" % mw)
                    break
            for s in (s0, s1, s2):
                s.close()  # hang up: the sequences are freed
            if seen and min(seen) <= 34:
                break
        check(min(seen) <= 34, "weight never fell to free/3 with two waiting: %r" % seen[:20])
        t0 = time.time()
        w = weight(ap)
        while w != 100 and time.time() - t0 < 10 * D.SLOW:
            time.sleep(0.05)
            w = weight(ap)
        check(w == 100, "weight %d after the requests ended" % w)
        print("  weights while busy: min %d of %d checks" % (min(seen), len(seen)))
    finally:
        check(d.stop() == 0, "exit code")


def test_draining(exe):
    ap = D.free_port()
    d = D.Daemon(exe, args=["--agent-port", str(ap), "--n-ctx", "512", "--drain-timeout-s", "20"])
    try:
        s = D.post_stream(d, stream_req(480), 30)
        D.first_event(s)
        d.signal(signal.SIGTERM)
        w = None
        t0 = time.time()
        while time.time() - t0 < 5 * D.SLOW:
            try:
                w = weight(ap)
            except OSError:
                if d.proc.poll() is not None:
                    break  # drained already and gone: the stream was short
                continue
            if w == 0:
                break
            time.sleep(0.01)
        check(w == 0 or d.proc.poll() is not None, "weight %r while draining" % w)
        D.read_to_close(s)
        s.close()
        check(d.proc.wait(30 * D.SLOW) == 0, "exit code after the drain")
    finally:
        d.stop()


def test_port_taken(exe):
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen(1)
    ap = busy.getsockname()[1]
    try:
        d = D.Daemon(exe, args=["--agent-port", str(ap)], wait=False)
        rc = d.proc.wait(60 * D.SLOW)
        check(rc != 0, "daemon started with its agent port taken")
        check("agent_port" in d.log(), "no agent_port in the message: %r" % d.log()[-500:])
    finally:
        busy.close()
    port = D.free_port()
    d = D.Daemon(exe, args=["--port", str(port), "--agent-port", str(port)], wait=False)
    rc = d.proc.wait(60 * D.SLOW)
    check(rc != 0, "agent_port == port accepted")
    check("agent_port" in d.log(), "no agent_port in the message: %r" % d.log()[-500:])


if __name__ == "__main__":
    D.run([test_idle, test_many_idle_agents, test_weight_follows_load, test_draining,
           test_port_taken], sys.argv)
