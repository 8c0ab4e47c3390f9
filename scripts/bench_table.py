#!/usr/bin/env python3
"""Markdown table from `depthdec bench --json` objects (one per line): ms/frame, stream-frames/s, floor, ratio."""
import argparse
import datetime
import json


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("jsonl")
    ap.add_argument("--title", default="depthdec bench")
    a = ap.parse_args()
    rows = [json.loads(l) for l in open(a.jsonl) if l.strip()]
    print(f"# {a.title}\n")
    print(f"Measured {rows[0]['date'] if rows else datetime.date.today()} with `depthdec bench` (median over the "
          "frames; the read bandwidth is measured in the same run; floor = weight bytes per frame / bandwidth).\n")
    print("| model | weights | batch | ms/frame | stream-frames/s | MB/frame | read GB/s | floor ms | ratio to floor |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['model']} | {r['weights']} | {r['batch']} | {r['ms_per_frame']:.3f} | "
              f"{r['stream_frames_per_s']:.1f} | {r['weight_bytes_per_frame'] / 1e6:.0f} | {r['read_GBps']:.2f} | "
              f"{r['floor_ms_per_frame']:.3f} | {r['ratio_to_floor']:.2f} |")


if __name__ == "__main__":
    main()
