#!/usr/bin/env python3
"""The arithmetic floor of the exact scheme per batch (issue 14 point 3), beside measured frame times.

    python3 dev/cuda/floor.py [--depthdec build/depthdec] [--bench docs/cuda_bench_curve_20261204.jsonl]
                              [--torch docs/cuda_torch_curve_20261204.json] [--peak 790] [--bw 4204] gpt csm

For each synthetic model (`depthdec export --synthetic M --weights bf16`, dims read back with `depthdec info`) and
batch B, per frame (decode with c0 given, as `depthdec bench` runs it):
  tensor flops  the exact scheme multiplies every bf16 weight by the hi and the lo bf16 term of the activation:
                2 MMA products per multiply-add, so 2 * 2 * MACs. MACs: 32 B tokens through the layers (pass 1 has
                two positions per stream, passes 2..31 one), 31 B head rows (levels 1..31), B rows of in_proj
                (position 0). Attention (fp32 on CUDA cores, < 0.1% of the MACs), norms, sampling: not counted.
  HBM bytes     the weights once per pass (the working set of a pass, ~105 MB bf16 at GPT dims, does not fit the
                H200's 60 MB L2 next to the activations; `depthdec bench` reports the same "read per frame"), plus
                the f32 KV cache: pass l reads the keys and values of positions 0..l of every stream and layer
                (2 + 3 + ... + 32 = 527 positions a stream).
  floor         max(flops / peak, bytes / bandwidth): peak = dense bf16 tensor throughput (790 TFLOP/s: an 8192^3
                bf16 matrix product measured 769-798 on these H200s; the data sheet says 989), bandwidth = the
                device-to-device copy `depthdec bench` measures (4204 GB/s on 2026-12-04).
The measured columns come from `depthdec bench` JSON lines and scripts/bench_torch.py JSON of one device call.
"""
import argparse
import json
import os
import re
import subprocess
import tempfile


def dims(dd, kind):
    path = os.path.join(tempfile.gettempdir(), "floor_%s.safetensors" % kind)
    if not os.path.exists(path):
        subprocess.run([dd, "export", "--synthetic", kind, "--weights", "bf16", "--out", path], check=True,
                       stdout=subprocess.DEVNULL)
    info = subprocess.run([dd, "info", path], check=True, capture_output=True, text=True).stdout
    g = lambda pat: int(re.search(pat, info, re.M).group(1))
    d = {"Q": g(r"^levels\s+(\d+)"), "V": g(r"^codebook\s+(\d+)"), "I": g(r"^input_dim\s+(\d+)"),
         "D": g(r"^dim\s+(\d+)"), "L": g(r"^dim\s+\d+, (\d+) layers"), "H": g(r"(\d+) heads x"),
         "HD": g(r"heads x (\d+)"), "KVH": g(r"kv heads (\d+)"), "F": g(r"ffn (\d+)"),
         "gated": "SwiGLU" in info, "bytes_per_frame": float(re.search(r"([\d.]+) MB read per frame", info).group(1)) * 1e6}
    return d


def floor(d, B, peak, bw):
    D, F, L, Q, V, I = d["D"], d["F"], d["L"], d["Q"], d["V"], d["I"]
    qkv = (d["H"] + 2 * d["KVH"]) * d["HD"] * D
    layer = qkv + d["H"] * d["HD"] * D + (2 if d["gated"] else 1) * F * D + D * F
    tokens = (2 + (Q - 2)) * B  # pass 1: two positions, passes 2..Q-1: one
    macs = tokens * L * layer + (Q - 1) * B * V * D + B * D * I
    flops = 4.0 * macs
    kv_positions = 2 + sum(l + 1 for l in range(2, Q))
    kv = B * kv_positions * L * 2 * d["KVH"] * d["HD"] * 4
    t_flop = flops / (peak * 1e12) * 1e3
    t_mem = (d["bytes_per_frame"] + kv) / (bw * 1e9) * 1e3
    return flops, kv, t_flop, t_mem, max(t_flop, t_mem)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("models", nargs="*", default=["gpt", "csm"])
    ap.add_argument("--depthdec", default="build/depthdec")
    ap.add_argument("--bench", default="docs/cuda_bench_curve_20261204.jsonl")
    ap.add_argument("--torch", default="docs/cuda_torch_curve_20261204.json")
    ap.add_argument("--peak", type=float, default=790.0, help="dense bf16 TFLOP/s")
    ap.add_argument("--bw", type=float, default=4204.0, help="HBM GB/s")
    a = ap.parse_args()
    meas, tor = {}, {}
    if a.bench and os.path.exists(a.bench):
        for line in open(a.bench):
            if line.strip():
                r = json.loads(line)
                if r.get("weights") == "bf16":
                    meas[(r["model"], r["batch"])] = r["ms_per_frame"]
    if a.torch and os.path.exists(a.torch):
        for r in json.load(open(a.torch)):
            tor[(r["model"], r["batch"])] = r["torch_graph_ms"]
    print("| model (bf16) | batch | tensor TFLOP a frame | KV MB a frame | flop floor ms | HBM floor ms | floor ms | "
          "depthdec cuda ms | x floor | PyTorch graph ms |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for m in a.models:
        d = dims(a.depthdec, m)
        for B in (1, 2, 4, 8, 16, 32, 48, 64, 128, 256, 512):
            fl, kv, tf, tm, t = floor(d, B, a.peak, a.bw)
            got, pt = meas.get((m, B)), tor.get((m, B))
            print("| %s | %d | %.3f | %.0f | %.3f | %.3f | %.3f | %s | %s | %s |" % (
                m.upper(), B, fl / 1e12, kv / 1e6, tf, tm, t, "%.3f" % got if got else "",
                "%.1f" % (got / t) if got else "", "%.3f" % pt if pt else ""))


if __name__ == "__main__":
    main()
