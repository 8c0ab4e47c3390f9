#!/usr/bin/env python3
"""make_fixtures_kyutai_mlx.py -- tiny Moshi LMs in Kyutai's MLX format (the `moshi_mlx` package, kyutai-labs/moshi
moshi_mlx/, PyPI `moshi_mlx`), written, quantized and run by moshi_mlx / MLX themselves, with float64 references.

Writes into --out (default tests/fixtures), for each of three fixtures NAME:
  kyutai_mlx_q8/model.q8.safetensors  as kyutai/moshiko-mlx-q8: moshi_mlx Lm, set_dtype(bfloat16),
                                      nn.quantize(model, bits=8, group_size=64), Module.save_weights
  kyutai_mlx_q4/model.q4.safetensors  as kyutai/moshiko-mlx-q4: the same model, bits=4, group_size=32
  kyutai_mlx_bf16/model.safetensors   as kyutai/moshika-mlx-bf16: a smaller Lm, bf16, not quantized; its norms
                                      shared by the slices (as Kyutai's PyTorch -> MLX conversion leaves them), while
                                      the q8/q4 model has its own norms per slice (moshi_mlx keeps one per slice)
  NAME/config.json         the Lm kwargs (Kyutai's config.json keys: LmConfig.from_config_dict reads them)
  NAME_hidden.npy  f32 [N, IN]   temporal-transformer output (the depformer's input)
  NAME_text.npy    i32 [N]       the frame's text token in [0, text_card]
  NAME_codes.npy   i32 [N, Q]    teacher-forcing codes in [0, card] (card = the initial/pad row)
  NAME_logits.npy  f32 [N, Q, V] teacher-forced logits of all Q levels: float64 numpy from the weights as stored
                                 (quantized ones dequantized in float32 as MLX does), cast to f32
  NAME_greedy.npy  i32 [N, Q]    greedy codes from moshi_mlx's own DepFormer.sample (Sampler(temp=0): argmax)

MLX has no float64 on the CPU, so moshi_mlx runs here in float32 (the loaded model set_dtype(float32): bf16 -> f32 is
exact; the U32 words stay): its teacher-forced logits (the modules DepFormer.sample calls, with the codes forced)
are checked against the float64 re-implementation (max rel err printed, must be < 2e-5), its greedy codes against
the float64 argmax, and mx.dequantize against the float32 dequantization used here (bit-identical). moshi_mlx's
depformer attention has no GQA (Attention asserts kv_repeat == 1): these models are multi-head.
Needs: mlx (`pip install "mlx[cpu]"` on Linux), moshi_mlx (`pip install --no-deps moshi_mlx`: its rustymimi
dependency builds from source with cargo and is only needed for the Mimi codec), numpy."""
import datetime
import json
import os
import sys

import mlx.core as mx
import mlx.nn as nn
import numpy as np
from mlx.utils import tree_flatten
from moshi_mlx import models
from moshi_mlx.utils import sampling

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fixture_common  # noqa: E402

N = 6
GAP_REL = 1e-3
# the temporal transformer has no layers: its tensors (text_emb, audio_embs, out_norm, text_linear) are still in
# the file and ignored by depthdec; 0 layers keeps the file small and the kwargs exact for from_config_dict (which
# fixes the temporal MLP at 4 x dim, whose gated width 11 x dim / 4 a group of 64 would not divide)
BASE = dict(text_card=40, n_q=4, dep_q=4, card=32, num_heads=4, num_layers=0, causal=True, layer_scale=None,
            context=10, max_period=10000, positional_embedding="rope", depformer_num_layers=2,
            depformer_pos_emb="none", depformer_context=4, delays=[0] * 5)
# q8/q4: every quantized width (D, IN, F) a multiple of 64 for q8's group; F = 2 * 96 // 3 = 64
KW_Q = dict(BASE, dim=64, depformer_dim=64, depformer_dim_feedforward=96, depformer_num_heads=4)
KW_BF16 = dict(BASE, dim=48, depformer_dim=32, depformer_dim_feedforward=96, depformer_num_heads=4)
FIXTURES = [("kyutai_mlx_q8", "model.q8.safetensors", KW_Q, 8, 64, 50, False),
            ("kyutai_mlx_q4", "model.q4.safetensors", KW_Q, 4, 32, 50, False),
            ("kyutai_mlx_bf16", "model.safetensors", KW_BF16, 0, 0, 60, True)]


