#!/usr/bin/env python3
"""Sums ncu's per-kernel durations by kernel name (dev/cuda/*_call.sh: one frame profiled with
`ncu --metrics gpu__time_duration.sum --csv`), largest first.

    python3 dev/cuda/ncu_by_kernel.py NCU.csv [TITLE]
"""
import collections
import csv
import sys

SCALE = {"nsecond": 1e-3, "usecond": 1.0, "msecond": 1e3, "ns": 1e-3, "us": 1.0, "ms": 1e3}  # -> us


def read_launches(path):
    """ncu's `--csv --metrics ...` output as {launch ID: {"kernel": short name, metric: value}} in launch order
    (durations in us; the short name without template arguments, parameters or "void")."""
    rows = [r for r in csv.reader(l for l in open(path) if l.startswith('"'))]
    h = rows[0]
    ii, ki, ni, ui, vi = (h.index(x) for x in ("ID", "Kernel Name", "Metric Name", "Metric Unit", "Metric Value"))
    by = collections.OrderedDict()
    for r in rows[1:]:
        try:
            v = float(r[vi].replace(",", ""))
        except ValueError:
            continue
        if r[ni] == "gpu__time_duration.sum":
            v *= SCALE.get(r[ui], 1.0)
        d = by.setdefault(int(r[ii]), {"kernel": r[ki].split("(")[0].split("<")[0].replace("void ", "").strip()})
        d[r[ni]] = v
    return by


def main():
    rows = [r for r in csv.reader(l for l in open(sys.argv[1]) if l.startswith('"'))]
    h = rows[0]
    ki, ni, ui, vi = h.index("Kernel Name"), h.index("Metric Name"), h.index("Metric Unit"), h.index("Metric Value")
    agg = collections.defaultdict(lambda: [0, 0.0])
    for r in rows[1:]:
        if r[ni] != "gpu__time_duration.sum":  # other metrics of the same launches (ncu_roles.py's CSVs)
            continue
        try:
            v = float(r[vi].replace(",", "")) * SCALE.get(r[ui], 1.0)
        except ValueError:
            continue
        a = agg[r[ki].split("(")[0]]
        a[0] += 1
        a[1] += v
    title = sys.argv[2] if len(sys.argv) > 2 else "one frame"
    print(f"ncu {title}: {sum(a[0] for a in agg.values())} kernels, "
          f"{sum(a[1] for a in agg.values()) / 1e3:.3f} ms of kernel time")
    for k, (n, us) in sorted(agg.items(), key=lambda x: -x[1][1]):
        print(f"  {k[:60]:<60} {n:5d} launches {us / 1e3:8.3f} ms  {us / n:8.2f} us each")


if __name__ == "__main__":
    main()
