#!/usr/bin/env python3
"""The throughput executor's real kernel timeline by kernel and linear kind (dev/cuda/tp_tl.c's CSV): launches,
and a launch's mean: hop (the kernel before it ended -> this one's first block past griddepcontrol.wait: the chain's
dependency latency), body (past the wait -> its last block's end), early (its first block's start -> past the
wait: how far programmatic dependent launch brought it forward); the frame's span and the sums. Launches missing a stamp are left out; stamps out of the chain's order (a launch past
its wait before the one before it ended) make it print VOID.

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
    # a launch counts only with all three stamps; its hop only after a stamped launch (the one before it in the chain)
    ok = [s != 0 and w != 0 and e != 0 for s, w, e in t]
    if not all(ok):
        print(f"{ok.count(False)} of {len(t)} launches without stamps: left out (with the hop of the launch after each)")
    # the chain's order says every launch passes its wait after the launch before it ended (programmatic dependent
    # launch waits for the whole previous grid): stamps that say otherwise are misplaced, and the figures void
    bad = sum(1 for i in range(1, len(t)) if ok[i] and ok[i - 1] and t[i][1] < t[i - 1][2])
    if bad:
        print(f"VOID: {bad} launches pass their wait before the launch before them ended (misplaced stamps)")
    agg = collections.OrderedDict()
    for i, (k, role) in enumerate(zip(ks, roles(ks))):
        if not ok[i]:
            continue
        s, w, e = t[i]
        a = agg.setdefault((k, role), [0, 0.0, 0.0, 0.0, 0])
        a[0] += 1
        if i > 0 and ok[i - 1]:
            a[1] += (w - t[i - 1][2]) / 1e3
            a[4] += 1
        a[2] += (e - w) / 1e3
        a[3] += (w - s) / 1e3
    st = [x for x, g in zip(t, ok) if g]
    if not st:
        return
    span = (max(x[2] for x in st) - min(x[0] for x in st)) / 1e3
    hop = sum(a[1] for a in agg.values())
    body = sum(a[2] for a in agg.values())
    print(f"one frame: {len(t)} launches ({len(st)} stamped), span {span / 1e3:.3f} ms; hops summed {hop / 1e3:.3f} ms, "
          f"bodies summed {body / 1e3:.3f} ms")
    print("| kernel | role | launches | hop us | body us | early us | hop + body, ms a frame |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for (k, r), (n, hp, bd, ea, nh) in sorted(agg.items(), key=lambda x: -(x[1][1] + x[1][2])):
        print(f"| {k} | {r} | {n} | {hp / max(nh, 1):.2f} | {bd / n:.2f} | {ea / n:.2f} | {(hp + bd) / 1e3:.3f} |")


if __name__ == "__main__":
    main()
