#!/usr/bin/env python3
"""The throughput executor's real kernel timeline (issue 14): Nsight Systems' cuda_gpu_trace of exec_ab frames
(dev/cuda/xover_call.sh, NSYS=1; frames are runs of launches without a 100 us pause), the last frame by kernel and linear kind: launches, us summed and a launch
(in situ, not serialised as ncu's), and the gap from the kernel before it ended to this one's start (negative:
overlap, programmatic dependent launch), plus the frame's span.

    python3 dev/cuda/nsys_gaps.py NSYS_cuda_gpu_trace.csv
"""
import collections
import csv
import sys

from ncu_roles import roles


def main():
    rows = list(csv.DictReader(open(sys.argv[1])))
    ks = []
    for r in rows:
        name = r.get("Name", "")
        if not name.split("(")[0].replace("void ", "").strip().startswith("tp_"):
            continue
        st, du = float(r["Start (ns)"]), float(r["Duration (ns)"])
        ks.append((st, du, name.split("(")[0].split("<")[0].replace("void ", "").strip()))
    ks.sort()
    # frames: runs of kernels without a gap over 100 us between them (the host's work between dd_decode calls)
    starts = [0] + [i for i in range(1, len(ks)) if ks[i][0] - max(k[0] + k[1] for k in ks[max(0, i - 64):i]) > 1e5]
    if not ks:
        sys.exit("no tp_ kernel in the trace")
    ends = starts[1:] + [len(ks)]
    fr = ks[starts[-1]:]
    names = [k[2] for k in fr]
    agg = collections.OrderedDict()
    prev_end = None
    for (st, du, k), role in zip(fr, roles(names)):
        gap = 0.0 if prev_end is None else (st - prev_end) / 1e3
        a = agg.setdefault((k, role), [0, 0.0, 0.0])
        a[0] += 1
        a[1] += du / 1e3
        a[2] += gap
        prev_end = st + du if prev_end is None else max(prev_end, st + du)
    span = (fr[-1][0] + fr[-1][1] - fr[0][0]) / 1e3
    busy = sum(a[1] for a in agg.values())
    print(f"nsys, the last of {len(starts)} frames: {len(fr)} kernels, span {span / 1e3:.3f} ms, kernel time "
          f"{busy / 1e3:.3f} ms, gaps summed {sum(a[2] for a in agg.values()) / 1e3:.3f} ms")
    print("| kernel | role | launches | us | us a launch | gap before, us a launch |")
    print("|---|---|---:|---:|---:|---:|")
    for (k, r), (n, us, gap) in sorted(agg.items(), key=lambda x: -x[1][1]):
        print(f"| {k} | {r} | {n} | {us:.1f} | {us / n:.2f} | {gap / n:.2f} |")


if __name__ == "__main__":
    main()
