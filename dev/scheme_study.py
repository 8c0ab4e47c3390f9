#!/usr/bin/env python3
"""Error study of activation-rounding schemes for the tensor-core linears (issue 14).

The CUDA backend computes every linear y = W x (bf16 weights W, float32 activations x) as W hi + W lo with
hi = bf16(x), lo = bf16(x - hi): two tensor-core products. This script measures what other splits of x would do
to the logits and the sampled codes, against a float64 oracle (rounding is to nearest even throughout):

  f64            everything in float64 (the oracle)
  two_term_bf16  today's scheme: hi = bf16(x), lo = bf16(x - hi)
  f16            one term: f16(x)
  bf16           one term: bf16(x)
  two_term_f16   hi = f16(x), lo = f16(x - hi) (today's cost, more bits)

An "f16 hi + int8 lo" scheme is not studied: an int8 (or fp8) tensor-core product takes both operands in that
type, and bf16 weights (8 significant bits, exponents spread over the tensor) have no exact int8 form, so the lo
term's product could not be W lo exactly.

What it does: exports a synthetic model with the CLI (`depthdec export --synthetic gpt|csm --weights bf16`), reads
it (native safetensors, config in `__metadata__["depthdec.config"]`), and runs the depth decoder teacher-forced
(`depthdec score`: given h and codes c0..c(Q-1), the logits of levels 1..Q-1; SPEC sections 1-2) in numpy under
each scheme, on random streams (h ~ N(0, 1) in float32, codes uniform). The numpy f64 pass is validated against
the engine's `ref` backend (float64 accumulation, float32 activations) on the same inputs.

Emulation of a linear: x is rounded to float32 and split per the scheme; the products (bf16 x bf16 and bf16 x f16
significands are exact in float64) are summed in float64 and the sum plus the bias is rounded to float32. This
stands in for the tensor cores' float32 accumulation and is bit-exact with no backend; the terms are added before
the product (W (hi + lo) equals W hi + W lo up to float64 rounding). Weights are their exact bf16 values in every
scheme: for the f16 schemes the weights that float16 does not hold exactly are counted and reported (as stored,
and after a per-tensor power-of-two scale), not rounded. Outside the linears (norms, RoPE, attention, GELU/SiLU,
residual adds) each op is evaluated in float64 from float32 inputs and rounded to float32, as the `ref` backend
does (float64 throughout for f64).

Measures, per scheme against f64 (those of `depthdec quality`): per level, max and mean of
|logit - f64 logit| / max|f64 logits of the level| over the streams; top-1 agreement; sampled-code agreement:
Gumbel-max sampling with temperature 0.9 and top-k 50 (SPEC section 3's rule, evaluated in float64) with the same
Gumbel noise for every scheme (numpy, fixed seed), counting the (stream, level) pairs whose code equals f64's. The
engine's `ref` (first --ref-streams streams) and `cpu` backend logits are measured the same way, as the yardstick
of today's tolerance.

Run from the repository root after `make`, with numpy (python3 -m venv /tmp/sv && /tmp/sv/bin/pip install numpy):
  nice /tmp/sv/bin/python dev/scheme_study.py --model gpt --streams 256 --ref-streams 64 --json /tmp/scheme_gpt.jsonl
  nice /tmp/sv/bin/python dev/scheme_study.py --model csm --streams 128 --ref-streams 32 --json /tmp/scheme_csm.jsonl
(6 and 5 minutes on 2 cores, most of it in the ref backend; `--backends cpu --seed S` for more streams without
ref). It prints a table and writes JSON lines (kind: run, weights, activations, validation, result) to --json.
Results and what they say: dev/scheme_study.md.
"""
import argparse
import datetime
import json
import math
import os
import platform
import struct
import subprocess
import sys
import time

import numpy as np

SCHEMES = ("f64", "two_term_bf16", "f16", "bf16", "two_term_f16")
TEMPERATURE, TOP_K = 0.9, 50
VALIDATION_TOL = 1e-5  # f64 vs the ref backend (whose float32 activations give ~1e-7 here)
MATRICES = ("qkv", "out", "fc1", "fc2")
_erf = np.frompyfunc(math.erf, 1, 1)


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def bf16_to_f32(u16):
    return (u16.astype(np.uint32) << 16).view(np.float32)


