#!/usr/bin/env python3
"""make_fixtures.py -- tiny random depth decoders + float64 reference outputs (the CI oracle).

Writes into --out (default tests/fixtures):
  gpt_{f16,bf16,q8}.safetensors   native layout (SPEC §4), block "gpt", built from transformers' GPT2Model
  csm_tiny/                       HF layout: CsmForConditionalGeneration.save_pretrained (bf16), codec_model.*
                                  tensors removed from model.safetensors
  {name}_hidden.npy  f32 [N, input_dim]   backbone hidden states (references use exactly these f32 values)
  {name}_codes.npy   i32 [N, Q]           random codes for teacher forcing
  {name}_logits.npy  f32 [N, Q-1, V]      teacher-forced logits of levels 1..Q-1 given codes 0..Q-2
  {name}_logits0.npy f32 [N, V]           head0 . h
  {name}_greedy.npy  i32 [N, Q]           greedy codes (c0 = argmax logits0, lowest index on ties)
  MANIFEST.txt
Every reference is float64 on the CPU, computed from the weights AS STORED in that file (f16/bf16-rounded or
dequantized q8), with transformers' own forward, and cross-checked against an independent numpy
re-implementation of SPEC §1/§2 (incremental passes with a KV cache) that reads the written files back.
Deterministic: all randomness comes from numpy Generators with fixed seeds.
"""
import datetime
import json
import math
import os

import fixture_common  # scripts/fixture_common.py
import numpy as np
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file
from transformers import CsmConfig, CsmForConditionalGeneration, GPT2Config, GPT2Model
from transformers.models.csm import modeling_csm

Q, V, IN, D, N = 8, 64, 96, 64, 6          # levels, codebook size, input_dim, dim, rows per fixture
GPT = dict(L=2, H=4, KVH=4, HD=16, F=4 * D)
CSM = dict(L=2, H=4, KVH=2, HD=16, F=128)
EPS = 1e-5
GROUP, BITS = 32, 8
# llama3 scaling chosen so that all three branches occur for HD=16, theta=5e5: freq 0 (wavelen 6.3 < 32/4)
# unchanged, freq 1 (wavelen 32.4) smoothed, freqs 2..7 (wavelen > 32/0.5) divided by the factor.
ROPE = dict(rope_type="llama3", rope_theta=500000.0, factor=32.0, low_freq_factor=0.5, high_freq_factor=4.0,
            original_max_position_embeddings=32)
GAP_REL = 1e-3   # greedy steps must have top1 - top2 > GAP_REL * max|logit|
TOL = 1e-10      # cross-check: max|diff| / max|logit|
torch.set_default_dtype(torch.float32)
LOG = []         # (file, description) for MANIFEST


def f64(t):
    """torch tensor (any float dtype) -> float64 numpy."""
    return t.detach().to(torch.float64).cpu().numpy()


