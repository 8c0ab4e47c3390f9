#!/usr/bin/env python3
"""ncu metrics of one throughput-executor frame by kernel and by the linear each launch serves (issue 14: where a
frame's kernel time goes per linear kind, e.g. the fc2 tile against its epilogue).

    python3 dev/cuda/ncu_roles.py NCU.csv

NCU.csv: `ncu --csv --kernel-name regex:tp_ --metrics gpu__time_duration.sum,launch__grid_size,...` of one frame
(every tp_ kernel, in launch order). A linear's role comes from its place in the frame: the first tile after an
attention kernel is out, then fc1, fc2; a tile followed (before any other tile) by an attention kernel is qkv, one
followed by tp_sample is head; tp_split belongs to the tile after it, tp_epi to the tile before it. Rows: kernel,
role, launches, us summed and a launch (ncu's serialised durations), the mean of every other metric.
"""
import collections
import sys

from ncu_by_kernel import read_launches


def roles(kernels):
    """The linear each launch serves, from the launch order (kernels: short names in launch order): the first tile
    after an attention kernel is out, then fc1, fc2; a tile followed (before any other tile) by an attention kernel
    is qkv, one followed by tp_sample (or nothing) is head; tp_split belongs to the tile after it, tp_epi to the tile
    before it; other kernels get ""."""
    tiles = [i for i, k in enumerate(kernels) if k == "tp_linear"]
    role, since_att = {}, None
    for i, k in enumerate(kernels):
        if k.startswith("tp_attend"):
            since_att = 0
        elif k == "tp_linear":
            nxt = next((kernels[j] for j in range(i + 1, len(kernels)) if kernels[j] not in ("tp_epi", "tp_split")), "")
            if nxt.startswith("tp_attend"):
                role[i] = "qkv"
            elif nxt in ("tp_sample", ""):
                role[i] = "head"
            elif since_att is not None and since_att < 3:
                role[i] = ("out", "fc1", "fc2")[since_att]
            else:
                role[i] = "other"
            if since_att is not None:
                since_att += 1
    out = []
    for i, k in enumerate(kernels):
        if k == "tp_split":
            j = next((t for t in tiles if t > i), None)
            out.append(role.get(j, "other"))
        elif k == "tp_epi":
            j = max((t for t in tiles if t < i), default=None)
            out.append(role.get(j, "other"))
        else:
            out.append(role.get(i, ""))
    return out


def main():
    launches = read_launches(sys.argv[1])
    seq = list(launches.values())
    for d, r in zip(seq, roles([d["kernel"] for d in seq])):
        d["role"] = r
    names = sorted({n for d in seq for n in d if "__" in n and n != "gpu__time_duration.sum"})
    short = [n.split("__")[1].split(".")[0] if n.count("__") else n for n in names]
    agg = collections.OrderedDict()
    for d in seq:
        agg.setdefault((d["kernel"], d["role"]), []).append(d)
    total = sum(d.get("gpu__time_duration.sum", 0.0) for d in seq)
    print(f"ncu one frame: {len(seq)} kernels, {total / 1e3:.3f} ms of kernel time (serialised)")
    print("| kernel | role | launches | us | us a launch | " + " | ".join(short) + " |")
    print("|---|---|---:|---:|---:|" + "---:|" * len(short))
    for (k, r), ds in sorted(agg.items(), key=lambda x: -sum(d.get("gpu__time_duration.sum", 0.0) for d in x[1])):
        us = sum(d.get("gpu__time_duration.sum", 0.0) for d in ds)
        means = [sum(d.get(n, 0.0) for d in ds) / len(ds) for n in names]
        print(f"| {k} | {r} | {len(ds)} | {us:.1f} | {us / len(ds):.2f} | " +
              " | ".join(f"{m:.4g}" for m in means) + " |")


if __name__ == "__main__":
    main()
