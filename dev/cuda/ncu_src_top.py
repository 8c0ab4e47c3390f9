#!/usr/bin/env python3
"""The SASS lines with the most warp-stall samples in ncu's source page (`ncu -i REP --page source --csv
--print-source sass`), with the share of all samples and the line's biggest stall reasons; then the samples by
opcode. Column names differ between ncu versions: the samples column is the first whose name starts with "Warp
Stall Sampling (All"; stall reasons are the numeric columns whose names start with "stall_" or contain "Stall".

    python3 dev/cuda/ncu_src_top.py SOURCE.csv [N]
"""
import collections
import csv
import sys


def num(v):
    try:
        return float(v.replace(",", ""))
    except (ValueError, AttributeError):
        return None


def main():
    rows = list(csv.reader(l for l in open(sys.argv[1]) if l.startswith('"')))
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 40
    if not rows:
        print("no rows")
        return
    hi = next((i for i, r in enumerate(rows) if "Address" in r and "Source" in r), 0)  # after a "Kernel Name" row
    h, rows = rows[hi], rows[hi:]
    samp = next((i for i, c in enumerate(h) if c.startswith("Warp Stall Sampling (All")), None)
    src = next((i for i, c in enumerate(h) if c == "Source"), None)
    adr = next((i for i, c in enumerate(h) if c == "Address"), None)
    if samp is None or src is None:
        print("columns:", h)
        return
    reasons = [i for i, c in enumerate(h) if i != samp and (c.startswith("stall_") or "Stall" in c) and
               not c.startswith("Warp Stall Sampling") and "Not Issued" not in c]
    body = [r for r in rows[1:] if len(r) == len(h) and num(r[samp]) is not None]
    tot = sum(num(r[samp]) for r in body) or 1.0
    print(f"{len(body)} SASS lines, {tot:.0f} stall samples")
    for r in sorted(body, key=lambda r: -num(r[samp]))[:n]:
        rs = sorted(((num(r[i]) or 0.0, h[i]) for i in reasons), reverse=True)[:3]
        why = ", ".join(f"{c} {v:.0f}" for v, c in rs if v > 0)
        print(f"{100 * num(r[samp]) / tot:5.1f}% {r[adr] if adr is not None else ''} {r[src].strip()[:60]:60s} {why}")
    ops = collections.Counter()
    for r in body:
        t = r[src].split()
        if t and t[0].startswith("@"):
            t = t[1:]
        ops[t[0].split(".")[0] if t else "?"] += num(r[samp])
    print("by opcode: " + ", ".join(f"{k} {100 * v / tot:.1f}%" for k, v in ops.most_common(15)))


if __name__ == "__main__":
    main()
