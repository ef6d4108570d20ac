#!/usr/bin/env python3
"""bench/sass_census.py — the SASS census of one kernel (the seeds' method):
its opcodes counted over the whole function and over its largest loop
(the instructions between a backward branch's target and the branch).

    zcat wgrs.sass.gz | python3 bench/sass_census.py mmqr_halves
    python3 bench/sass_census.py mmq6w_kernelILb1 wgrs.sass

The input is `cuobjdump -sass` text (bench/wgrs-call.sh leaves it in
$OUT as wgrs.sass.gz); the first function whose name contains the pattern
is counted. Opcodes are the mnemonic up to its first dot (IMAD.WIDE ->
IMAD); predicated instructions count as their opcode."""
import collections
import re
import sys


def functions(lines):
    name, body = None, []
    for ln in lines:
        m = re.search(r"Function : (\S+)", ln)
        if m:
            if name:
                yield name, body
            name, body = m.group(1), []
        elif name:
            body.append(ln)
    if name:
        yield name, body


INS = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)([^;]*);")


def parse(body):
    out = []
    for ln in body:
        m = INS.search(ln)
        if m:
            out.append((int(m.group(1), 16), m.group(3), m.group(4)))
    return out


def census(ins):
    return collections.Counter(op.split(".")[0] for _, op, _ in ins)


def largest_loop(ins):
    """(start, end) offsets of the backward branch spanning most code"""
    best = None
    for off, op, args in ins:
        if op.startswith("BRA"):
            m = re.search(r"0x([0-9a-f]+)", args)
            if m:
                tgt = int(m.group(1), 16)
                if tgt <= off and (best is None or off - tgt > best[1] - best[0]):
                    best = (tgt, off)
    return best


def show(title, c, top=40):
    total = sum(c.values())
    print(f"{title}: {total} instructions")
    for op, n in c.most_common(top):
        print(f"  {op:10s} {n:6d}  {100.0 * n / total:5.1f}%")


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    pat = sys.argv[1]
    src = open(sys.argv[2]) if len(sys.argv) > 2 else sys.stdin
    for name, body in functions(src):
        if pat in name:
            ins = parse(body)
            print(name)
            show("function", census(ins))
            lp = largest_loop(ins)
            if lp:
                inner = [i for i in ins if lp[0] <= i[0] <= lp[1]]
                show(f"largest loop 0x{lp[0]:x}-0x{lp[1]:x}", census(inner))
            return
    sys.exit(f"sass_census: no function matching {pat}")


if __name__ == "__main__":
    main()
