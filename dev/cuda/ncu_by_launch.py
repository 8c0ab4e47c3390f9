#!/usr/bin/env python3
"""ncu metrics a launch (`ncu --csv --metrics ...` of one kernel over a frame), one line a launch with its pass and
layer (launch i of a kernel that runs LAYERS times a pass: pass i // LAYERS, layer i % LAYERS), then the sums.

    python3 dev/cuda/ncu_by_launch.py NCU.csv [LAYERS]
"""
import collections
import csv
import sys

from ncu_by_kernel import SCALE  # ncu's duration units -> us


def main():
    rows = [r for r in csv.reader(l for l in open(sys.argv[1]) if l.startswith('"'))]
    layers = int(sys.argv[2]) if len(sys.argv) > 2 else 1
    h = rows[0]
    ii, ni, ui, vi = h.index("ID"), h.index("Metric Name"), h.index("Metric Unit"), h.index("Metric Value")
    by = collections.OrderedDict()
    for r in rows[1:]:
        try:
            v = float(r[vi].replace(",", ""))
        except ValueError:
            continue
        if r[ni] == "gpu__time_duration.sum":
            v *= SCALE.get(r[ui], 1.0)
        by.setdefault(int(r[ii]), {})[r[ni]] = v
    names = sorted({n for m in by.values() for n in m})
    short = {n: n.split("__")[1].split(".")[0] if "__" in n else n for n in names}
    print("launch pass layer " + " ".join(short[n] for n in names))
    tot = 0.0
    for i, (_, m) in enumerate(by.items()):
        tot += m.get("gpu__time_duration.sum", 0.0)
        print(f"{i} {i // layers} {i % layers} " + " ".join(f"{m.get(n, float('nan')):.2f}" for n in names))
    print(f"{len(by)} launches, {tot:.1f} us of kernel time")


if __name__ == "__main__":
    main()