def build(kw):
    return models.Lm(models.LmConfig.from_config_dict(kw))


def randomize(lm, seed, shared_norms):
    """Random float32 weights: RMSNorm weights 1 + 0.3 N(0,1) (one draw per layer copied into every slice when
    shared_norms), tables N(0,1), linears N(0,1)/sqrt(in)."""
    rng = np.random.default_rng(seed)
    flat = dict(tree_flatten(lm.parameters()))
    new, norms = {}, {}
    for k, v in sorted(flat.items()):
        shape = v.shape
        if k.endswith("norm1.weight") or k.endswith("norm2.weight") or k.endswith("out_norm.weight"):
            key = k.split("transformer.", 1)[-1] if shared_norms else k
            if key not in norms:
                norms[key] = 1 + 0.3 * rng.standard_normal(shape)
            a = norms[key]
        elif "emb" in k:
            a = rng.standard_normal(shape)
        else:
            a = rng.standard_normal(shape) / np.sqrt(shape[-1])
        new[k] = mx.array(a.astype(np.float32))
    lm.load_weights(list(new.items()), strict=True)


def load_as_published(path, kw, bits, group):
    """The file read as moshi_mlx's runners read it (run_inference.py / local_web.py: set_dtype(bfloat16),
    nn.quantize with the file's bits and group, load_weights strict), then float32 for the CPU run."""
    lm = build(kw)
    lm.set_dtype(mx.bfloat16)
    if bits:
        nn.quantize(lm, bits=bits, group_size=group)
    lm.load_weights(path, strict=True)
    lm.set_dtype(mx.float32)
    return lm


def dequant_f32(q, scales, biases, bits, group):
    """MLX affine dequantization in float32, two roundings (fl32(fl32(scale * q) + bias)), low bits first."""
    q = np.asarray(q).astype(np.uint32)
    per = 32 // bits
    vals = np.stack([(q >> (bits * i)) & ((1 << bits) - 1) for i in range(per)], -1).reshape(q.shape[0], -1)
    s = np.repeat(np.asarray(scales, np.float32), group, -1)
    b = np.repeat(np.asarray(biases, np.float32), group, -1)
    return (s * vals.astype(np.float32)).astype(np.float32) + b


def weights_f64(lm, bits, group):
    """Every depformer matrix and table as float64 (quantized ones dequantized in float32 first), by slice."""
    flat = {k: v for k, v in tree_flatten(lm.parameters())}
    out = {}
    for k, v in flat.items():
        if not k.startswith("depformer.") or k.endswith(".scales") or k.endswith(".biases"):
            continue
        base = k[:-len(".weight")]
        if base + ".scales" in flat:
            w = dequant_f32(np.array(v), np.array(flat[base + ".scales"]), np.array(flat[base + ".biases"]), bits, group)
            ref = np.array(mx.dequantize(v, flat[base + ".scales"], flat[base + ".biases"], group_size=group, bits=bits))
            assert np.array_equal(w, ref), f"{k}: mx.dequantize differs from the float32 two-rounding form"
        else:
            w = np.array(v, np.float32)
        out[k] = w.astype(np.float64)
    return out


def rms(x, w, eps=1e-8):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w


