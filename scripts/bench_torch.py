#!/usr/bin/env python3
"""PyTorch baseline for the CUDA result table: the same depth decoder, from the same native .safetensors file
(`depthdec export --synthetic gpt|csm|qwen3tts|moshi --weights bf16 --out FILE`), as a hand-written loop of the Q-1
passes of one frame (Moshi's depformer: its Q passes with per-position weight slices) (KV cache, sampling with top-k 50 / T 0.9 and Gumbel noise, embedding gather), run eagerly and as one CUDA
graph per frame, at batch 1 and 256. Weights and activations in bf16 (how such a loop is usually written; the
engine under test keeps float32 activations). Times are CUDA-event medians of whole frames.

  bench_torch.py bench MODEL.safetensors --name gpt --batch 1 256 --json OUT.json
  bench_torch.py plot BENCH.jsonl TORCH.json OUT.png          latency vs batch from `depthdec bench --json` lines
  bench_torch.py table BENCH.jsonl TORCH.json                  the markdown result table (docs/cuda_results.md)
"""
import argparse
import json
import math
import sys
import time


def load(path, dev):
    import torch
    from safetensors import safe_open
    W = {}
    with safe_open(path, framework="pt", device="cpu") as f:
        cfg = json.loads(f.metadata()["depthdec.config"])
        for k in f.keys():
            W[k] = f.get_tensor(k).to(dev, torch.bfloat16)
    return cfg, W


