#!/usr/bin/env python3
"""ncu metrics a launch (`ncu --csv --metrics ...` of one kernel over a frame), one line a launch with its pass and
layer (launch i of a kernel that runs LAYERS times a pass: pass i // LAYERS, layer i % LAYERS), then the sums.

    python3 dev/cuda/ncu_by_launch.py NCU.csv [LAYERS]
"""
import sys

from ncu_by_kernel import read_launches


def main():
    by = read_launches(sys.argv[1])
    layers = int(sys.argv[2]) if len(sys.argv) > 2 else 1
    names = sorted({n for m in by.values() for n in m if n != "kernel"})
    short = {n: n.split("__")[1].split(".")[0] if "__" in n else n for n in names}
    print("launch pass layer " + " ".join(short[n] for n in names))
    tot = 0.0
    for i, (_, m) in enumerate(by.items()):
        tot += m.get("gpu__time_duration.sum", 0.0)
        print(f"{i} {i // layers} {i % layers} " + " ".join(f"{m.get(n, float('nan')):.2f}" for n in names))
    print(f"{len(by)} launches, {tot:.1f} us of kernel time")


if __name__ == "__main__":
    main()
