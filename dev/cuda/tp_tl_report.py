#!/usr/bin/env python3
"""The throughput executor's real kernel timeline by kernel and linear kind (dev/cuda/tp_tl.c's CSV): launches,
and a launch's mean: hop (the kernel before it ended -> this one's first block past griddepcontrol.wait: the chain's
dependency latency), body (past the wait -> its last block's end), early (its first block's start -> past the
wait: how far programmatic dependent launch brought it forward); the frame's span and the sums.

    python3 dev/cuda/tp_tl_report.py TL.csv
"""
import collections
import csv
import sys

from ncu_roles import roles


def main():
    rows = list(csv.DictReader(open(sys.argv[1])))
    ks = [r["kernel"] for r in rows]
    t = [(int(r["start_ns"]), int(r["wait_ns"]), int(r["end_ns"])) for r in rows]
    if not rows or any(x[0] == 0 or x[2] == 0 for x in t):
        print(f"{sum(1 for x in t if x[0] == 0 or x[2] == 0)} of {len(t)} launches without stamps")
    agg = collections.OrderedDict()
    prev_end = None
    for k, role, (s, w, e) in zip(ks, roles(ks), t):
        w = w or s
        a = agg.setdefault((k, role), [0, 0.0, 0.0, 0.0])
        a[0] += 1
        a[1] += 0.0 if prev_end is None else (w - prev_end) / 1e3
        a[2] += (e - w) / 1e3
        a[3] += (w - s) / 1e3
        prev_end = e if prev_end is None else max(prev_end, e)
    span = (max(x[2] for x in t) - min(x[0] for x in t)) / 1e3
    hop = sum(a[1] for a in agg.values())
    body = sum(a[2] for a in agg.values())
    print(f"one frame: {len(t)} launches, span {span / 1e3:.3f} ms; hops summed {hop / 1e3:.3f} ms, bodies summed "
          f"{body / 1e3:.3f} ms")
    print("| kernel | role | launches | hop us | body us | early us | hop + body, ms a frame |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for (k, r), (n, hp, bd, ea) in sorted(agg.items(), key=lambda x: -(x[1][1] + x[1][2])):
        print(f"| {k} | {r} | {n} | {hp / n:.2f} | {bd / n:.2f} | {ea / n:.2f} | {(hp + bd) / 1e3:.3f} |")


if __name__ == "__main__":
    main()
