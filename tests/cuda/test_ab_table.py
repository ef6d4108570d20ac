#!/usr/bin/env python3
"""ab_table.py (the GPU A/B summary) on two made-up rounds of two variants:
every figure lands in its cell in round order, the ratio is the last
variant's median over the first's, a variant not asked for is left out, and
a directory without tables is an error (exit 1)."""
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
OP = """backend cuda; ceilings: ...
| type | shape (ne0 x ne1) | n | µs | TOPS |
|---|---|---:|---:|---:|
| q4_K | llama3-ffn-down 14336x4096 | 512 | %s | 1.0 |
"""
MODEL = """| model | backend | test | t/s |
|---|---|---:|---:|
| q7.gguf | cuda | pp512 | %s ± 3 |
"""


def main():
    fails = 0

    def check(cond, what):
        nonlocal fails
        if not cond:
            print("FAIL:", what)
            fails += 1

    with tempfile.TemporaryDirectory() as d:
        figures = {("prev", 1): ("300", "11000"), ("prev", 2): ("302", "11010"),
                   ("bin", 1): ("250", "12000"), ("bin", 2): ("251", "12020"),
                   ("other", 1): ("999", "1")}
        for (v, r), (us, tps) in figures.items():
            with open(os.path.join(d, "%s.r%d.op.txt" % (v, r)), "w") as f:
                f.write(OP % us)
            with open(os.path.join(d, "%s.r%d.model.txt" % (v, r)), "w") as f:
                f.write(MODEL % tps)
        p = subprocess.run([sys.executable, os.path.join(HERE, "ab_table.py"), d, "prev", "bin"],
                           capture_output=True, text=True)
        out = p.stdout
        check(p.returncode == 0, "exit %d: %s" % (p.returncode, p.stderr))
        check("| q4_K llama3-ffn-down 512 | 300 / 302 | 250 / 251 | %.3f |" % (250.5 / 301) in out,
              "op row:\n" + out)
        check("| q7.gguf pp512 | 11000 / 11010 | 12000 / 12020 | %.3f |" % (12010 / 11005) in out,
              "model row:\n" + out)
        check("999" not in out and "| prev | bin | bin/prev |" in out, "columns:\n" + out)
        # the F16 path's rows ("q4_K/f16", "/f16r" with a resident copy) are
        # the same product as the int8 row of the other variant
        for r, (typ, us) in enumerate((("q4_K/f16", "150"), ("q4_K/f16r", "100")), 1):
            with open(os.path.join(d, "res.r%d.op.txt" % r), "w") as f:
                f.write((OP % us).replace("| q4_K |", "| %s |" % typ))
        p = subprocess.run([sys.executable, os.path.join(HERE, "ab_table.py"), d, "prev", "res"],
                           capture_output=True, text=True)
        check("| q4_K llama3-ffn-down 512 | 300 / 302 | 150 / 100 | %.3f |" % (125 / 301) in p.stdout,
              "f16 / f16r rows:\n" + p.stdout)
        empty = os.path.join(d, "empty")
        os.mkdir(empty)
        p = subprocess.run([sys.executable, os.path.join(HERE, "ab_table.py"), empty, "prev"],
                           capture_output=True, text=True)
        check(p.returncode == 1 and "no bench tables" in p.stderr, "empty dir: %d %r" % (p.returncode, p.stderr))
    print("ab_table: %s" % ("ok" if not fails else "%d failures" % fails))
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