def inv_freq(cfg):
    HD = cfg["head_dim"]
    rope = cfg.get("rope")
    theta = rope["theta"]
    inv = [1.0 / theta ** (2 * j / HD) for j in range(HD // 2)]
    sc = rope.get("scaling")
    if sc:
        f, lo, hi, om = sc["factor"], sc["low_freq_factor"], sc["high_freq_factor"], sc["original_max_position_embeddings"]
        out = []
        for v in inv:
            wl = 2 * math.pi / v
            if wl > om / lo:
                v = v / f
            elif wl >= om / hi:
                s = (om / wl - lo) / (hi - lo)
                v = (1 - s) * v / f + s * v
            out.append(v)
        inv = out
    return inv


class Decoder:
    def __init__(self, cfg, W, B, dev):
        import torch
        self.torch = torch
        self.c, self.W, self.B, self.dev = cfg, W, B, dev
        c = cfg
        self.gpt = c["block"] == "gpt"
        self.pp = bool(c.get("per_position"))  # Moshi's depformer: slice p of every matrix in pass p
        self.Q, self.V, self.D, self.L = c["levels"], c["codebook_size"], c["dim"], c["layers"]
        self.H, self.KV, self.HD, self.eps = c["heads"], c["kv_heads"], c["head_dim"], c["norm_eps"]
        self.kc = torch.zeros(self.L, B, self.KV, self.Q, self.HD, device=dev, dtype=torch.bfloat16)
        self.vc = torch.zeros_like(self.kc)
        self.h = torch.randn(B, c["input_dim"], device=dev, dtype=torch.bfloat16)
        self.c0 = torch.randint(0, self.V, (B,), device=dev)
        self.codes = torch.zeros(B, self.Q, dtype=torch.long, device=dev)
        if self.pp:
            self.text = torch.randint(0, c["text_vocab"] + 1, (B,), device=dev)
        if not self.gpt and not self.pp:
            inv = torch.tensor(inv_freq(c), dtype=torch.float64)
            ang = torch.arange(self.Q, dtype=torch.float64)[:, None] * inv[None, :]
            self.cos = torch.cat([ang.cos(), ang.cos()], -1).to(dev, torch.bfloat16)
            self.sin = torch.cat([ang.sin(), ang.sin()], -1).to(dev, torch.bfloat16)

    def norm(self, x, w, b):
        F = self.torch.nn.functional
        if self.gpt:
            return F.layer_norm(x, (self.D,), w, b, self.eps)
        return F.rms_norm(x, (self.D,), w, self.eps)

    def rot(self, x, pos):  # x [B, h, P, HD]
        cos, sin = self.cos[pos][None, None], self.sin[pos][None, None]
        h = self.HD // 2
        xr = self.torch.cat([-x[..., h:], x[..., :h]], -1)
        return x * cos + xr * sin

    def layers(self, x, p0, P):
        torch, W = self.torch, self.W
        F = torch.nn.functional
        B, H, KV, HD = self.B, self.H, self.KV, self.HD
        pos = torch.arange(p0, p0 + P, device=self.dev)
        for i in range(self.L):
            def g(n, i=i):
                w = W.get(f"layers.{i}.{n}")
                return w[p0] if self.pp and w is not None and w.dim() == 3 else w  # Moshi: position p0's slice
            n = self.norm(x, g("norm1.weight"), g("norm1.bias"))
            qkv = F.linear(n, g("qkv.weight"), g("qkv.bias"))
            q, k, v = qkv.split([H * HD, KV * HD, KV * HD], -1)
            q = q.view(B, P, H, HD).transpose(1, 2)
            k = k.view(B, P, KV, HD).transpose(1, 2)
            v = v.view(B, P, KV, HD).transpose(1, 2)
            if g("q_norm.weight") is not None:  # Qwen3 code predictors: per-head RMSNorm of q and k before RoPE
                q = F.rms_norm(q, (HD,), g("q_norm.weight"), self.eps)
                k = F.rms_norm(k, (HD,), g("k_norm.weight"), self.eps)
            if not self.gpt and not self.pp:
                q, k = self.rot(q, pos), self.rot(k, pos)
            self.kc[i, :, :, p0:p0 + P] = k
            self.vc[i, :, :, p0:p0 + P] = v
            kk, vv = self.kc[i, :, :, :p0 + P], self.vc[i, :, :, :p0 + P]
            if KV != H:
                kk = kk.repeat_interleave(H // KV, 1)
                vv = vv.repeat_interleave(H // KV, 1)
            a = F.scaled_dot_product_attention(q, kk, vv, is_causal=P > 1)
            a = a.transpose(1, 2).reshape(B, P, H * HD)
            x = x + F.linear(a, g("out.weight"), g("out.bias"))
            n = self.norm(x, g("norm2.weight"), g("norm2.bias"))
            f = F.linear(n, g("fc1.weight"), g("fc1.bias"))
            if self.gpt:
                f = F.gelu(f)
            else:
                gt, up = f.chunk(2, -1)
                f = F.silu(gt) * up
            x = x + F.linear(f, g("fc2.weight"), g("fc2.bias"))
        return x

    def sample(self, logits):
        torch = self.torch
        z = logits.float() / 0.9
        kth = torch.topk(z, 50, -1).values[:, -1:]
        z = torch.where(z < kth, torch.full_like(z, -math.inf), z)
        u = torch.rand_like(z).clamp_(1e-7, 1 - 1e-7)
        return torch.argmax(z - torch.log(-torch.log(u)), -1)

    def frame_per_position(self):
        """Moshi: Q one-position passes; input p = table row + in_proj[p] . h; heads[p], no final norm; c0 given
        (as depthdec bench times it: position 0 runs, its head is skipped)"""
        torch, W = self.torch, self.W
        F = torch.nn.functional
        x = W["text_embed.weight"][self.text] + F.linear(self.h, W["in_proj.weight"][0])
        self.codes[:, 0] = self.c0
        for p in range(self.Q):
            x = self.layers(x[:, None], p, 1)[:, 0]
            if p > 0:
                self.codes[:, p] = self.sample(F.linear(x, W["heads.weight"][p]))
            if p < self.Q - 1:
                x = W["embed.weight"][p][self.codes[:, p]] + F.linear(self.h, W["in_proj.weight"][p + 1])
        return self.codes

    def frame(self):
        if self.pp:
            return self.frame_per_position()
        torch, W, D = self.torch, self.W, self.D
        F = torch.nn.functional
        pos = W.get("pos.weight")
        x0 = F.linear(self.h, W["in_proj.weight"], W.get("in_proj.bias")) if "in_proj.weight" in W else self.h
        e0 = W["embed.weight"][0][self.c0]
        x = torch.stack([x0, e0], 1)
        if pos is not None:
            x = x + pos[:2][None]
        self.codes[:, 0] = self.c0
        p0, P = 0, 2
        for l in range(1, self.Q):
            x = self.layers(x, p0, P)
            y = self.norm(x[:, -1], W["norm.weight"], W.get("norm.bias"))
            code = self.sample(F.linear(y, W["heads.weight"][l - 1]))
            self.codes[:, l] = code
            if l < self.Q - 1:
                x = W["embed.weight"][l][code][:, None]
                if pos is not None:
                    x = x + pos[l + 1][None, None]
            p0, P = l + 1, 1
        return self.codes


def time_frames(fn, n, torch):
    ts = []
    for _ in range(n):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b))
    ts.sort()
    return ts[len(ts) // 2]


def cmd_bench_cpu(a):
    """--device cpu: the eager loop timed by the wall clock (no CUDA graph), medians of whole frames"""
    import torch
    cfg, W = load(a.model, "cpu")
    res = []
    for B in a.batch:
        d = Decoder(cfg, W, B, "cpu")
        with torch.inference_mode():
            for _ in range(2):
                d.frame()
            ts = []
            for _ in range(a.frames):
                t0 = time.perf_counter()
                d.frame()
                ts.append((time.perf_counter() - t0) * 1e3)
        ts.sort()
        r = {"model": a.name, "weights": "bf16", "batch": B, "torch_eager_ms": ts[len(ts) // 2], "device": "cpu",
             "threads": torch.get_num_threads(), "torch": torch.__version__}
        print(json.dumps(r), flush=True)
        res.append(r)
    with open(a.json, "w") as f:
        json.dump(res, f, indent=1)


def cmd_bench(a):
    import torch
    if a.device == "cpu":
        return cmd_bench_cpu(a)
    dev = "cuda"
    cfg, W = load(a.model, dev)
    res = []
    for B in a.batch:
        d = Decoder(cfg, W, B, dev)
        with torch.inference_mode():
            for _ in range(3):
                d.frame()
            torch.cuda.synchronize()
            eager = time_frames(d.frame, a.frames, torch)
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                for _ in range(3):
                    d.frame()
            torch.cuda.current_stream().wait_stream(s)
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                d.frame()
            for _ in range(3):
                g.replay()
            torch.cuda.synchronize()
            graph = time_frames(g.replay, a.frames, torch)
        r = {"model": a.name, "weights": "bf16", "batch": B, "torch_eager_ms": eager, "torch_graph_ms": graph,
             "torch": torch.__version__, "device": torch.cuda.get_device_name()}
        print(json.dumps(r), flush=True)
        res.append(r)
        del d
        torch.cuda.empty_cache()
    prev = []
    try:
        with open(a.json) as f:
            prev = json.load(f)
    except (OSError, ValueError):
        pass
    with open(a.json, "w") as f:
        json.dump(prev + res, f, indent=1)


def cmd_plot(a):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    rows = [json.loads(l) for l in open(a.bench) if l.strip()]
    try:
        torch_rows = json.load(open(a.torch))
    except (OSError, ValueError):
        torch_rows = []
    fig, (ax, ay) = plt.subplots(1, 2, figsize=(12, 4.5))
    series = {}
    for r in rows:
        if r.get("backend") != "cuda":
            continue
        series.setdefault((r["model"], r["weights"]), []).append((r["batch"], r["ms_per_frame"], r["floor_ms_per_frame"]))
    for (m, w), pts in sorted(series.items()):
        pts.sort()
        if len(pts) < 2:
            continue
        ax.plot([p[0] for p in pts], [p[1] for p in pts], "o-", label=f"depthdec cuda, {m} {w}")
        ax.plot([p[0] for p in pts], [p[2] for p in pts], ":", color="gray", label=f"HBM floor, {m} {w}")
        ay.plot([p[0] for p in pts], [1000.0 * p[0] / p[1] for p in pts], "o-", label=f"depthdec cuda, {m} {w}")
    for mode, mk in (("torch_graph_ms", "s"), ("torch_eager_ms", "^")):
        for m in sorted({r["model"] for r in torch_rows}):
            pts = sorted((r["batch"], r[mode]) for r in torch_rows if r["model"] == m)
            ax.plot([p[0] for p in pts], [p[1] for p in pts], mk + "--", label=f"PyTorch {mode.split('_')[1]}, {m} bf16")
            ay.plot([p[0] for p in pts], [1000.0 * p[0] / p[1] for p in pts], mk + "--",
                    label=f"PyTorch {mode.split('_')[1]}, {m} bf16")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("batch (streams per frame)")
    ax.set_ylabel("ms per frame (31 passes)")
    ax.set_title("Depth decoder frame latency on " + (torch_rows[0]["device"] if torch_rows else "GPU"))
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    ay.set_xscale("log", base=2)
    ay.set_yscale("log")
    ay.set_xlabel("batch (streams per frame)")
    ay.set_ylabel("stream-frames per second")
    ay.set_title("Throughput (a stream needs 12.5 frames/s)")
    ay.grid(True, which="both", alpha=0.3)
    ay.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(a.out, dpi=120)
    print("wrote", a.out)


BARS = {("gpt", "bf16", 1): 1.0, ("gpt", "q8", 1): 0.6, ("gpt", "bf16", 256): 2.5, ("csm", "bf16", 1): 2.0,
        ("csm", "bf16", 256): 4.0}


def cmd_table(a):
    rows = [json.loads(l) for l in open(a.bench) if l.strip()]
    try:
        tr = json.load(open(a.torch))
    except (OSError, ValueError):
        tr = []
    tt = {(r["model"], r["batch"]): r for r in tr}
    print("| model | weights | batch | depthdec cuda ms/frame | stream-frames/s | HBM floor ms | ratio to floor |"
          " PyTorch eager ms | PyTorch graph ms | speed-up vs graph | bar |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        if r.get("backend") != "cuda":
            continue
        key = (r["model"], r["weights"], r["batch"])
        t = tt.get((r["model"], r["batch"])) if r["weights"] == "bf16" else None
        bar = BARS.get(key)
        ok = "" if bar is None else ("%s <= %.1f: %s" % ("%.3f" % r["ms_per_frame"], bar,
                                                          "met" if r["ms_per_frame"] <= bar else
                                                          "missed by %.0f%%" % (100 * (r["ms_per_frame"] / bar - 1))))
        print("| %s | %s | %d | %.3f | %.0f | %.3f | %.2f | %s | %s | %s | %s |" % (
            r["model"], r["weights"], r["batch"], r["ms_per_frame"], r["stream_frames_per_s"],
            r["floor_ms_per_frame"], r["ratio_to_floor"], "%.2f" % t["torch_eager_ms"] if t else "",
            "%.2f" % t["torch_graph_ms"] if t else "", "%.1fx" % (t["torch_graph_ms"] / r["ms_per_frame"]) if t else "",
            ok))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("bench")
    b.add_argument("model")
    b.add_argument("--name", required=True)
    b.add_argument("--batch", type=int, nargs="+", default=[1, 256])
    b.add_argument("--frames", type=int, default=30)
    b.add_argument("--json", required=True)
    b.add_argument("--device", default="cuda", choices=["cuda", "cpu"], help="cpu: eager, wall-clock timed")
    p = sub.add_parser("plot")
    p.add_argument("bench")
    p.add_argument("torch")
    p.add_argument("out")
    t = sub.add_parser("table")
    t.add_argument("bench")
    t.add_argument("torch")
    a = ap.parse_args()
    {"bench": cmd_bench, "plot": cmd_plot, "table": cmd_table}[a.cmd](a)


if __name__ == "__main__":
    sys.exit(main())
