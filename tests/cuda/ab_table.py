#!/usr/bin/env python3
"""ab_table — one markdown table from the interleaved A/B runs of
run-on-gpu.sh's `ab` phase.

Reads DIR/<variant>.r<round>.op.txt (`inferd bench --op` tables) and
DIR/<variant>.r<round>.model.txt (`inferd bench --model` tables) and prints,
per product (type, shape, n) and per model test (pp512, tg128, ...), each
variant's figure of every round side by side ("a / b"), the variants in the
order given, and the ratio of the last variant to the first over the rounds'
medians. Absolute times of different calls are not comparable; these are
within one call.

    ab_table.py DIR prev bin bn64 > ab.md
"""
import os
import re
import statistics
import sys


def rows(path):
    """the data rows of the markdown tables in one bench output"""
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            if not line.startswith("| ") or line.startswith("|---"):
                continue
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if cells and cells[0] in ("type", "model"):
                continue  # a header
            yield cells


def collect(d, variants):
    op, model = {}, {}
    for name in sorted(os.listdir(d)):
        m = re.match(r"(.+)\.r(\d+)\.(op|model)\.txt$", name)
        if not m or m.group(1) not in variants:
            continue
        v, kind = m.group(1), m.group(3)
        for c in rows(os.path.join(d, name)):
            try:
                if kind == "op" and len(c) >= 4:
                    # "q4_K/f16" (/f16r: a resident copy): the F16 path of
                    # batch_invariant = false, the same product as "q4_K"
                    # in the other variant
                    key, val = (re.sub(r"/f16r?$", "", c[0]), c[1].split()[0], c[2]), float(c[3])
                    op.setdefault(key, {}).setdefault(v, []).append(val)
                elif kind == "model" and len(c) >= 4:
                    key, val = (c[0], c[2]), float(c[3].split()[0])
                    model.setdefault(key, {}).setdefault(v, []).append(val)
            except ValueError:
                continue
    return op, model


def table(title, keys, data, variants, lower_better):
    out = ["| %s | %s | %s/%s |" % (title, " | ".join(variants), variants[-1], variants[0]),
           "|---|" + "---:|" * (len(variants) + 1)]
    for k in keys:
        cells, med = [], {}
        for v in variants:
            xs = data[k].get(v, [])
            cells.append(" / ".join("%g" % x for x in xs) if xs else "–")
            if xs:
                med[v] = statistics.median(xs)
        r = "–"
        if variants[0] in med and variants[-1] in med and med[variants[0]]:
            r = "%.3f" % (med[variants[-1]] / med[variants[0]])
        out.append("| %s | %s | %s |" % (" ".join(k), " | ".join(cells), r))
    note = "µs: lower is better" if lower_better else "tok/s: higher is better"
    return "\n".join(out) + "\n\n(%s)\n" % note


def main(argv):
    if len(argv) < 3:
        sys.stderr.write(__doc__)
        return 2
    d, variants = argv[1], argv[2:]
    op, model = collect(d, variants)
    if not op and not model:
        sys.stderr.write("ab_table: no bench tables for %s in %s\n" % (" ".join(variants), d))
        return 1
    if op:
        print(table("type shape n (µs)", list(op), op, variants, True))
    if model:
        print(table("model test (tok/s)", list(model), model, variants, False))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
