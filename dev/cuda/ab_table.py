"""The rows of an exec_ab A/B ($OUT/exec_ab.jsonl, tagged by dev/cuda/call_env.sh's ab_side): per model, weights and batch,
each side's ms a frame in the order the sides first appear, with its ratio to the reference side (default "base")
where there is one.   python3 dev/cuda/ab_table.py $OUT/exec_ab.jsonl [REFERENCE_SIDE]"""
import json
import sys

rows = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
ref = sys.argv[2] if len(sys.argv) > 2 else "base"
sides = list(dict.fromkeys(r["side"] for r in rows))
ms = {(r["side"], r["model"], r["weights"], r["batch"]): r["ms_per_frame"] for r in rows}
for m, w, b in sorted({(r["model"], r["weights"], r["batch"]) for r in rows}):
    base = ms.get((ref, m, w, b))
    cols = []
    for s in sides:
        if (s, m, w, b) in ms:
            v = ms[(s, m, w, b)]
            cols.append(f"{s} {v:8.3f}" + (f" ({v / base:.3f}x)" if base and s != ref else ""))
    print(f"{m} {w} B{b:<4} " + "  ".join(cols))