def ref_depformer(W, kw, h, tokens):
    """float64 depformer (moshi_mlx DepFormer.sample's math): position p's input linear_in_p(h) + emb_p(tokens[p]),
    tokens[0] the text token, tokens[p] code p-1; slice p's layers; causal MHA over the frame (no positions, scale
    head_dim^-0.5); RMSNorm eps 1e-8; gated SiLU MLP; logits linear_out_p. Returns [B, Q, V]."""
    Q, D, H = kw["dep_q"], kw["depformer_dim"], kw["depformer_num_heads"]
    HD, B = D // H, h.shape[0]
    ks = [[None] * Q for _ in range(kw["depformer_num_layers"])]
    vs = [[None] * Q for _ in range(kw["depformer_num_layers"])]
    logits = []
    for p in range(Q):
        S = f"depformer.slices.{p}."
        x = h @ W[S + "linear_in.weight"].T + W[S + "emb.weight"][tokens[:, p]]
        for i in range(kw["depformer_num_layers"]):
            P = f"{S}transformer.layers.{i}."
            n = rms(x, W[P + "norm1.weight"])
            qkv = n @ W[P + "self_attn.in_proj.weight"].T
            q, k, v = (qkv[:, j * D:(j + 1) * D].reshape(B, H, HD) for j in range(3))
            ks[i][p], vs[i][p] = k, v
            K, Vv = np.stack(ks[i][:p + 1], 2), np.stack(vs[i][:p + 1], 2)  # [B, H, p+1, HD]
            att = np.einsum("bhd,bhtd->bht", q, K) * HD ** -0.5
            att = np.exp(att - att.max(-1, keepdims=True))
            att /= att.sum(-1, keepdims=True)
            o = np.einsum("bht,bhtd->bhd", att, Vv).reshape(B, D)
            x = x + o @ W[P + "self_attn.out_proj.weight"].T
            g = rms(x, W[P + "norm2.weight"]) @ W[P + "gating.linear_in.weight"].T
            F = g.shape[-1] // 2
            x = x + (g[:, :F] / (1 + np.exp(-g[:, :F])) * g[:, F:]) @ W[P + "gating.linear_out.weight"].T
        logits.append(x @ W[S + "linear_out.weight"].T)
    return np.stack(logits, 1)


def mlx_teacher_forced(lm, h, tokens):
    """moshi_mlx's own modules in DepFormer.sample's order, the inputs forced: [B, Q, V] float32."""
    cache = lm.depformer_cache
    for c in cache:
        c.reset()
    hh = mx.array(h.astype(np.float32))[:, None]
    out = []
    for p, sl in enumerate(lm.depformer.slices):
        xs = sl.linear_in(hh) + sl.emb(mx.array(tokens[:, p:p + 1]))
        xs = sl.transformer(xs, cache=cache)
        out.append(np.array(sl.linear_out(xs))[:, 0])
    return np.stack(out, 1)


def mlx_greedy(lm, h, text):
    """moshi_mlx's DepFormer.sample with an argmax sampler (Sampler(temp=0)), as Lm._sample calls it."""
    toks = lm.depformer.sample(mx.array(h.astype(np.float32))[:, None], sampling.Sampler(temp=0.0),
                               mx.array(text[:, None]), lm.depformer_cache)
    return np.array(toks).reshape(h.shape[0], -1).astype(np.int64)


