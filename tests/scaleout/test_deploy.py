#!/usr/bin/env python3
"""test_deploy -- the shipped scale-out files are valid and agree:

  deploy/haproxy/haproxy.cfg        `haproxy -c`
  deploy/prometheus/prometheus.yml  `promtool check config` (+ its rule file)
  deploy/prometheus/*rules*.yml     `promtool check rules`, `promtool test rules`
  both                              the same daemons (HAProxy's servers are
                                    Prometheus' inferd targets)
  inferd@.service                   inferd.service's directives (hardening)
                                    plus the per-GPU ones; systemd-analyze
                                    security exposure <= 2.0

A tool that is not installed skips its part; nothing to run at all is a
skip (77).
usage: test_deploy.py <built inferd.service> <built inferd@.service>
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.environ.get("INFERD_SRC") or os.path.join(HERE, "..", "..")
HAPROXY_CFG = os.path.join(SRC, "deploy", "haproxy", "haproxy.cfg")
PROM_DIR = os.path.join(SRC, "deploy", "prometheus")
fails = 0
ran = 0


def check(cond, what):
    global fails
    if not cond:
        print("FAIL", what)
        fails += 1
    return cond


def tool(name, *extra):
    for p in (shutil.which(name),) + extra:
        if p and os.path.exists(p):
            return p
    print("skip: %s not installed" % name)
    return None


def run(cmd, cwd=None):
    global ran
    ran += 1
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=cwd, timeout=120)
    out = r.stdout + r.stderr
    check(r.returncode == 0, "%s failed (%d):\n%s" % (" ".join(cmd), r.returncode, out[-2000:]))
    return out


haproxy = tool("haproxy", "/usr/sbin/haproxy")
if haproxy:
    out = run([haproxy, "-c", "-f", HAPROXY_CFG])
    check("WARNING" not in out, "haproxy -c warns:\n%s" % out)

promtool = tool("promtool", "/usr/bin/promtool")
if promtool:
    run([promtool, "check", "config", "prometheus.yml"], cwd=PROM_DIR)
    run([promtool, "check", "rules", "inferd-rules.yml"], cwd=PROM_DIR)
    out = run([promtool, "test", "rules", "inferd-rules.test.yml"], cwd=PROM_DIR)
    check("SUCCESS" in out, "promtool test rules: %s" % out)

# the balancer and the scraper know the same daemons
servers = {}
backend = None
for line in open(HAPROXY_CFG):
    m = re.match(r"\s*backend\s+(\S+)", line)
    if m:
        backend = m.group(1)
    m = re.match(r"\s*server\s+\S+\s+(\S+)", line)
    if m:
        servers.setdefault(backend, set()).add(m.group(1))
check(len(servers) == 2 and len(set(map(frozenset, servers.values()))) == 1,
      "the two HAProxy backends list different daemons: %r" % servers)
prom = open(os.path.join(PROM_DIR, "prometheus.yml")).read()
job = prom.split("job_name: inferd", 1)[1].split("job_name:", 1)[0]
targets = set(re.findall(r'targets: \["([^"]+)"\]', job))
lb = next(iter(servers.values()), set())
check(targets == lb, "Prometheus targets %r != HAProxy servers %r" % (targets, lb))

# the template unit: the single unit's directives, plus the per-GPU ones
if len(sys.argv) >= 3:
    single = open(sys.argv[1]).read()
    tmpl = open(sys.argv[2]).read()

    def directives(text):
        return {l.strip() for l in text.splitlines() if l.strip() and not l.startswith("#")}

    own = {"Description=", "Documentation=", "ExecStart="}
    missing = [d for d in directives(single) - directives(tmpl)
               if not any(d.startswith(o) for o in own)]
    check(not missing, "inferd@.service lacks inferd.service's %r" % missing)
    t = directives(tmpl)
    check("Environment=CUDA_VISIBLE_DEVICES=%i" in t, "no CUDA_VISIBLE_DEVICES=%i")
    check(any(re.match(r"EnvironmentFile=/\S+/inferd@%i\.env$", d) for d in t),
          "no per-instance EnvironmentFile")
    check(any(re.match(r"ExecStart=/\S+/inferd serve --config /\S+ \$INFERD_OPTS$", d)
              for d in t), "ExecStart does not take $INFERD_OPTS")
    check(not re.search(r"@[a-z_]+@", tmpl), "an unsubstituted @var@ is left")
    sa = tool("systemd-analyze")
    if sa:
        d = tempfile.mkdtemp()
        try:
            inst = os.path.join(d, "inferd@0.service")  # an instance of the template
            shutil.copy(sys.argv[2], inst)
            out = run([sa, "security", "--offline=yes", inst])
            m = re.search(r"Overall exposure level for \S+: ([0-9.]+)", out)
            if check(m is not None, "no exposure level: %r" % out[-500:]):
                print("inferd@0.service exposure %s" % m.group(1))
                check(float(m.group(1)) <= 2.0, "exposure %s > 2.0" % m.group(1))
        finally:
            shutil.rmtree(d)
    ran += 1

if not ran:
    print("skip: nothing to check")
    sys.exit(77)
print("FAIL" if fails else "ok")
sys.exit(1 if fails else 0)
