#!/usr/bin/env python3
"""test_device_lost -- a sticky device error (ROBUSTNESS 35): the requests in
flight fail with a 5xx naming it, /health and new requests answer 503, the
daemon drains and exits non-zero by itself within a bounded time (systemd's
Restart=on-failure then gives it a new CUDA context), and the log names the
device error. The loss comes from the engine's test hook
INFERD_FAULT_DEVICE_LOST (engine/fault.h, test builds only: a step and every
later one report INF_EDEVICE, as a CUDA backend does after
cudaErrorIllegalAddress and the like), so it runs on every backend: the CPU
in CI, the GPU with INFERD_BACKEND=cuda (tests/cuda/run-on-gpu.sh).
usage: test_device_lost.py <inferd binary>
"""
import json
import os
import socket
import sys
import tempfile
import threading
import time

sys.dont_write_bytecode = True  # keep the source tree clean
import daemon as D  # noqa: E402
from daemon import check

REQ = {"model": "stories260K", "prompt": "Once upon a time", "max_tokens": 8, "temperature": 0}


def has_hooks(d):
    if "fault hook:" in d.log():
        return True
    print("skip: this build has no fault hooks (meson -Dfault_hooks)")
    return False


def start_stream(d):
    req = {"model": "stories260K", "prompt": "Once upon a time", "max_tokens": 480,
           "temperature": 0, "stream": True, "ignore_eos": True}
    s = D.post_stream(d, req, 30 * D.SLOW)
    return s, D.first_event(s)


def test_device_lost_in_flight(exe):
    """Two requests in flight (a stream and a plain one) when the device goes;
    a half-sent request keeps the drain open so that /health and a new
    request can be asked meanwhile."""
    trig = tempfile.mktemp(prefix="inferd-lost-")
    stall = tempfile.mktemp(prefix="inferd-stall-")
    drain_s = 3
    # the stall hook holds the engine between two steps while the test sets
    # the scene, so that the loss comes while both requests are in flight
    d = D.Daemon(exe, args=["--n-ctx", "512", "--drain-timeout-s", str(drain_s)],
                 env={"INFERD_FAULT_DEVICE_LOST": trig, "INFERD_FAULT_ENGINE_STALL": stall})
    try:
        if not has_hooks(d):
            return
        st, _, _ = d.request("GET", "/health")
        check(st == 200, "/health before: %d" % st)
        s, buf = start_stream(d)
        open(stall, "w").close()
        plain = {}

        def run_plain():
            req = dict(REQ, max_tokens=480, ignore_eos=True)
            plain["resp"] = d.post("/v1/completions", req, timeout=60 * D.SLOW)

        th = threading.Thread(target=run_plain)
        th.start()
        # holds the drain open (n_reqs > 0) until drain_timeout + 5 s
        held = socket.create_connection(("127.0.0.1", d.port), timeout=30)
        held.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
                     b"Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{")
        t0 = time.time()
        while time.time() - t0 < 10 * D.SLOW and d.metrics().get("inferd_waiting_requests", 1) < 1:
            time.sleep(0.01)  # the plain request is queued behind the stalled engine
        time.sleep(0.1)
        open(trig, "w").close()
        os.unlink(stall)
        t_lost = time.time()

        body = D.read_to_close(s, buf)
        s.close()
        head, rest = body.split(b"\r\n\r\n", 1)
        ev = D.sse_events(D.dechunk(rest) if b"chunked" in head.lower() else rest)
        errs = [json.loads(e)["error"] for e in ev if e != "[DONE]" and "error" in json.loads(e)]
        check(errs, "the stream in flight got no error: %r" % ev[-3:])
        check("device" in errs[-1].get("message", ""), "stream error does not say why: %r" % errs)
        th.join(60 * D.SLOW)
        st, _, b = plain["resp"]
        check(st == 503, "the plain request in flight: status %d, %r" % (st, b[:300]))
        msg = json.loads(b)["error"]["message"]
        check("device" in msg, "503 does not say why: %r" % msg)

        st, _, b = d.request("GET", "/health")
        check(st == 503 and b"device_error" in b, "/health after the loss: %d %r" % (st, b))
        e = D.expect_error(d.post("/v1/completions", REQ), 503)
        check("device" in e["message"], "new request: %r" % e)

        rc, _ = d.wait_exit(drain_s + 5 + 15 * D.SLOW, "after the device was lost")
        held.close()
        check(rc != 0, "exit status %d after a lost device" % rc)
        log = d.log()
        check("the device is lost (device error)" in log, "the log does not name it:\n" + log[-3000:])
        check("exit 1" in log, "no exit line:\n" + log[-2000:])
        print("exited %d, %.1f s after the loss" % (rc, time.time() - t_lost))
    finally:
        d.close()
        for p in (trig, stall):
            if os.path.exists(p):
                os.unlink(p)


def test_device_lost_exits_promptly(exe):
    """Nothing holds the drain: the failed request gets its 503 and the
    daemon is gone within seconds."""
    # steps 1-2 are the prewarm request's; step 3 is the first request's prefill
    d = D.Daemon(exe, args=["--n-ctx", "256"], env={"INFERD_FAULT_DEVICE_LOST": "3"})
    try:
        if not has_hooks(d):
            return
        e = D.expect_error(d.post("/v1/completions", REQ), 503)
        check("device" in e["message"], "503 does not say why: %r" % e)
        rc, dt = d.wait_exit(10 * D.SLOW, "after the device was lost")
        check(rc == 1, "exit status %d after a lost device" % rc)
        check("fails with INF_EDEVICE" in d.log(), d.log()[-2000:])
        print("exited %d, %.2f s after the failed request" % (rc, dt))
    finally:
        d.close()


def main():
    D.run([test_device_lost_exits_promptly, test_device_lost_in_flight], sys.argv)


if __name__ == "__main__":
    main()