def make(args, name, fname, kw, bits, group, seed, shared_norms, log):
    Q, V, TV, IN = kw["dep_q"], kw["card"], kw["text_card"], kw["dim"]
    d = os.path.join(args.out, name)
    os.makedirs(d, exist_ok=True)
    path = os.path.join(d, fname)
    mx.random.seed(seed)
    lm = build(kw)
    randomize(lm, seed, shared_norms)
    lm.set_dtype(mx.bfloat16)  # as Kyutai's conversions: the bf16 model, quantized when q8/q4
    if bits:
        nn.quantize(lm, bits=bits, group_size=group)
    lm.save_weights(path)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(kw, f, indent=1)

    ref = load_as_published(path, kw, bits, group)
    W = weights_f64(ref, bits, group)
    rng = np.random.default_rng(seed + 1)
    text = rng.permutation(TV + 1)[:N].astype(np.int32)
    text[0], text[1] = TV, 0
    codes = rng.integers(0, V, size=(N, Q)).astype(np.int32)
    codes[1, :Q - 1] = V
    codes[2, 2] = V
    hid = rng.standard_normal((N, IN)).astype(np.float32)

    def toks(tx, cs):
        return np.concatenate([tx[:, None], cs[:, :Q - 1]], 1).astype(np.int32)

    def greedy64(h, tx):
        g = np.zeros((h.shape[0], Q), np.int64)
        for p in range(Q):  # position p's argmax given the greedy codes before it
            g[:, p] = ref_depformer(W, kw, h.astype(np.float64), toks(tx, g))[:, p].argmax(-1)
        return g

    def row_gap(r):
        lg = ref_depformer(W, kw, hid[r:r + 1].astype(np.float64), toks(text[r:r + 1], greedy64(hid[r:r + 1],
                                                                                           text[r:r + 1])))[0]
        z = np.sort(lg, -1)
        return ((z[:, -1] - z[:, -2]) / np.abs(lg).max()).min()

    gaps = fixture_common.resample_for_gaps(hid, rng, row_gap, GAP_REL)
    gr = greedy64(hid, text)
    logits64 = ref_depformer(W, kw, hid.astype(np.float64), toks(text, codes))
    lg32 = mlx_teacher_forced(ref, hid, toks(text, codes))
    rel = np.abs(lg32 - logits64).max() / np.abs(logits64).max()
    grm = mlx_greedy(ref, hid, text)
    print(f"{name}: moshi_mlx float32 teacher-forced logits vs float64: max rel err {rel:.3g}; moshi_mlx greedy "
          f"codes {'==' if (grm == gr).all() else '!='} float64 greedy; smallest greedy gap {min(gaps):.3g}")
    assert rel < 2e-5 and (grm == gr).all()
    how = (f"nn.quantize bits={bits} group_size={group} of the bf16 model" if bits else "bf16, not quantized")
    files = {
        "hidden": (hid, f"temporal hidden state, N(0,1) f32, resampled for greedy gaps > {GAP_REL:g}*max|logit| "
                   f"(smallest {min(gaps):.3g})"),
        "text": (text, f"text token per row in [0,{TV}]; {TV} (the extra row) at row 0, 0 at row 1"),
        "codes": (codes, f"teacher-forcing codes in [0,{V}]; {V} = initial/pad row (row 1 levels 0..Q-2, row 2 "
                  "level 2); column Q-1 is never an input"),
        "logits": (logits64.astype(np.float32), "teacher-forced logits of levels 0..Q-1, float64 numpy from the "
                   f"stored weights (moshi_mlx float32 within {rel:.2g} rel), cast to f32"),
        "greedy": (gr.astype(np.int32), "greedy codes c0..c(Q-1) given hidden+text: moshi_mlx DepFormer.sample "
                   "(Sampler temp 0) == float64 argmax"),
    }
    log += [(f"{name}/{fname}", f"moshi_mlx Lm.save_weights, {how}, whole tiny Lm (0 temporal layers)"),
            (f"{name}/config.json", "the Lm kwargs (Kyutai config.json keys)")]
    for k, (a, desc) in files.items():
        fn = f"{name}_{k}.npy"
        np.save(os.path.join(args.out, fn), a)
        log.append((fn, desc))
    return dict(Q=Q, V=V, TV=TV, IN=IN, D=kw["depformer_dim"], L=kw["depformer_num_layers"],
                H=kw["depformer_num_heads"], F=2 * kw["depformer_dim_feedforward"] // 3, bits=bits, group=group,
                shared_norms=shared_norms)


def main():
    args = fixture_common.start(__doc__, torch_settings=False)
    mx.set_default_device(mx.cpu)
    log, dims = [], {}
    for name, fname, kw, bits, group, seed, shared in FIXTURES:
        dims[name] = make(args, name, fname, kw, bits, group, seed, shared, log)
    import importlib.metadata as md
    vers = (f"python {sys.version.split()[0]}, mlx {mx.__version__}, moshi_mlx {md.version('moshi_mlx')}, "
            f"numpy {np.__version__}")
    lines = [f"# date (UTC): {datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d %H:%M:%S')}",
             f"# versions: {vers}", f"# dims: N={N}; {dims}",
             "# references: float64 numpy from the weights as stored (MLX has no float64 on the CPU; moshi_mlx ran "
             "in float32 and was checked against them); logits saved as float32",
             "# file | bytes | shape dtype | how"] + fixture_common.manifest_rows(args.out, log)
    fixture_common.write_manifest_section(args.out, "scripts/make_fixtures_kyutai_mlx.py", lines)
    fixture_common.report(args.out, log, vers)


if __name__ == "__main__":
    main()
