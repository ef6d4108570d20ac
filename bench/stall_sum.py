#!/usr/bin/env python3
"""bench/stall_sum.py CSV [N] — an ncu source-page export (ncu -i R --page
source --csv --print-source sass; bench/diag-lib.sh's diag_stalls writes it
beside the report and runs this) summed by SASS opcode: each opcode's share of the warp
stall samples (all and not-issued) and of the executed instructions, then
the N instructions with most samples with every per-reason column that has
samples. Why: the trace build's marks perturb the planes kernels by 12-19%
(bench/RESULTS.md session 61); the samples of the product kernel do not."""
import csv, sys, collections

rows = list(csv.reader(open(sys.argv[1], errors="replace")))
n_top = int(sys.argv[2]) if len(sys.argv) > 2 else 30
hdr = next((i for i, r in enumerate(rows) if any("Sampl" in c for c in r)), None)
if hdr is None:
    print("no sampling columns:", rows[:2])
    sys.exit(0)
h = rows[hdr]
body = [r for r in rows[hdr + 1:] if len(r) == len(h)]


def num(x):
    try:
        return float(x.replace(",", ""))
    except ValueError:
        return 0.0


def col(*keys):
    for k in keys:
        for i, c in enumerate(h):
            if c.startswith(k):
                return i
    return None


c_all = col("Warp Stall Sampling (All", "Warp Stall Sampling")
c_ni = col("Warp Stall Sampling (Not")
c_ex = col("Instructions Executed", "Warp Instructions Executed")
c_src = next((i for i, c in enumerate(h) if c in ("Source", "SASS")), 1)
c_adr = col("Address", "# Address")
print("columns:", " | ".join(h)[:1500])
tot = sum(num(r[c_all]) for r in body) or 1.0
ex_tot = sum(num(r[c_ex]) for r in body) if c_ex is not None else 0
by = collections.defaultdict(lambda: [0.0, 0.0, 0.0])
for r in body:
    s = r[c_src].strip()
    op = s.split()[0] if s else "?"
    if op.startswith("@"):
        op = s.split()[1] if len(s.split()) > 1 else op
    # WARPGROUP.DEPBAR (the products' wait) / .ARRIVE, SYNCS.PHASECHK (an
    # mbarrier wait) / .ARRIVE keep their second part: they are different waits
    op = ".".join(op.split(".")[:2]) if op.startswith(("WARPGROUP.", "SYNCS.")) else op.split(".")[0]
    b = by[op]
    b[0] += num(r[c_all])
    b[1] += num(r[c_ni]) if c_ni is not None else 0
    b[2] += num(r[c_ex]) if c_ex is not None else 0
print("instructions: %d, samples: %d, executed: %d" % (len(body), tot, ex_tot))
print("%-20s %8s %8s %8s" % ("opcode", "all%", "notiss%", "exec%"))
for op, b in sorted(by.items(), key=lambda kv: -kv[1][0])[:25]:
    print("%-20s %8.2f %8.2f %8.2f" % (op, 100 * b[0] / tot, 100 * b[1] / tot, 100 * b[2] / (ex_tot or 1)))
reason = [i for i, c in enumerate(h) if i not in (c_all, c_ni, c_ex, c_src, c_adr) and
          ("stall" in c.lower() or "Samples" in c)]
for r in sorted(body, key=lambda r: -num(r[c_all]))[:n_top]:
    extra = ", ".join("%s %d" % (h[i][:28], num(r[i])) for i in reason if num(r[i]) > 0.02 * num(r[c_all]))
    print("%6.2f%% %s %-60s %s" % (100 * num(r[c_all]) / tot, r[c_adr] if c_adr is not None else "",
                                   r[c_src].strip()[:60], extra[:300]))
