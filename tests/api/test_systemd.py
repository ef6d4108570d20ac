#!/usr/bin/env python3
"""test_systemd -- the installed unit: the directives ROBUSTNESS.md asks for, and
`systemd-analyze security --offline=yes` exposure <= 2.0 (skipped, 77, when
systemd-analyze is not there).
usage: test_systemd.py <inferd.service> [sysusers] [tmpfiles]
"""
import re
import shutil
import subprocess
import sys

unit = sys.argv[1]
text = open(unit).read()
fails = 0


def check(cond, what):
    global fails
    if not cond:
        print("FAIL", what)
        fails += 1


lines = {l.strip() for l in text.splitlines()}
for d in ("Type=notify", "NotifyAccess=main", "WatchdogSec=30s", "TimeoutStopSec=60s",
          "KillMode=mixed", "Restart=on-failure", "RestartPreventExitStatus=78", "StateDirectory=inferd", "CacheDirectory=inferd",
          "NoNewPrivileges=yes", "CapabilityBoundingSet=", "ProtectSystem=strict",
          "ProtectHome=yes", "PrivateTmp=yes", "DevicePolicy=closed",
          "DeviceAllow=/dev/nvidiactl rw", "DeviceAllow=/dev/nvidia0 rw",
          "DeviceAllow=/dev/nvidia-uvm rw", "RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6",
          "SystemCallFilter=@system-service", "LockPersonality=yes", "ProtectKernelTunables=yes",
          "ProtectKernelModules=yes", "ProtectKernelLogs=yes", "ProtectControlGroups=yes",
          "UMask=0077", "Environment=CUDA_CACHE_PATH=/var/cache/inferd/cuda"):
    check(d in lines, "missing %r" % d)
check(not any(l.startswith("PrivateDevices=yes") for l in lines), "PrivateDevices=yes hides the GPU")
check(any(l.startswith("ReadOnlyPaths=") for l in lines), "no ReadOnlyPaths for the models")
m = re.search(r"^ExecStart=(\S+) serve --config (\S+)$", text, re.M)
check(m is not None and "@" not in m.group(0), "ExecStart not configured: %r" % (m and m.group(0)))
for f in sys.argv[2:]:
    check("inferd" in open(f).read(), "%s does not mention inferd" % f)

sa = shutil.which("systemd-analyze")
if not sa:
    print("skip: systemd-analyze not installed (directives checked: %d failures)" % fails)
    sys.exit(1 if fails else 77)
r = subprocess.run([sa, "security", "--offline=yes", unit], capture_output=True, text=True, timeout=60)
m = re.search(r"Overall exposure level for \S+: ([0-9.]+)", r.stdout + r.stderr)
check(m is not None, "no exposure level in: %r" % (r.stdout[-500:] + r.stderr[-500:]))
if m:
    level = float(m.group(1))
    print("systemd-analyze security exposure: %.1f" % level)
    check(level <= 2.0, "exposure %.1f > 2.0" % level)
print("FAIL" if fails else "ok")
sys.exit(1 if fails else 0)
