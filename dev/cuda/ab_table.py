"""The rows of an exec_ab A/B ($OUT/exec_ab.jsonl, tagged by dev/cuda/call_env.sh's ab_side): per model, weights and
batch, each side's ms a frame in the order the sides first appear, with its ratio to the reference side (default
"base") where there is one. A side run more than once (tput_ab.sh's AB_ROUNDS) shows the median of its runs' medians
and, in brackets, their spread ((max - min) / median, %), so a ratio can be read against the noise.
   python3 dev/cuda/ab_table.py $OUT/exec_ab.jsonl [REFERENCE_SIDE]"""
import json
import statistics
import sys

rows = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
ref = sys.argv[2] if len(sys.argv) > 2 else "base"
sides = list(dict.fromkeys(r["side"] for r in rows))
runs = {}
for r in rows:
    runs.setdefault((r["side"], r["model"], r["weights"], r["batch"]), []).append(r["ms_per_frame"])
ms = {k: statistics.median(v) for k, v in runs.items()}
for m, w, b in sorted({(r["model"], r["weights"], r["batch"]) for r in rows}):
    base = ms.get((ref, m, w, b))
    cols = []
    for s in sides:
        if (s, m, w, b) in ms:
            v, rv = ms[(s, m, w, b)], runs[(s, m, w, b)]
            spread = f" [{len(rv)} runs, {100 * (max(rv) - min(rv)) / v:.1f} %]" if len(rv) > 1 else ""
            cols.append(f"{s} {v:8.3f}" + (f" ({v / base:.3f}x)" if base and s != ref else "") + spread)
    print(f"{m} {w} B{b:<4} " + "  ".join(cols))