# ----------------------------------------------------------------------------------------------------------------
# MLX affine quantization (rule of mlx >= 0.12.2)
def mlx_quantize(w, group=GROUP, bits=BITS):
    """w [..., K] -> (packed u32 [..., K*bits/32], scales f16, biases f16, dequantized float64).
    Arithmetic in float32 on float32(w): bit-identical to mlx.core.quantize on a float32 array (checked against
    mlx 0.32 when it is importable); scales/biases are then rounded to float16 for storage."""
    shp, K, f = w.shape[:-1], w.shape[-1], np.float32
    n_bins = f(2 ** bits - 1)
    g = w.astype(f).reshape(-1, K // group, group)
    wmax, wmin = g.max(-1, keepdims=True), g.min(-1, keepdims=True)
    edge_is_min = np.abs(wmin) > np.abs(wmax)
    s = np.maximum((wmax - wmin) / n_bins, f(1e-7))
    s = np.where(edge_is_min, s, -s)                           # edge is the max -> negative scale
    edge = np.where(edge_is_min, wmin, wmax)
    q0 = np.round(edge / s)
    s = np.where(q0 != 0, edge / np.where(q0 != 0, q0, f(1)), s)
    b = np.where(q0 != 0, edge, f(0))
    q = np.clip(np.round((g - b) / s), 0, n_bins).astype(np.uint8)
    packed = q.reshape(-1, K // 4, 4).copy().view("<u4").reshape(*shp, K // 4)   # byte k of each u32 = elem k
    try:                                                       # optional independent check
        import mlx.core as mx
        mq, ms, mb = (np.array(t) for t in mx.quantize(mx.array(w.astype(f)), group_size=group, bits=bits))
        assert np.array_equal(mq, packed) and np.array_equal(ms, s.reshape(*shp, -1)) and \
            np.array_equal(mb, b.reshape(*shp, -1)), "differs from mlx.core.quantize"
    except ImportError:
        pass
    s16, b16 = s.astype(np.float16), b.astype(np.float16)
    deq = s16.astype(np.float64) * q + b16.astype(np.float64)      # reference uses the STORED scales/biases
    return packed, s16.reshape(*shp, K // group), b16.reshape(*shp, K // group), deq.reshape(w.shape)


def read_native(path):
    """Native .safetensors -> (config dict, {name: float64 array}); q8 tensors dequantized (SPEC §4)."""
    with safe_open(path, framework="pt") as f:
        cfg = json.loads(f.metadata()["depthdec.config"])
        raw = {k: f.get_tensor(k) for k in f.keys()}
    out = {}
    for k, t in raw.items():
        if k.endswith(".scales") or k.endswith(".biases"):
            continue
        stem = k[: -len(".weight")] if k.endswith(".weight") else None
        if stem and stem + ".scales" in raw:
            u = t.view(torch.int32).numpy().view("<u4")
            bits = 32 * u.shape[-1] // (raw[stem + ".scales"].shape[-1] * cfg["quantization"]["group_size"])
            assert bits == 8
            q = u.view(np.uint8).reshape(*u.shape[:-1], -1).astype(np.float64)
            gs = cfg["quantization"]["group_size"]
            sc = np.repeat(f64(raw[stem + ".scales"]), gs, -1)
            bi = np.repeat(f64(raw[stem + ".biases"]), gs, -1)
            out[k] = sc * q + bi
        else:
            out[k] = f64(t)
    return cfg, out


# ----------------------------------------------------------------------------------------------------------------
# Independent float64 re-implementation of SPEC §1/§2 (numpy, incremental passes with a KV cache)
def llama3_inv_freq(hd, r):
    inv = r["rope_theta"] ** (-np.arange(0, hd, 2, dtype=np.float64) / hd)
    wl = 2 * math.pi / inv
    old, lo, hi, fac = r["original_max_position_embeddings"], r["low_freq_factor"], r["high_freq_factor"], r["factor"]
    smooth = (old / wl - lo) / (hi - lo)
    out = np.where(wl > old / lo, inv / fac, inv)
    mid = (wl >= old / hi) & (wl <= old / lo)
    return np.where(mid, (1 - smooth) * inv / fac + smooth * inv, out)


def norm(x, w, b, block):
    if block == "gpt":
        mu = x.mean(-1, keepdims=True)
        return (x - mu) / np.sqrt(((x - mu) ** 2).mean(-1, keepdims=True) + EPS) * w + b
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + EPS) * w


def gelu(x):
    return 0.5 * x * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))