def round_bf16(x32):
    """float32 -> nearest bf16 (ties to even), returned as float32."""
    u = np.ascontiguousarray(x32).view(np.uint32)
    return ((u + np.uint32(0x7FFF) + ((u >> 16) & np.uint32(1))) & np.uint32(0xFFFF0000)).view(np.float32)


def round_f16(x32):
    """float32 -> nearest float16 (numpy rounds to nearest even), returned as float32."""
    return x32.astype(np.float16).astype(np.float32)


def read_safetensors(path):
    """{name: float32 array} and the depthdec config of a native safetensors file (bf16, f16 or f32 tensors)."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
    data = np.memmap(path, dtype=np.uint8, mode="r", offset=8 + n)
    cfg = json.loads(header.pop("__metadata__")["depthdec.config"])
    tensors = {}
    for name, t in header.items():
        a, b = t["data_offsets"]
        raw = data[a:b]
        if t["dtype"] == "BF16":
            arr = bf16_to_f32(raw.view(np.uint16))
        else:
            arr = raw.view({"F16": np.float16, "F32": np.float32}[t["dtype"]]).astype(np.float32)
        tensors[name] = arr.reshape(t["shape"])
    return tensors, cfg


class Model:
    """A native gpt or llama model (dense weights), every tensor as float64 (exact), and its config."""

    def __init__(self, path):
        t, cfg = read_safetensors(path)
        assert cfg["block"] in ("gpt", "llama") and not cfg.get("qk_norm") and not cfg.get("per_position")
        assert "quantization" not in cfg
        self.cfg = cfg
        t.pop("head0.weight", None)  # level 0 is not scored
        linears = ["in_proj.weight", "heads.weight"] + [
            f"layers.{i}.{m}.weight" for i in range(cfg["layers"]) for m in MATRICES]
        self.f16_report = f16_exactness([t[n] for n in linears])
        self.t = {name: t.pop(name).astype(np.float64) for name in list(t)}
        if cfg["rope"]:
            self.cos, self.sin = rope_tables(cfg)

    def get(self, name):
        return self.t.get(name)


def f16_exactness(mats):
    """How many weights (float32 arrays of bf16 values) float16 does not hold exactly: as stored, and after each
    tensor's largest power-of-two scale that keeps it in range (undone exactly on the output)."""
    total = plain = scaled = 0
    for w in mats:
        total += w.size
        plain += int(np.count_nonzero(round_f16(w) != w))
        e = math.floor(math.log2(float(np.abs(w).max())))
        ws = w * np.float32(2.0 ** (15 - e))  # max|ws| in [2^15, 2^16): bf16 values there are <= 65280 < 65504
        scaled += int(np.count_nonzero(round_f16(ws) != ws))
    return {"matrix_weights": total, "f16_inexact": plain, "f16_inexact_pow2_scaled": scaled}


