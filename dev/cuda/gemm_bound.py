#!/usr/bin/env python3
"""What the vendor's matrix products alone cost for one depth-decoder frame (issue 14's bars, a practical bound).

    python3 dev/cuda/gemm_bound.py MODEL.safetensors --name gpt --batch 64 256 512 --json OUT.json [--device cpu]
    ncu --kernel-name regex:"gemm|nvjet|xmma" --launch-skip 1 --launch-count 1 \
        python3 dev/cuda/gemm_bound.py - --name x --json - --shape 512,1024,3072

MODEL is `depthdec export --synthetic gpt|csm --weights bf16` (the file scripts/bench_torch.py reads). For each batch B
the frame's linears, in the order `depthdec bench` runs them (c0 given: in_proj once, pass 1 with two positions a
stream, passes 2 .. Q-1 with one; per layer qkv, out, fc1, fc2; the head of each level 1 .. Q-1 on B rows), are run as
cuBLAS products (torch.matmul, bf16 in, fp32 accumulation) on fresh random inputs, every one of them in one CUDA graph,
and the graph's replay is timed (CUDA-event medians). Nothing else of the frame runs: no norm, attention, epilogue,
split or sampling, no dependency between products beyond stream order. Two forms:
  two  the exact scheme's tensor work: every activation row is two bf16 terms (hi, lo), so 2 T rows a product
       (the scheme sums the two terms' products in one accumulator; stacked rows do the same multiply-adds)
  one  one bf16 term a row (how the PyTorch loop of scripts/bench_torch.py multiplies)
with the outputs bf16 (`--f32-out`: fp32 outputs where torch.mm takes out_dtype; the scheme's partial sums are fp32).
Also each distinct product shape alone (a graph of REPS copies: its rate), and an 8192^3 bf16 product (the device's
dense rate in this call; dev/cuda/floor.py's --peak).

This is not a floor: the arithmetic floor of the exact scheme is dev/cuda/floor.py (the tensor work at the 8192^3
rate). It says what the best general matrix products reach on the frame's shapes, launch by launch, which a fused
executor has to beat to meet a bar that is under it.
"""
import argparse
import json
import statistics
import sys


def frame_products(cfg, W, B):
    """[(rows, weight)] for one frame at batch B, in run order"""
    L, Q = cfg["layers"], cfg["levels"]
    out = []
    if "in_proj.weight" in W:
        out.append((B, W["in_proj.weight"]))
    for p in range(1, Q):
        T = 2 * B if p == 1 else B
        for i in range(L):
            for n in ("qkv", "out", "fc1", "fc2"):
                out.append((T, W[f"layers.{i}.{n}.weight"]))
        out.append((B, W["heads.weight"][p - 1]))
    return out


def gflop(prods, terms):
    return sum(2.0 * terms * r * w.shape[0] * w.shape[1] for r, w in prods) / 1e9


def make_mm(torch, f32):
    if not f32:
        return lambda x, wt: torch.matmul(x, wt), "bf16"
    try:
        a = torch.zeros(16, 16, device="cuda", dtype=torch.bfloat16)
        torch.mm(a, a, out_dtype=torch.float32)
        return lambda x, wt: torch.mm(x, wt, out_dtype=torch.float32), "f32"
    except (TypeError, RuntimeError):
        return lambda x, wt: torch.matmul(x, wt), "bf16 (out_dtype not taken)"