def spec_run(m, h, codes=None):
    """SPEC §1 frame algorithm for all rows at once. m: normalized weights (see gpt_spec_model/csm_spec_model).
    codes given -> teacher-forced logits [N, Q-1, V]; else greedy codes [N, Q] (c0 = argmax head0.h)."""
    H, KVH, HD, block = m["H"], m["KVH"], m["HD"], m["block"]
    c = [codes[:, 0] if codes is not None else np.argmax(h @ m["head0"].T, -1)]
    x_h = h @ m["in_w"].T + m["in_b"]
    new, p0, cache, logits = [x_h, m["emb"](0, c[0])], 0, [([], []) for _ in m["layers"]], []
    for lvl in range(1, Q):
        x = np.stack(new, 1)                                    # [N, n_new, D]
        pos = np.arange(p0, p0 + x.shape[1])
        if m["pos"] is not None:
            x = x + m["pos"][pos]
        for ly, (kc, vc) in zip(m["layers"], cache):
            a = norm(x, ly["n1w"], ly["n1b"], block)
            qkv = a @ ly["qkv"].T + ly["qkv_b"]
            q = qkv[..., : H * HD].reshape(*x.shape[:2], H, HD)
            k = qkv[..., H * HD: (H + KVH) * HD].reshape(*x.shape[:2], KVH, HD)
            v = qkv[..., (H + KVH) * HD:].reshape(*x.shape[:2], KVH, HD)
            if m["inv_freq"] is not None:                       # HF rotate-half: pairs (j, j + HD/2)
                ang = pos[:, None] * m["inv_freq"][None, :]
                cos, sin = np.cos(np.concatenate([ang, ang], -1)), np.sin(np.concatenate([ang, ang], -1))
                rot = lambda t: np.concatenate([-t[..., HD // 2:], t[..., : HD // 2]], -1)
                q = q * cos[None, :, None] + rot(q) * sin[None, :, None]
                k = k * cos[None, :, None] + rot(k) * sin[None, :, None]
            kc.append(k), vc.append(v)
            K, Vv = np.concatenate(kc, 1), np.concatenate(vc, 1)   # [N, S, KVH, HD]
            kvh = np.arange(H) // (H // KVH)                       # GQA: q head h reads kv head h / (H/KVH)
            s = np.einsum("nqhd,nshd->nhqs", q, K[:, :, kvh]) / math.sqrt(HD)
            s = np.where(np.arange(K.shape[1])[None, :] <= pos[:, None], s, -np.inf)  # causal
            s = np.exp(s - s.max(-1, keepdims=True))
            s /= s.sum(-1, keepdims=True)
            o = np.einsum("nhqs,nshd->nqhd", s, Vv[:, :, kvh]).reshape(*x.shape[:2], H * HD)
            x = x + o @ ly["out"].T + ly["out_b"]
            a = norm(x, ly["n2w"], ly["n2b"], block)
            if block == "gpt":
                x = x + gelu(a @ ly["fc1"].T + ly["fc1_b"]) @ ly["fc2"].T + ly["fc2_b"]
            else:
                gu = a @ ly["fc1"].T                                # gate rows then up rows
                g, u = gu[..., : ly["fc1"].shape[0] // 2], gu[..., ly["fc1"].shape[0] // 2:]
                x = x + (g / (1 + np.exp(-g)) * u) @ ly["fc2"].T
        y = norm(x[:, -1], m["nw"], m["nb"], block)
        z = y @ m["heads"][lvl - 1].T
        logits.append(z)
        c.append(codes[:, lvl] if codes is not None else np.argmax(z, -1))
        p0 += x.shape[1]
        new = [m["emb"](lvl, c[lvl])] if lvl < Q - 1 else []
    return np.stack(logits, 1) if codes is not None else np.stack(c, 1)


def gpt_spec_model(cfg, w):
    zero = np.zeros(1)
    lay = [dict(n1w=w[f"layers.{i}.norm1.weight"], n1b=w[f"layers.{i}.norm1.bias"],
                n2w=w[f"layers.{i}.norm2.weight"], n2b=w[f"layers.{i}.norm2.bias"],
                qkv=w[f"layers.{i}.qkv.weight"], qkv_b=w.get(f"layers.{i}.qkv.bias", zero),
                out=w[f"layers.{i}.out.weight"], out_b=w.get(f"layers.{i}.out.bias", zero),
                fc1=w[f"layers.{i}.fc1.weight"], fc1_b=w.get(f"layers.{i}.fc1.bias", zero),
                fc2=w[f"layers.{i}.fc2.weight"], fc2_b=w.get(f"layers.{i}.fc2.bias", zero))
           for i in range(cfg["layers"])]
    return dict(block=cfg["block"], H=cfg["heads"], KVH=cfg["kv_heads"], HD=cfg["head_dim"], layers=lay,
                in_w=w["in_proj.weight"], in_b=w["in_proj.bias"], emb=lambda j, c: w["embed.weight"][j][c],
                pos=w["pos.weight"], inv_freq=None, nw=w["norm.weight"], nb=w["norm.bias"],
                heads=w["heads.weight"], head0=w["head0.weight"])


def csm_spec_model(hf_cfg, w):
    dc = hf_cfg["depth_decoder_config"]
    p = "depth_decoder.model."
    table = w.get(p + "embed_tokens.weight", w.get("backbone_model.embed_tokens.embed_audio_tokens.weight"))
    in_w = w[p + "inputs_embeds_projector.weight"]
    a = lambda i, n: w[f"{p}layers.{i}.{n}.weight"]
    lay = [dict(n1w=a(i, "input_layernorm"), n1b=0.0, n2w=a(i, "post_attention_layernorm"), n2b=0.0,
                qkv=np.concatenate([a(i, "self_attn.q_proj"), a(i, "self_attn.k_proj"), a(i, "self_attn.v_proj")]),
                qkv_b=0.0, out=a(i, "self_attn.o_proj"), out_b=0.0,
                fc1=np.concatenate([a(i, "mlp.gate_proj"), a(i, "mlp.up_proj")]), fc2=a(i, "mlp.down_proj"))
           for i in range(dc["num_hidden_layers"])]
    Vc = dc["vocab_size"]
    return dict(block="llama", H=dc["num_attention_heads"], KVH=dc["num_key_value_heads"], HD=dc["head_dim"],
                layers=lay, in_w=in_w, in_b=0.0, emb=lambda j, c: table[c + j * Vc] @ in_w.T, pos=None,
                inv_freq=llama3_inv_freq(dc["head_dim"], dc["rope_parameters"]), nw=w[p + "norm.weight"], nb=0.0,
                heads=w["depth_decoder.codebooks_head.weight"].transpose(0, 2, 1),   # [Q-1, D, V] -> [Q-1, V, D]
                head0=w["lm_head.weight"])


# ----------------------------------------------------------------------------------------------------------------
# Shared fixture logic: hidden rows with robust greedy steps, teacher forcing, cross-check, writing
def greedy_with_gaps(tf, logits0, h):
    """Greedy by repeated full forwards. tf(h, codes[N, l]) -> logits of levels 1..l. Returns codes, min rel gap."""
    z = logits0(h)
    c, gaps = [np.argmax(z, -1)], [z]
    for lvl in range(1, Q):
        z = tf(h, np.stack(c, 1))[:, -1]
        c.append(np.argmax(z, -1))
        gaps.append(z)
    rel = []
    for z in gaps:
        top = np.sort(z, -1)
        rel.append((top[:, -1] - top[:, -2]) / np.abs(z).max(-1))
    return np.stack(c, 1), np.min(np.stack(rel, 1), 1)


def make_fixture(name, outdir, seed, tf, logits0, spec_m):
    rng = np.random.default_rng(seed)
    rows, gaps, tried = [], [], 0
    while len(rows) < N:                    # draw candidates; keep rows whose greedy steps all have a clear top-1
        cand = rng.standard_normal((16, IN)).astype(np.float32)
        tried += 16
        _, g = greedy_with_gaps(tf, logits0, cand.astype(np.float64))
        for r, gr in zip(cand, g):
            if gr > GAP_REL and len(rows) < N:
                rows.append(r), gaps.append(gr)
    hid = np.stack(rows)
    h = hid.astype(np.float64)
    codes = rng.integers(0, V, (N, Q)).astype(np.int32)
    logits = tf(h, codes[:, : Q - 1].astype(np.int64))
    l0 = logits0(h)
    greedy, _ = greedy_with_gaps(tf, logits0, h)
    # cross-check against the numpy SPEC re-implementation (reads the files as written)
    sl = spec_run(spec_m, h, codes.astype(np.int64))
    sg = spec_run(spec_m, h)
    res = np.abs(sl - logits).max() / np.abs(logits).max()
    res0 = np.abs(h @ spec_m["head0"].T - l0).max() / np.abs(l0).max()
    print(f"[{name}] rows kept {N}/{tried}, smallest greedy gap {min(gaps):.4g} (rel. to max|logit|); "
        f"logit range [{logits.min():.2f}, {logits.max():.2f}] std {logits.std():.2f}; "
        f"cross-check rel residual {res:.3g} (logits0 {res0:.3g}); greedy codes equal: {np.array_equal(sg, greedy)}")
    assert res < TOL and res0 < TOL and np.array_equal(sg, greedy), f"{name}: cross-check failed"
    files = {"hidden": (hid, "backbone hidden states, N(0,1) float32, resampled for greedy top1-top2 gaps > "
                        f"{GAP_REL:g}*max|logit| (smallest {min(gaps):.3g})"),
             "codes": (codes, "random codes in [0,V) for teacher forcing"),
             "logits": (logits.astype(np.float32), "teacher-forced logits of levels 1..Q-1 given codes 0..Q-2 "
                        "(float64 reference, cast to float32)"),
             "logits0": (l0.astype(np.float32), "head0 . h (float64, cast to float32)"),
             "greedy": (greedy.astype(np.int32), "greedy codes, c0 = argmax logits0, lowest index on ties")}
    for k, (arr, desc) in files.items():
        fn = f"{name}_{k}.npy"
        np.save(os.path.join(outdir, fn), arr)
        LOG.append((fn, desc))
    return res


# ----------------------------------------------------------------------------------------------------------------
# A. GPT-style depth decoder, native layout
def gpt_weights(seed=1):
    """Random float64 weights under native names/shapes ([out, in])."""
    rng = np.random.default_rng(seed)
    nrm = lambda shape, std, mean=0.0: mean + std * rng.standard_normal(shape)
    F = GPT["F"]
    w = {"head0.weight": nrm((V, IN), 2.5 / math.sqrt(IN)),
         "in_proj.weight": nrm((D, IN), 1 / math.sqrt(IN)), "in_proj.bias": nrm(D, 0.1),
         "embed.weight": nrm((Q - 1, V, D), 1.0), "pos.weight": nrm((Q, D), 0.3)}
    for i in range(GPT["L"]):
        p = f"layers.{i}."
        w.update({p + "norm1.weight": nrm(D, 0.1, 1.0), p + "norm1.bias": nrm(D, 0.1),
                  p + "qkv.weight": nrm((3 * D, D), 1 / math.sqrt(D)), p + "qkv.bias": nrm(3 * D, 0.1),
                  p + "out.weight": nrm((D, D), 0.5 / math.sqrt(D)), p + "out.bias": nrm(D, 0.05),
                  p + "norm2.weight": nrm(D, 0.1, 1.0), p + "norm2.bias": nrm(D, 0.1),
                  p + "fc1.weight": nrm((F, D), 1 / math.sqrt(D)), p + "fc1.bias": nrm(F, 0.1),
                  p + "fc2.weight": nrm((D, F), 0.5 / math.sqrt(F)), p + "fc2.bias": nrm(D, 0.05)})
    w.update({"norm.weight": nrm(D, 0.1, 1.0), "norm.bias": nrm(D, 0.1),
              "heads.weight": nrm((Q - 1, V, D), 2.5 / math.sqrt(D))})
    return w


GPT_QUANT = ("qkv.weight", "out.weight", "fc1.weight", "fc2.weight", "in_proj.weight", "head0.weight", "heads.weight")


def gpt_store(w, kind):
    """-> (tensors to save, float64 weights as stored)."""
    tens, ref = {}, {}
    for k, a in w.items():
        if kind == "q8" and k.endswith(GPT_QUANT):
            packed, s, b, deq = mlx_quantize(a)
            stem = k[: -len(".weight")]
            tens[k] = torch.from_numpy(packed.view(np.int32)).view(torch.uint32)
            tens[stem + ".scales"], tens[stem + ".biases"] = torch.from_numpy(s), torch.from_numpy(b)
            ref[k] = deq
        else:
            t = torch.from_numpy(a).to(torch.bfloat16 if kind == "bf16" else torch.float16)
            tens[k], ref[k] = t, f64(t)
    return tens, ref


def gpt_hf_model(ref):
    """transformers GPT2Model in float64 holding the stored weights (Conv1D weights are [in, out])."""
    cfg = GPT2Config(vocab_size=V, n_positions=Q, n_embd=D, n_layer=GPT["L"], n_head=GPT["H"], n_inner=GPT["F"],
                     activation_function="gelu", layer_norm_epsilon=EPS, resid_pdrop=0.0, embd_pdrop=0.0,
                     attn_pdrop=0.0)
    m = GPT2Model(cfg).to(torch.float64).eval()
    t = lambda k: torch.from_numpy(ref[k])
    sd = {"wte.weight": torch.zeros(V, D, dtype=torch.float64), "wpe.weight": t("pos.weight"),
          "ln_f.weight": t("norm.weight"), "ln_f.bias": t("norm.bias")}
    for i in range(GPT["L"]):
        p, h = f"layers.{i}.", f"h.{i}."
        for a, b in (("ln_1", "norm1"), ("ln_2", "norm2")):
            sd[h + a + ".weight"], sd[h + a + ".bias"] = t(p + b + ".weight"), t(p + b + ".bias")
        for a, b in (("attn.c_attn", "qkv"), ("attn.c_proj", "out"), ("mlp.c_fc", "fc1"), ("mlp.c_proj", "fc2")):
            sd[h + a + ".weight"], sd[h + a + ".bias"] = t(p + b + ".weight").T.contiguous(), t(p + b + ".bias")
    m.load_state_dict(sd, strict=True)
    return m


def gpt_fixtures(outdir):
    w = gpt_weights()
    cfg = {"format": "depthdec", "version": 1, "block": "gpt", "levels": Q, "codebook_size": V, "input_dim": IN,
           "dim": D, "layers": GPT["L"], "heads": GPT["H"], "kv_heads": GPT["KVH"], "head_dim": GPT["HD"],
           "ffn_dim": GPT["F"], "norm_eps": EPS, "rope": None}
    res = {}
    for seed, kind in enumerate(("f16", "bf16", "q8"), start=10):
        c = dict(cfg, quantization={"group_size": GROUP, "bits": BITS, "mode": "affine"}) if kind == "q8" else cfg
        tens, ref = gpt_store(w, kind)
        fn = f"gpt_{kind}.safetensors"
        save_file(tens, os.path.join(outdir, fn), metadata={"depthdec.config": json.dumps(c)})
        LOG.append((fn, f"native gpt depth decoder, {len(tens)} tensors, "
                        + ("MLX affine q8 (group 32) for qkv/out/fc1/fc2/in_proj/head0/heads, rest f16"
                           if kind == "q8" else f"every tensor {kind}")))
        m = gpt_hf_model(ref)

        def tf(h, codes, m=m, ref=ref):
            """teacher-forced logits of levels 1..S given codes c0..c(S-1) (S = codes.shape[1])."""
            x = [h @ ref["in_proj.weight"].T + ref["in_proj.bias"]]
            x += [ref["embed.weight"][j][codes[:, j]] for j in range(codes.shape[1])]
            with torch.no_grad():   # GPT2Model adds wpe[p] to position p itself
                y = m(inputs_embeds=torch.from_numpy(np.stack(x, 1))).last_hidden_state.numpy()
            return np.stack([y[:, l] @ ref["heads.weight"][l - 1].T for l in range(1, y.shape[1])], 1)

        fcfg, fw = read_native(os.path.join(outdir, fn))          # independent path: the file as written
        assert fcfg == json.loads(json.dumps(c)) and all(np.array_equal(fw[k], ref[k]) for k in ref)
        res[kind] = make_fixture(f"gpt_{kind}", outdir, seed, tf, lambda h, r=ref: h @ r["head0.weight"].T,
                                 gpt_spec_model(fcfg, fw))
    return res


# ----------------------------------------------------------------------------------------------------------------
# B. CSM (llama-style) depth decoder, HF layout
def csm_config():
    dd = dict(num_codebooks=Q, backbone_hidden_size=IN, vocab_size=V, hidden_size=D, intermediate_size=CSM["F"],
              num_hidden_layers=CSM["L"], num_attention_heads=CSM["H"], num_key_value_heads=CSM["KVH"],
              head_dim=CSM["HD"], max_position_embeddings=33, rms_norm_eps=EPS, rope_parameters=dict(ROPE))
    codec = dict(model_type="mimi", hidden_size=32, num_filters=4, num_residual_layers=1, upsampling_ratios=[2, 2],
                 codebook_size=V, codebook_dim=16, num_quantizers=Q, vector_quantization_hidden_dimension=16,
                 upsample_groups=32, num_hidden_layers=1, intermediate_size=64, num_attention_heads=2,
                 num_key_value_heads=2, head_dim=16, sliding_window=16, max_position_embeddings=64)
    return CsmConfig(num_codebooks=Q, vocab_size=V, text_vocab_size=128, hidden_size=IN, intermediate_size=128,
                     num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                     rms_norm_eps=EPS, pad_token_id=122, bos_token_id=120, audio_token_id=122,
                     audio_eos_token_id=123, codebook_pad_token_id=V - 1, codebook_eos_token_id=0,
                     rope_parameters=dict(ROPE), depth_decoder_config=dd, codec_config=codec)


def csm_std(name, shape):
    """init (mean, std) per parameter so activations are O(1) and logits spread a few units."""
    if name.endswith("norm.weight") or "layernorm" in name:
        return 1.0, 0.1
    if "embed" in name:
        return 0.0, 1.0
    if name == "lm_head.weight":
        return 0.0, 2.5 / math.sqrt(shape[-1])
    if name.endswith("codebooks_head.weight"):                  # [Q-1, D, V]: fan-in is D
        return 0.0, 2.5 / math.sqrt(shape[1])
    if name.endswith(("o_proj.weight", "down_proj.weight")):
        return 0.0, 0.5 / math.sqrt(shape[-1])
    return 0.0, 1.0 / math.sqrt(shape[-1])


# float64-exact replacements for the two places where transformers' CSM code forces float32 math (RMSNorm and
# the RoPE cos/sin tables); the third, eager attention's float32 softmax, is avoided by using sdpa (float64 on CPU)
def _rms64(self, x):
    return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.variance_epsilon))


def _rope64(self, x, position_ids):
    f = position_ids[..., None].to(torch.float64) * self.inv_freq.to(torch.float64)
    emb = torch.cat((f, f), -1)
    return (emb.cos() * self.attention_scaling).to(x.dtype), (emb.sin() * self.attention_scaling).to(x.dtype)


def csm_fixture(outdir):
    cfg = csm_config()
    torch.manual_seed(0)                      # only the (discarded) codec init uses torch's RNG
    model = CsmForConditionalGeneration(cfg).eval()
    rng = np.random.default_rng(2)
    with torch.no_grad():                     # random init, every value rounded to bf16
        for k, p in model.named_parameters():
            if k.startswith("codec_model."):
                continue
            mean, std = csm_std(k, p.shape)
            p.copy_(torch.from_numpy(mean + std * rng.standard_normal(tuple(p.shape))).to(torch.bfloat16))
        # transformers 5 does not tie these at runtime; make them equal as in the real (tied) CSM checkpoint
        model.backbone_model.embed_tokens.embed_audio_tokens.weight.copy_(model.depth_decoder.model.embed_tokens.weight)
    rounded = {k: f64(v) for k, v in model.state_dict().items() if not k.startswith("codec_model.")}
    d = os.path.join(outdir, "csm_tiny")
    model.to(torch.bfloat16).save_pretrained(d, safe_serialization=True)
    st = os.path.join(d, "model.safetensors")
    with safe_open(st, framework="pt") as f:
        meta = f.metadata()
    kept = {k: v for k, v in load_file(st).items() if not k.startswith("codec_model.")}
    save_file(kept, st, metadata=meta)
    hf_cfg = json.load(open(os.path.join(d, "config.json")))
    assert hf_cfg["model_type"] == "csm" and "depth_decoder_config" in hf_cfg
    print("[csm_tiny] config.json depth_decoder_config.rope_parameters:",
        json.dumps(hf_cfg["depth_decoder_config"].get("rope_parameters")),
        "| top-level rope_parameters:", json.dumps(hf_cfg.get("rope_parameters")))
    print("[csm_tiny] saved tensors (codec_model.* removed):")
    for k in sorted(kept):
        print(f"    {k:60s} {list(kept[k].shape)} {str(kept[k].dtype).replace('torch.', '')}")
    for fn in sorted(os.listdir(d)):
        LOG.append((f"csm_tiny/{fn}", "CsmForConditionalGeneration.save_pretrained (bf16); model.safetensors "
                    f"rewritten without codec_model.* ({len(kept)} tensors)" if fn == "model.safetensors"
                    else "written by save_pretrained"))

    # float64 reference: reload the saved directory (tests that it loads in transformers), check values
    ref = CsmForConditionalGeneration.from_pretrained(d, dtype=torch.float64, attn_implementation="sdpa").eval()
    sd = {k: f64(v) for k, v in ref.state_dict().items() if not k.startswith("codec_model.")}
    assert all(np.array_equal(sd[k], rounded[k]) for k in rounded), "reloaded weights differ"
    dd, lm = ref.depth_decoder, sd["lm_head.weight"]
    rot = dd.model.rotary_emb
    inv64 = llama3_inv_freq(CSM["HD"], ROPE)
    hf_inv = f64(modeling_csm.ROPE_INIT_FUNCTIONS["llama3"](dd.config)[0])  # transformers' float32 inv_freq
    unscaled = ROPE["rope_theta"] ** (-np.arange(0, CSM["HD"], 2) / CSM["HD"])
    print(f"[csm_tiny] llama3 inv_freq / unscaled: {np.round(inv64 / unscaled, 4).tolist()}; "
        f"rel diff vs transformers' float32 inv_freq {np.abs(hf_inv / inv64 - 1).max():.2g}")
    assert np.abs(hf_inv / inv64 - 1).max() < 1e-6

    def tf(h, codes):
        """input_ids = [placeholder, c0 .. c(S-1)]: transformers embeds ids[l] + (l-1)*V at position l >= 1 and
        puts backbone_last_hidden_state at position 0; logits[:, l-1] come from codebooks_head[l-1]."""
        ids = torch.from_numpy(np.concatenate([np.zeros((h.shape[0], 1), np.int64), codes], 1))
        with torch.no_grad():
            return dd(input_ids=ids, backbone_last_hidden_state=torch.from_numpy(h)).logits.numpy()

    # as shipped, transformers does RMSNorm and the RoPE tables in float32: show that residual, then patch
    hp = np.random.default_rng(5).standard_normal((N, IN)).astype(np.float32).astype(np.float64)
    cp = np.random.default_rng(6).integers(0, V, (N, Q - 1))
    with safe_open(st, framework="pt") as f:
        fw = {k: f64(f.get_tensor(k)) for k in f.keys()}
    spec_m = csm_spec_model(hf_cfg, fw)
    unpatched = tf(hp, cp)
    r_un = np.abs(unpatched - spec_run(spec_m, hp, np.concatenate([cp, cp[:, :1]], 1))).max() / np.abs(unpatched).max()
    print(f"[csm_tiny] unpatched transformers (float32 internals) vs SPEC re-impl: rel residual {r_un:.3g}")
    modeling_csm.CsmRMSNorm.forward = _rms64
    modeling_csm.CsmRotaryEmbedding.forward = _rope64
    assert rot.inv_freq.dtype == torch.float32     # from_pretrained keeps the buffer float32: replace it
    rot.inv_freq = rot.original_inv_freq = torch.from_numpy(inv64)
    return make_fixture("csm_tiny", outdir, 20, tf, lambda h: h @ lm.T, spec_m), r_un


# ----------------------------------------------------------------------------------------------------------------
def manifest(outdir):
    vers = fixture_common.versions()
    lines = ["# depthdec test fixtures -- generated by scripts/make_fixtures.py (do not edit by hand)",
             f"# date (UTC): {datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d %H:%M:%S')}",
             f"# versions: {vers}",
             f"# dims: Q={Q} V={V} input_dim={IN} dim={D} N={N}; gpt {GPT}; csm {CSM}; rope {ROPE}",
             "# references: float64 on CPU from the weights as stored; logits saved as float32",
             "# file | bytes | shape dtype | how"]
    lines += fixture_common.manifest_rows(outdir, LOG)
    with open(os.path.join(outdir, "MANIFEST.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")
    fixture_common.report(outdir, LOG, vers)


def main():
    args = fixture_common.start(__doc__)
    gpt_fixtures(args.out)
    csm_fixture(args.out)
    manifest(args.out)


if __name__ == "__main__":
    main()