def rope_tables(cfg):
    """cos, sin [Q, HD/2] of position p and pair j (HF llama3 frequency scaling when configured; as model.c)."""
    HD, rp = cfg["head_dim"], cfg["rope"]
    inv = 1.0 / np.power(rp["theta"], 2.0 * np.arange(HD // 2) / HD)
    sc = rp.get("scaling")
    if sc:
        orig, lo, hi, fac = (sc["original_max_position_embeddings"], sc["low_freq_factor"], sc["high_freq_factor"],
                             sc["factor"])
        wl = 2 * np.pi / inv
        smooth = (orig / wl - lo) / (hi - lo)
        inv = np.where(wl > orig / lo, inv / fac,
                       np.where(wl >= orig / hi, (1 - smooth) * inv / fac + smooth * inv, inv))
    ang = np.arange(cfg["levels"])[:, None] * inv[None, :]
    return np.cos(ang), np.sin(ang)


class Arith:
    """One scheme's arithmetic: rounding of each op's output and the linears' activation split."""

    def __init__(self, scheme):
        self.scheme = scheme
        self.max_in = {}  # linear -> max |x| at its input

    def round(self, a):
        return a if self.scheme == "f64" else a.astype(np.float32).astype(np.float64)

    def operand(self, x):
        """x as the tensor cores would take it: the sum of the scheme's terms (exact in float64)."""
        if self.scheme == "f64":
            return x
        x32 = x.astype(np.float32)
        rnd = round_bf16 if self.scheme in ("bf16", "two_term_bf16") else round_f16
        hi = rnd(x32)
        if self.scheme in ("bf16", "f16"):
            return hi.astype(np.float64)
        return hi.astype(np.float64) + rnd(x32 - hi).astype(np.float64)  # x32 - hi is exact in float32

    def linear(self, name, x, w, b=None):
        """x (T, K), w (N, K), b (N) -> (T, N) = x w^T + b."""
        self.max_in[name] = max(self.max_in.get(name, 0.0), float(np.abs(x).max()))
        y = self.operand(x) @ w.T
        if b is not None:
            y += b
        return self.round(y)


def norm(ar, x, w, b, eps):
    """LayerNorm (b given: gpt) or RMSNorm over the last axis, statistics in float64 (as ref.c)."""
    x0 = x - x.mean(-1, keepdims=True) if b is not None else x
    y = x0 * (1.0 / np.sqrt((x0 * x0).mean(-1, keepdims=True) + eps)) * w
    return ar.round(y + b if b is not None else y)


def rope(m, v):
    """HF rotate-half RoPE on v (N, Q, heads, HD) at positions 0..Q-1."""
    h = v.shape[-1] // 2
    c, s = m.cos[None, :, None, :], m.sin[None, :, None, :]
    return np.concatenate([v[..., :h] * c - v[..., h:] * s, v[..., h:] * c + v[..., :h] * s], axis=-1)


def attention(q, k, v):
    """Causal softmax(q k^T / sqrt(HD)) v; q (N, Q, H, HD), k and v (N, Q, KVH, HD); query head h reads kv head
    h / (H / KVH). Returns (N, Q, H, HD)."""
    g = q.shape[2] // k.shape[2]
    q, k, v = (a.transpose(0, 2, 1, 3) for a in (q, np.repeat(k, g, axis=2), np.repeat(v, g, axis=2)))
    s = q @ k.transpose(0, 1, 3, 2) / math.sqrt(q.shape[-1])
    Q = s.shape[-1]
    s = np.where(np.tril(np.ones((Q, Q), dtype=bool)), s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    return (p / p.sum(-1, keepdims=True) @ v).transpose(0, 2, 1, 3)


def forward(m, ar, h, codes):
    """Teacher-forced logits (N, Q-1, V) of levels 1..Q-1: position 0 = in(h), position p = emb(p-1)(c(p-1)),
    logits_l = heads[l-1] . final_norm(x[l]) (SPEC section 1), every op in ar's arithmetic."""
    c = m.cfg
    N, Q, D, H, KV, HD, F = len(h), c["levels"], c["dim"], c["heads"], c["kv_heads"], c["head_dim"], c["ffn_dim"]
    eps, gpt = float(np.float32(c["norm_eps"])), c["block"] == "gpt"
    x = np.empty((N, Q, D))
    x[:, 0] = ar.linear("in_proj", h.astype(np.float64), m.get("in_proj.weight"), m.get("in_proj.bias"))
    x[:, 1:] = m.get("embed.weight")[np.arange(Q - 1)[None, :], codes[:, :Q - 1]]
    if m.get("pos.weight") is not None:
        x = ar.round(x + m.get("pos.weight")[None])
    x = x.reshape(N * Q, D)
    for i in range(c["layers"]):
        p = f"layers.{i}."
        n = norm(ar, x, m.get(p + "norm1.weight"), m.get(p + "norm1.bias"), eps)
        qkv = ar.linear("qkv", n, m.get(p + "qkv.weight"), m.get(p + "qkv.bias")).reshape(N, Q, H + 2 * KV, HD)
        q, k, v = qkv[:, :, :H], qkv[:, :, H:H + KV], qkv[:, :, H + KV:]
        if c["rope"]:
            q, k = ar.round(rope(m, q)), ar.round(rope(m, k))
        att = ar.round(attention(q, k, v)).reshape(N * Q, H * HD)
        x = ar.round(x + ar.linear("out", att, m.get(p + "out.weight"), m.get(p + "out.bias")))
        n = norm(ar, x, m.get(p + "norm2.weight"), m.get(p + "norm2.bias"), eps)
        f = ar.linear("fc1", n, m.get(p + "fc1.weight"), m.get(p + "fc1.bias"))
        if gpt:  # exact (erf) GELU
            f = 0.5 * f * (1.0 + _erf(f / math.sqrt(2.0)).astype(np.float64))
        else:  # SwiGLU: fc1 holds the gate rows, then the up rows
            f = f[:, :F] / (1.0 + np.exp(-f[:, :F])) * f[:, F:]
        x = ar.round(x + ar.linear("fc2", ar.round(f), m.get(p + "fc2.weight"), m.get(p + "fc2.bias")))
    y = norm(ar, x.reshape(N, Q, D)[:, 1:], m.get("norm.weight"), m.get("norm.bias"), eps)
    heads = m.get("heads.weight")
    return np.stack([ar.linear("heads", y[:, l], heads[l]) for l in range(Q - 1)], axis=1)


def gumbel(rng, shape):
    """Gumbel noise as SPEC section 3 forms it from a uniform (odd multiples of 2^-24), from numpy's generator."""
    u = (2.0 * rng.integers(0, 1 << 23, size=shape) + 1.0) * 2.0 ** -24
    return (-np.log(-np.log(u))).astype(np.float32)


def sample(z, g):
    """Codes (N, L): argmax over the top-k set of z/T + g (ties to the lowest index), in float64."""
    z = z.astype(np.float64)
    kth = np.partition(z, -TOP_K, axis=-1)[..., -TOP_K][..., None]
    return np.where(z >= kth, z / TEMPERATURE + g, -np.inf).argmax(-1)


def compare(z, z64, g):
    """The study's measures of logits z (N, L, V) against the f64 logits z64 with Gumbel noise g."""
    scale = np.abs(z64).max(axis=(0, 2))
    err = np.abs(z.astype(np.float64) - z64) / scale[None, :, None]
    max_l, mean_l = err.max(axis=(0, 2)), err.mean(axis=(0, 2))
    return {"streams": len(z), "pairs": int(z.shape[0] * z.shape[1]),
            "max_err": float(max_l.max()), "mean_err": float(mean_l.mean()),
            "top1_agree": int(np.count_nonzero(z.argmax(-1) == z64.argmax(-1))),
            "sampled_agree": int(np.count_nonzero(sample(z, g) == sample(z64, g))),
            "max_err_per_level": [float(e) for e in max_l], "mean_err_per_level": [float(e) for e in mean_l]}


def engine_logits(args, model_path, h, codes, backend):
    tag = f"{args.model}_{backend}_{len(h)}"
    hp, cp, lp = (os.path.join(args.workdir, f"{tag}_{s}.npy") for s in ("hidden", "codes", "logits"))
    np.save(hp, h)
    np.save(cp, codes)
    subprocess.run([args.depthdec, "score", "--model", model_path, "--hidden", hp, "--codes", cp, "--out", lp,
                    "--backend", backend, "--quiet"], check=True)
    return np.load(lp)


def host_info():
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    return {"host": platform.node(), "cpu": cpu, "cores": os.cpu_count(), "commit": rev, "numpy": np.__version__,
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", choices=("gpt", "csm"), required=True, help="synthetic dims to export and study")
    ap.add_argument("--streams", type=int, default=64, help="random streams for the schemes and the cpu backend")
    ap.add_argument("--ref-streams", type=int, default=32, help="the first N streams also go through ref")
    ap.add_argument("--backends", default="ref,cpu",
                    help="engine backends to compare, comma-separated, or '' for none (ref is the validation)")
    ap.add_argument("--chunk", type=int, default=32, help="streams per numpy forward (memory)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--depthdec", default="build/depthdec")
    ap.add_argument("--workdir", default="/tmp/scheme_study")
    ap.add_argument("--json", required=True, help="JSON lines output")
    args = ap.parse_args()
    os.makedirs(args.workdir, exist_ok=True)
    model_path = os.path.join(args.workdir, f"{args.model}.safetensors")
    subprocess.run([args.depthdec, "export", "--synthetic", args.model, "--weights", "bf16", "--out", model_path,
                    "--quiet"], check=True)
    m = Model(model_path)
    c = m.cfg
    N, Q, V = args.streams, c["levels"], c["codebook_size"]
    rng = np.random.default_rng(args.seed)
    h = rng.standard_normal((N, c["input_dim"])).astype(np.float32)
    codes = rng.integers(0, V, size=(N, Q)).astype(np.int32)
    g = gumbel(rng, (N, Q - 1, V))
    backends = args.backends.split(",") if args.backends else []
    ref_streams = min(args.ref_streams, N) if "ref" in backends else 0
    run = {"kind": "run", "model": args.model, "streams": N, "ref_streams": ref_streams, "seed": args.seed,
           **host_info()}
    lines = [run, {"kind": "weights", "model": args.model, **m.f16_report}]

    logits = {}
    for scheme in SCHEMES:
        t0, ar = time.time(), Arith(scheme)
        logits[scheme] = np.concatenate([forward(m, ar, h[i:i + args.chunk], codes[i:i + args.chunk])
                                         for i in range(0, N, args.chunk)])
        log(f"{args.model} {scheme}: {time.time() - t0:.0f} s")
        if scheme == "f64":
            max_in = ar.max_in
            lines.append({"kind": "activations", "model": args.model, "max_abs_linear_input": max_in})
    z64 = logits["f64"]
    results = [(s, compare(logits[s], z64, g)) for s in SCHEMES[1:]]
    for backend in backends:
        n = ref_streams if backend == "ref" else N
        t0 = time.time()
        zb = engine_logits(args, model_path, h[:n], codes[:n], backend)
        log(f"{args.model} backend {backend} ({n} streams): {time.time() - t0:.0f} s")
        r = compare(zb, z64[:n], g[:n])
        results.append((f"backend {backend}", r))
        if backend == "ref":
            lines.append({"kind": "validation", "model": args.model, "against": "ref", "streams": n,
                          "max_rel_diff": r["max_err"], "mean_rel_diff": r["mean_err"],
                          "top1_agree": r["top1_agree"], "pairs": r["pairs"], "ok": r["max_err"] < VALIDATION_TOL})
    lines += [{"kind": "result", "model": args.model, "scheme": s, **r} for s, r in results]
    with open(args.json, "w") as f:
        for obj in lines:
            f.write(json.dumps(obj) + "\n")

    w = m.f16_report
    print(f"{args.model} dims, {N} streams" + (f" (ref: the first {ref_streams})" if ref_streams else "") +
          f", seed {args.seed}, {run['date']}, {run['host']} ({run['cpu']}), depthdec {run['commit']}")
    print(f"matrix weights not exact in float16: {w['f16_inexact']} of {w['matrix_weights']} as stored, "
          f"{w['f16_inexact_pow2_scaled']} after a per-tensor power-of-two scale")
    print("max |x| at the linears' inputs (f64): " + ", ".join(f"{k} {v:.3g}" for k, v in max_in.items()))
    for obj in lines:
        if obj["kind"] == "validation":
            print(f"validation, numpy f64 vs engine ref ({obj['streams']} streams): max rel diff "
                  f"{obj['max_rel_diff']:.2e}, top-1 {obj['top1_agree']}/{obj['pairs']}: "
                  f"{'ok' if obj['ok'] else 'FAILED'}")
    print(f"{'vs f64':<18} {'streams':>7} {'max err':>9} {'mean err':>9} {'top-1 agree':>18} {'sampled agree':>18}")
    for s, r in results:
        p = r["pairs"]
        print(f"{s:<18} {r['streams']:>7} {r['max_err']:>9.2e} {r['mean_err']:>9.2e} "
              f"{r['top1_agree']:>6}/{p} {100 * r['top1_agree'] / p:6.2f}% "
              f"{r['sampled_agree']:>6}/{p} {100 * r['sampled_agree'] / p:6.2f}%")


if __name__ == "__main__":
    main()