def timed_graph(torch, fn, frames, dev):
    """median ms of one replay of fn captured as a CUDA graph (cpu: fn timed by the wall clock)"""
    import time
    if dev == "cpu":
        ts = []
        for _ in range(frames):
            t0 = time.perf_counter()
            fn()
            ts.append((time.perf_counter() - t0) * 1e3)
        return statistics.median(ts)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(2):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    for _ in range(3):
        g.replay()
    torch.cuda.synchronize()
    ts = []
    for _ in range(frames):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b))
    return statistics.median(ts)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model")
    ap.add_argument("--name", required=True)
    ap.add_argument("--batch", type=int, nargs="+", default=[64, 256, 512])
    ap.add_argument("--frames", type=int, default=20)
    ap.add_argument("--reps", type=int, default=50, help="copies of one shape in its graph")
    ap.add_argument("--f32-out", action="store_true")
    ap.add_argument("--json", required=True)
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"], help="cpu: the script's own check, small")
    ap.add_argument("--shape", help="ROWS,K,N: only that product, 3 times, no graph (for ncu: which kernel and tile)")
    a = ap.parse_args()
    import torch
    if a.shape:
        rows, K, N = (int(v) for v in a.shape.split(","))
        x = torch.randn(rows, K, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(N, K, device="cuda", dtype=torch.bfloat16).t()
        for _ in range(3):
            torch.matmul(x, w)
        torch.cuda.synchronize()
        return 0
    from safetensors import safe_open
    dev = a.device
    with safe_open(a.model, framework="pt", device="cpu") as f:
        cfg = json.loads(f.metadata()["depthdec.config"])
        W = {k: f.get_tensor(k) for k in f.keys() if k.endswith(".weight")}
    dt = torch.bfloat16 if dev == "cuda" else torch.float32
    W = {k: v.to(dev, dt) for k, v in W.items()}
    mm, outk = make_mm(torch, a.f32_out) if dev == "cuda" else ((lambda x, wt: torch.matmul(x, wt)), "f32 (cpu)")
    res = []
    torch.manual_seed(1)
    with torch.inference_mode():
        if dev == "cuda":
            n = 8192
            x = torch.randn(n, n, device=dev, dtype=dt)
            ms = timed_graph(torch, lambda: [torch.matmul(x, x) for _ in range(5)], a.frames, dev) / 5
            peak = 2.0 * n ** 3 / ms / 1e9
            res.append({"what": "dense 8192^3", "ms": ms, "tflops": peak, "device": torch.cuda.get_device_name()})
            print(f"dense 8192^3 bf16: {ms:.3f} ms, {peak:.0f} TFLOP/s", flush=True)
            del x
        for B in a.batch:
            prods = frame_products(cfg, W, B)
            for terms in (2, 1):
                # fresh random inputs, one buffer a distinct (rows, K); weights transposed once (views)
                xs = {}
                ops = []
                for r, w in prods:
                    key = (terms * r, w.shape[1])
                    if key not in xs:
                        xs[key] = torch.randn(*key, device=dev, dtype=dt)
                    ops.append((xs[key], w.t()))
                fn = lambda ops=ops: [mm(x, wt) for x, wt in ops]
                ms = timed_graph(torch, fn, a.frames, dev)
                gf = gflop(prods, terms)
                r = {"what": "frame", "model": a.name, "batch": B, "terms": terms, "products": len(prods), "ms": ms,
                     "gflop": gf, "tflops": gf / ms, "out": outk}
                res.append(r)
                print(f"{a.name} B{B} {'two' if terms == 2 else 'one'}-term: {len(prods)} products, {gf:.1f} GFLOP, "
                      f"{ms:.3f} ms/frame, {gf / ms:.0f} TFLOP/s", flush=True)
                del xs, ops
            shapes = sorted({(2 * r, w.shape[1], w.shape[0]) for r, w in prods})
            for rows, K, N in shapes:
                x = torch.randn(rows, K, device=dev, dtype=dt)
                w = torch.randn(N, K, device=dev, dtype=dt).t()
                ms = timed_graph(torch, lambda: [mm(x, w) for _ in range(a.reps)], max(5, a.frames // 2), dev) / a.reps
                gf = 2.0 * rows * K * N / 1e9
                res.append({"what": "shape", "model": a.name, "batch": B, "rows": rows, "K": K, "N": N, "us": ms * 1e3,
                            "tflops": gf / ms})
                print(f"  {rows} x {K} -> {N}: {ms * 1e3:.2f} us, {gf / ms:.0f} TFLOP/s", flush=True)
    with open(a.json, "w") as f:
        json.dump(res, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
