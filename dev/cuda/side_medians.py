#!/usr/bin/env python3
"""Medians of exec_ab lines tagged with a side and a spec (prebuilt_ab.sh, tprobe_build.sh): a line a spec with
each side's median ms a frame, its ratio to side 0, and whether every run's codes agree; with --xover instead the
crossover (exec_ab lines of both executors a batch: which is faster).

    python3 dev/cuda/side_medians.py [--xover] JSONL
"""
import collections
import json
import statistics
import sys


def main():
    xover = sys.argv[1] == "--xover"
    rows = [json.loads(l) for l in open(sys.argv[-1]) if l.strip()]
    if xover:
        ms = {(r["model"], r["weights"], r["batch"], r["executor"]): r["ms_per_frame"] for r in rows}
        for m, w, b in sorted({(r["model"], r["weights"], r["batch"]) for r in rows}):
            lat, tput = ms.get((m, w, b, "lat")), ms.get((m, w, b, "tput"))
            win = "" if lat is None or tput is None else ("lat" if lat < tput else "tput")
            print(f"crossover {m} {w} B{b}: lat {lat} tput {tput} ms a frame -> {win}")
        return
    by = collections.OrderedDict()
    for r in rows:
        by.setdefault(r["spec"], collections.OrderedDict()).setdefault(r["side"], []).append(
            (r["ms_per_frame"], r.get("codes_hash", "")))
    for spec, s in by.items():
        m = {k: statistics.median(x for x, _ in v) for k, v in s.items()}
        h = {x for v in s.values() for _, x in v}
        sides = " ".join(f"side {k} {v:.3f}" + (f" ({v / m[0]:.4f})" if 0 in m and k != 0 else "") for k, v in m.items())
        print(f"{spec}: {sides} ms a frame (medians; ratio to side 0); "
              + ("codes agree" if len(h) == 1 else "CODES DIFFER"))


if __name__ == "__main__":
    main()
