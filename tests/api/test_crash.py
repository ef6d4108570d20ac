#!/usr/bin/env python3
"""test_crash -- a fatal signal in the daemon leaves its report in the log
(daemon/crash.h): the signal, the thread, the faulting address and the stack
(a line a frame), then the signal's default action, so the exit status still
says "killed by SIGSEGV" to a shell, systemd and this harness. Two cases:
  - a real fault on the engine thread: the test hook INFERD_FAULT_CRASH
    (engine/fault.h, test builds only) makes the first request's step write
    through address 0x10; the report must name that address, a thread other
    than the main one, and (where addr2line is installed) the hook's function
    among its frames;
  - a SIGABRT sent from outside (kill(2)): the report says who sent it.
A sanitizer build keeps the sanitizer's own handler (its report says more):
there the test checks that report of the fault and, for the sent SIGABRT,
the exit status.
usage: test_crash.py <inferd binary>
"""
import os
import re
import shutil
import signal
import subprocess
import sys

sys.dont_write_bytecode = True  # keep the source tree clean
import daemon as D  # noqa: E402
from daemon import check

REQ = {"model": "stories260K", "prompt": "Once upon a time", "max_tokens": 8, "temperature": 0}
FRAME = re.compile(r"^<3>error:   #(\d+) (\S+?)\((\S*?)\)\[(0x[0-9a-f]+)\]$", re.M)


def sanitized(exe):
    try:
        out = subprocess.run(["ldd", exe], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return False
    return "libasan" in out or "libtsan" in out


def frames(log):
    return FRAME.findall(log)


def names(exe, offsets):
    """addr2line's function names for the binary's own frames (empty when
    addr2line is not installed)."""
    if not shutil.which("addr2line") or not offsets:
        return []
    out = subprocess.run(["addr2line", "-f", "-e", exe] + offsets, capture_output=True, text=True,
                         timeout=30).stdout.splitlines()
    return out[0::2]


def test_crash_engine_fault(exe):
    # steps 1-2 are the prewarm request's; step 3 is the first request's prefill
    d = D.Daemon(exe, args=["--n-ctx", "256"], env={"INFERD_FAULT_CRASH": "3"})
    try:
        if "fault hook:" not in d.log():
            print("skip: this build has no fault hooks (meson -Dfault_hooks)")
            return
        try:
            d.post("/v1/completions", REQ, timeout=10 * D.SLOW)
        except Exception:  # the connection dies with the daemon: no answer is the expected one
            pass
        rc, _ = d.wait_exit(10 * D.SLOW, "after the fatal signal")
        log = d.log()
        if sanitized(exe):  # the sanitizer's report, its exit status
            check(rc != 0 and "SEGV on unknown address 0x000000000010" in log,
                  "exit status %s and no sanitizer report of the fault:\n%s" % (rc, log[-3000:]))
            print("sanitizer build: its own report of the fault")
            return
        check(rc == -signal.SIGSEGV, "exit status %s, not killed by SIGSEGV:\n%s" % (rc, log[-3000:]))
        m = re.search(r"<3>error: fatal signal 11 \(SIGSEGV\) in thread (\d+) of pid (\d+), "
                      r"address 0x10, code \d+;", log)
        check(m, "no crash report naming the fault:\n%s" % log[-3000:])
        check(m.group(1) != m.group(2), "the fault was on the engine thread, not the main one: %s" % m.group(0))
        check(int(m.group(2)) == d.proc.pid, "pid %s is not the daemon's %d" % (m.group(2), d.proc.pid))
        fr = frames(log)
        check(len(fr) >= 3, "%d stack frames in the report:\n%s" % (len(fr), log[-3000:]))
        check([int(f[0]) for f in fr] == list(range(len(fr))), "frames not numbered 0..n-1")
        own = [f[2] for f in fr if os.path.basename(f[1]) == os.path.basename(exe) and f[2].startswith("+0x")]
        check(own, "no frame in the daemon's own binary:\n%s" % log[-3000:])
        nm = names(exe, own)
        if nm and not all(n == "??" for n in nm):
            check("fault_step_failure" in nm, "addr2line names %s, not the hook's function" % nm)
        check("this is a bug: please report these lines" in log, "no closing line")
        print("report: %s, %d frames, named %s" % (m.group(0)[10:70], len(fr), nm[:4]))
    finally:
        d.close()


def test_crash_sent_abort(exe):
    d = D.Daemon(exe, args=["--n-ctx", "256"])
    try:
        d.signal(signal.SIGABRT)
        rc, _ = d.wait_exit(10 * D.SLOW, "after the fatal signal")
        log = d.log()
        check(rc == -signal.SIGABRT, "exit status %s, not killed by SIGABRT:\n%s" % (rc, log[-3000:]))
        if sanitized(exe):
            return
        m = re.search(r"<3>error: fatal signal 6 \(SIGABRT\) in thread \d+ of pid (\d+), sent by pid (\d+);", log)
        check(m, "no crash report naming the sender:\n%s" % log[-3000:])
        check(int(m.group(2)) == os.getpid(), "sender %s, not this test (%d)" % (m.group(2), os.getpid()))
        check(len(frames(log)) >= 2, "no stack in the report:\n%s" % log[-3000:])
    finally:
        d.close()


def main():
    D.run([test_crash_engine_fault, test_crash_sent_abort], sys.argv)


if __name__ == "__main__":
    main()
