#!/usr/bin/env python3
"""make_fixtures_families.py -- tiny Moshi-depformer and Qwen3-Omni code-predictor fixtures (issue 17, point 4).

Writes into --out (default tests/fixtures), next to the GPT/CSM fixtures of make_fixtures.py (it touches none of
those files; it replaces only its own section at the end of MANIFEST.txt, so run it AFTER make_fixtures.py, which
rewrites MANIFEST.txt whole):

  moshi_tiny/              MoshiForConditionalGeneration.save_pretrained (bf16, sharded: model-0000i-of-0000n +
                           model.safetensors.index.json); the whole tiny model is kept (temporal decoder, mimi codec,
                           depth_decoder.*), it is small
  moshi_tiny_depth/        MoshiDepthDecoder.save_pretrained alone (bf16): the same depth-decoder tensors, unprefixed
  moshi_tiny_hidden.npy    f32 [N, 48]    temporal-transformer hidden state (depth_decoder input_size = 48)
  moshi_tiny_text.npy      i32 [N]        the frame's text token, in [0, text_vocab] (text_vocab = the extra row)
  moshi_tiny_codes.npy     i32 [N, Q]     codes for teacher forcing, in [0, V]; V (the pad/initial row) occurs
  moshi_tiny_logits.npy    f32 [N, Q, V]  teacher-forced logits of ALL Q levels (level k from position k)
  moshi_tiny_greedy.npy    i32 [N, Q]     greedy codes (lowest index on ties)

  qwen3omni_tiny/          Qwen3OmniMoeTalkerCodePredictorModelForConditionalGeneration.save_pretrained (bf16)
                           + talker_codec_embedding.safetensors beside it (talker.model.codec_embedding.weight)
  qwen3omni_tiny_hidden.npy     f32 [N, 32]       talker hidden state (talker width = predictor width = 32)
  qwen3omni_tiny_codes.npy      i32 [N, Q]        codes; column 0 is c0 (given by the talker), the rest teacher codes
  qwen3omni_tiny_logits.npy     f32 [N, Q-1, V]   teacher-forced logits of levels 1..Q-1 given c0..c(Q-2)
  qwen3omni_tiny_greedy.npy     i32 [N, Q]        greedy codes given c0 (column 0 = c0 as given)
  qwen3omni_tiny_next_embed.npy f32 [N, 32]       the talker's next input embedding for the greedy codes:
                                                  talker_codec[c0] + sum_k codec_embedding.{k-1}[c_k], k = 1..Q-1

References are float64 on the CPU, computed from the weights AS STORED (bf16, re-read from the saved directories)
by transformers' own modules (with the float32 casts inside RMSNorm / RoPE replaced by float64 ones, and sdpa
attention, which computes in float64 on the CPU), and cross-checked (relative 1e-10) against an independent numpy
re-implementation (incremental, one position at a time with a KV cache) that reads the written safetensors files.
Hidden rows are resampled so that every greedy step has top1 - top2 > 1e-3 * max|logit|.
Deterministic: all randomness from numpy Generators (and torch.manual_seed for the parts that are not references).
"""
import datetime
import glob
import json
import math
import os

import fixture_common  # scripts/fixture_common.py
import numpy as np
import torch
from safetensors import safe_open
from safetensors.torch import save_file

N = 6
GAP_REL = 1e-3   # every greedy step: top1 - top2 > GAP_REL * max|logit|
TOL = 1e-10      # cross-check: max|diff| / max|logit|
# Moshi: Q codebooks of V, text vocab TV (+1 row), temporal width IN, depformer width D
MOSHI = dict(Q=8, V=64, TV=40, IN=48, D=32, L=3, H=4, KVH=4, HD=8, F=64, eps=1e-8)   # F = ffn_dim = fc1 rows
# Q = 12 > transformers' default sliding_window 8: the whole-frame attention of the original differs from
# transformers' cached generate from position 8 on (depth decoder saved alone, 2 layers, to stay small)
MOSHI12 = dict(MOSHI, Q=12, L=2, KVH=2)   # and GQA (2 kv heads for 4 query heads; the published model has none)
# Qwen3-Omni code predictor: Q code groups of V, talker codec table TVC rows, width D (= talker width)
QWEN = dict(Q=8, V=64, TVC=72, D=32, L=3, H=4, KVH=2, HD=16, F=64, eps=1e-6, theta=1000000.0)
torch.set_default_dtype(torch.float32)
LOG = []


def f64(t):
    return t.detach().to(torch.float64).cpu().numpy()


def read_dir(d):
    """every tensor of every .safetensors file in directory d -> {name: float64 numpy} (the files as written)."""
    out = {}
    for fn in sorted(glob.glob(os.path.join(d, "*.safetensors"))):
        with safe_open(fn, framework="pt") as f:
            for k in f.keys():
                assert k not in out, k
                out[k] = f64(f.get_tensor(k))
    return out


def rms(x, w, eps):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w


def silu(x):
    return x / (1 + np.exp(-x))


def attend(q, K, V, kvh):
    """q [N, H, HD] for one new position, K/V [N, S, KVH, HD] (all cached positions): causal by construction."""
    s = np.einsum("nhd,nshd->nhs", q, K[:, :, kvh]) / math.sqrt(q.shape[-1])
    s = np.exp(s - s.max(-1, keepdims=True))
    s /= s.sum(-1, keepdims=True)
    return np.einsum("nhs,nshd->nhd", s, V[:, :, kvh]).reshape(q.shape[0], -1)


def rel_gaps(z):
    top = np.sort(z, -1)
    return (top[..., -1] - top[..., -2]) / np.abs(z).max(-1)


def save_npys(name, outdir, files):
    for k, (arr, desc) in files.items():
        fn = f"{name}_{k}.npy"
        np.save(os.path.join(outdir, fn), arr)
        LOG.append((fn, desc))


def log_dir(outdir, sub, how):
    for fn in sorted(os.listdir(os.path.join(outdir, sub))):
        LOG.append((f"{sub}/{fn}", how(fn)))


# float64-exact replacements for the float32 casts inside transformers' RMSNorm / RoPE modules
def _moshi_rms64(self, x):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def _qwen_rms64(self, x):
    return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.variance_epsilon))


def _rope64(self, x, position_ids):
    f = position_ids[..., None].to(torch.float64) * self.inv_freq.to(torch.float64)
    emb = torch.cat((f, f), -1)
    return (emb.cos() * self.attention_scaling).to(x.dtype), (emb.sin() * self.attention_scaling).to(x.dtype)


# ----------------------------------------------------------------------------------------------------------------
# A. Kyutai Moshi depformer (transformers MoshiDepthDecoder)
def moshi_config():
    from transformers import MoshiConfig
    m = MOSHI
    mimi = dict(model_type="mimi", hidden_size=32, num_filters=4, num_residual_layers=1, upsampling_ratios=[2, 2],
                codebook_size=m["V"], codebook_dim=16, num_quantizers=m["Q"], vector_quantization_hidden_dimension=16,
                upsample_groups=32, num_hidden_layers=1, intermediate_size=64, num_attention_heads=2,
                num_key_value_heads=2, head_dim=16, sliding_window=16, max_position_embeddings=64)
    dd = dict(hidden_size=m["D"], num_hidden_layers=m["L"], num_attention_heads=m["H"], num_key_value_heads=m["KVH"],
              head_dim=m["HD"], ffn_dim=m["F"], rms_norm_eps=m["eps"], max_position_embeddings=m["Q"])
    return MoshiConfig(vocab_size=m["TV"], hidden_size=m["IN"], num_hidden_layers=1, num_attention_heads=4,
                       num_key_value_heads=4, ffn_dim=96, max_position_embeddings=64, rms_norm_eps=m["eps"],
                       audio_vocab_size=m["V"], num_codebooks=m["Q"], audio_encoder_config=mimi,
                       depth_decoder_config=dd)


def moshi_std(name, shape):
    """(mean, std) per depth-decoder parameter: activations O(1), logits spread a few units."""
    if "layernorm" in name:
        return 1.0, 0.1
    if "embed_tokens" in name:
        return 0.0, 1.0
    if name.endswith("lm_heads.weight"):
        return 0.0, 2.5 / math.sqrt(shape[-1])
    if name.endswith(("o_proj.linear.weight", "fc2.weight")):
        return 0.0, 0.5 / math.sqrt(shape[-1])
    return 0.0, 1.0 / math.sqrt(shape[-1])       # input_projections, q/k/v, fc1: fan-in is the last dim


def moshi_np(w, h, text, codes, p="depth_decoder.", m=MOSHI):
    """Independent float64 Moshi depformer, one position at a time with a KV cache (attends to the whole frame so
    far). w: tensors as read from the files. Returns logits [N, S, V] for S = codes.shape[1] + 1 positions."""
    H, KVH, HD, F2 = m["H"], m["KVH"], m["HD"], m["F"] // 2
    kvh = np.arange(H) // (H // KVH)
    g = lambda n: w[p + n]
    cache, out = [([], []) for _ in range(m["L"])], []
    for k in range(codes.shape[1] + 1):
        x = g("text_embed_tokens.weight")[text] if k == 0 else g(f"embed_tokens.{k - 1}.weight")[codes[:, k - 1]]
        x = x + h @ g("input_projections.weight")[k].T
        for i, (kc, vc) in enumerate(cache):
            a = rms(x, g(f"layers.{i}.input_layernorm.weight"), m["eps"])
            lw = lambda n: g(f"layers.{i}.self_attn.{n}.linear.weight")[k]      # per-position [out, in]
            kc.append((a @ lw("k_proj").T).reshape(-1, KVH, HD)), vc.append((a @ lw("v_proj").T).reshape(-1, KVH, HD))
            o = attend((a @ lw("q_proj").T).reshape(-1, H, HD), np.stack(kc, 1), np.stack(vc, 1), kvh)
            x = x + o @ lw("o_proj").T
            a = rms(x, g(f"layers.{i}.post_attention_layernorm.weight"), m["eps"])
            gu = a @ g(f"layers.{i}.mlp.fc1.weight")[k].T                      # [gate | up]
            x = x + (silu(gu[:, :F2]) * gu[:, F2:]) @ g(f"layers.{i}.mlp.fc2.weight")[k].T
        out.append(x @ g("lm_heads.weight")[k].T)                              # no final norm
    return np.stack(out, 1)


def moshi_full(outdir):
    """moshi_tiny/ (full model, sharded) and moshi_tiny_depth/ (module alone) -> (files, prefix, ref, alone)."""
    from transformers import MoshiForConditionalGeneration
    from transformers.models.moshi.modeling_moshi import MoshiDepthDecoder
    cfg = moshi_config()
    torch.manual_seed(0)                      # init of the temporal decoder and codec (not used by references)
    model = MoshiForConditionalGeneration(cfg).eval()
    rng = np.random.default_rng(30)
    with torch.no_grad():
        for k, prm in model.depth_decoder.named_parameters():
            mean, std = moshi_std(k, prm.shape)
            prm.copy_(torch.from_numpy(mean + std * rng.standard_normal(tuple(prm.shape))).to(torch.bfloat16))
    model = model.to(torch.bfloat16)
    rounded = {k: f64(v) for k, v in model.depth_decoder.state_dict().items()}
    d_full, d_dd = os.path.join(outdir, "moshi_tiny"), os.path.join(outdir, "moshi_tiny_depth")
    model.save_pretrained(d_full, max_shard_size="200KB")
    model.depth_decoder.save_pretrained(d_dd)
    full_files, dd_files = read_dir(d_full), read_dir(d_dd)
    idx = json.load(open(os.path.join(d_full, "model.safetensors.index.json")))
    dd_shards = sorted({v for k, v in idx["weight_map"].items() if k.startswith("depth_decoder.")})
    print(f"[moshi_tiny] full model: {len(full_files)} tensors in {len(set(idx['weight_map'].values()))} shards "
          f"(depth_decoder.* in {dd_shards}); depth decoder alone: {len(dd_files)} tensors")
    assert set(dd_files) == {k[len("depth_decoder."):] for k in full_files if k.startswith("depth_decoder.")}
    assert all(np.array_equal(dd_files[k], full_files["depth_decoder." + k]) for k in dd_files)
    for k in sorted(dd_files):
        if not k.startswith(("layers.", "embed_tokens.")) or k.startswith(("layers.0.", "embed_tokens.0.")):
            print(f"    {k:50s} {list(dd_files[k].shape)}")
    log_dir(outdir, "moshi_tiny", lambda fn: "MoshiForConditionalGeneration.save_pretrained(max_shard_size='200KB'), "
            "bf16, whole tiny model" if fn.endswith(".safetensors") else "written by save_pretrained")
    log_dir(outdir, "moshi_tiny_depth", lambda fn: "MoshiDepthDecoder.save_pretrained (module alone), bf16"
            if fn.endswith(".safetensors") else "written by save_pretrained")

    # references: transformers' MoshiDepthDecoder reloaded from the saved full model, float64, sdpa
    ref = MoshiForConditionalGeneration.from_pretrained(d_full, dtype=torch.float64, attn_implementation="sdpa").eval()
    dd = ref.depth_decoder
    assert all(np.array_equal(f64(v), rounded[k]) for k, v in dd.state_dict().items()), "reloaded weights differ"
    alone = MoshiDepthDecoder.from_pretrained(d_dd, dtype=torch.float64).eval()
    assert all(np.array_equal(f64(v), rounded[k]) for k, v in alone.state_dict().items()), "module reload differs"
    return full_files, "depth_decoder.", dd, alone


def moshi_alone(outdir, name, m, seed):
    """A depth decoder saved alone (MoshiDepthDecoder.save_pretrained) -> (files, prefix, ref, None)."""
    from transformers.models.moshi.configuration_moshi import MoshiDepthConfig
    from transformers.models.moshi.modeling_moshi import MoshiDepthDecoder
    cfg = MoshiDepthConfig(vocab_size=m["TV"], input_size=m["IN"], audio_vocab_size=m["V"], num_codebooks=m["Q"],
                           hidden_size=m["D"], num_hidden_layers=m["L"], num_attention_heads=m["H"],
                           num_key_value_heads=m["KVH"], head_dim=m["HD"], ffn_dim=m["F"], rms_norm_eps=m["eps"],
                           max_position_embeddings=m["Q"])
    model = MoshiDepthDecoder(cfg).eval()
    rng = np.random.default_rng(seed)
    with torch.no_grad():
        for k, prm in model.named_parameters():
            mean, std = moshi_std(k, prm.shape)
            prm.copy_(torch.from_numpy(mean + std * rng.standard_normal(tuple(prm.shape))).to(torch.bfloat16))
    model = model.to(torch.bfloat16)
    rounded = {k: f64(v) for k, v in model.state_dict().items()}
    d = os.path.join(outdir, name)
    model.save_pretrained(d)
    files = read_dir(d)
    assert set(files) == set(rounded) and all(np.array_equal(files[k], rounded[k]) for k in files)
    print(f"[{name}] depth decoder alone: {len(files)} tensors, Q {m['Q']} > sliding_window {cfg.sliding_window}")
    log_dir(outdir, name, lambda fn: "MoshiDepthDecoder.save_pretrained (module alone), bf16"
            if fn.endswith(".safetensors") else "written by save_pretrained")
    ref = MoshiDepthDecoder.from_pretrained(d, dtype=torch.float64, attn_implementation="sdpa").eval()
    assert all(np.array_equal(f64(v), rounded[k]) for k, v in ref.state_dict().items()), "reloaded weights differ"
    return files, "", ref, None


def moshi_fixture(outdir, name="moshi_tiny", m=MOSHI, seeds=(30, 31)):
    """Fixture files {name}_*.npy from the full tiny model (default) or, for other dims, a depth decoder alone."""
    from transformers.models.moshi import modeling_moshi
    Q, V = m["Q"], m["V"]
    files, prefix, dd, alone = moshi_full(outdir) if m is MOSHI else moshi_alone(outdir, name, m, seeds[0])
    modeling_moshi.MoshiRMSNorm.forward = _moshi_rms64

    def tf(h, text, codes, mod=dd, mask=False):
        """logits [N, S, V] of positions 0..S-1, S = codes.shape[1] + 1; input_ids = [text, c0 .. c(S-2)].
        No attention_mask and no cache: sdpa is then causal over the whole frame (is_causal=True for q_len > 1)."""
        ids = torch.from_numpy(np.concatenate([text[:, None], codes], 1).astype(np.int64))
        am = torch.ones_like(ids) if mask else None
        with torch.no_grad():
            return mod(input_ids=ids, last_hidden_state=torch.from_numpy(h)[:, None, :], attention_mask=am,
                       use_cache=False).logits.numpy()

    def greedy(h, text):
        c = np.zeros((h.shape[0], 0), np.int64)
        zs = []
        for k in range(Q):
            z = tf(h, text, c)[:, -1]
            zs.append(z)
            c = np.concatenate([c, np.argmax(z, -1)[:, None]], 1)
        return c, np.min(rel_gaps(np.stack(zs, 1)), 1)

    rng = np.random.default_rng(seeds[1])
    rows, texts, gaps, tried = [], [], [], 0
    while len(rows) < N:
        cand = rng.standard_normal((16, m["IN"])).astype(np.float32)
        ctext = rng.integers(0, m["TV"] + 1, 16)
        if not rows:                          # edge ids: the extra text row (text vocab + 1) and row 0
            ctext[0], ctext[1] = m["TV"], 0
        tried += 16
        _, g = greedy(cand.astype(np.float64), ctext)
        for r, t, gr in zip(cand, ctext, g):
            if gr > GAP_REL and len(rows) < N:
                rows.append(r), texts.append(t), gaps.append(gr)
    hid, text = np.stack(rows), np.array(texts, np.int64)
    # the text token must matter row by row: several distinct ids, the extra row among them
    assert m["TV"] in text and len(set(text.tolist())) >= 3, text
    h = hid.astype(np.float64)
    codes = rng.integers(0, V, (N, Q))
    codes[1, : Q - 1] = V                     # row 1: every input code is the pad/initial row V
    codes[2, 3] = V
    logits = tf(h, text, codes[:, : Q - 1])
    gr, _ = greedy(h, text)
    npl = moshi_np(files, h, text, codes[:, : Q - 1], prefix, m)
    npg = np.zeros((N, 0), np.int64)
    for k in range(Q):
        npg = np.concatenate([npg, np.argmax(moshi_np(files, h, text, npg, prefix, m)[:, -1], -1)[:, None]], 1)
    res = np.abs(npl - logits).max() / np.abs(logits).max()
    rel = lambda z: np.abs(z - logits).max() / np.abs(logits).max()
    res_alone = 0.0 if alone is None else rel(tf(h, text, codes[:, : Q - 1], alone))
    res_mask = np.abs(tf(h, text, codes[:, : Q - 1], dd, True) - logits).max() / np.abs(logits).max()
    dd.config._attn_implementation = "eager"    # transformers' eager path without a mask: NOT causal
    res_eager = np.abs(tf(h, text, codes[:, : Q - 1]) - logits).max() / np.abs(logits).max()
    res_eager_m = np.abs(tf(h, text, codes[:, : Q - 1], dd, True) - logits).max() / np.abs(logits).max()
    dd.config._attn_implementation = "sdpa"
    print(f"[{name}] rows kept {N}/{tried}, smallest greedy gap {min(gaps):.4g}; logit range "
          f"[{logits.min():.2f}, {logits.max():.2f}] std {logits.std():.2f}")
    print(f"[{name}] numpy re-impl vs transformers sdpa (no mask): rel {res:.3g}; greedy equal "
          f"{np.array_equal(npg, gr)}; module-alone reload {res_alone:.3g}; sdpa + attention_mask=1 {res_mask:.3g}")
    print(f"[{name}] transformers EAGER without mask (bidirectional): rel {res_eager:.3g} (differs: not causal);"
          f" eager + attention_mask=1 (causal mask built; eager softmax is float32): {res_eager_m:.3g}")
    assert res < TOL and res_alone < TOL and res_mask < TOL and res_eager_m < 1e-6 and np.array_equal(npg, gr)
    assert res_eager > 1e-3
    gen = moshi_generate_check(dd, h, text, gr, name)
    window = dd.config.sliding_window
    assert gen == (Q <= window), f"transformers' generate should agree exactly when Q <= sliding_window ({window})"
    save_npys(name, outdir, {
        "hidden": (hid, f"temporal hidden state, N(0,1) f32, resampled for greedy gaps > {GAP_REL:g}*max|logit| "
                   f"(smallest {min(gaps):.3g})"),
        "text": (text.astype(np.int32), f"text token per row in [0,{m['TV']}], {len(set(text.tolist()))} distinct; "
                 f"{m['TV']} (the extra row) at rows {np.flatnonzero(text == m['TV']).tolist()}, 0 at rows "
                 f"{np.flatnonzero(text == 0).tolist()}"),
        "codes": (codes.astype(np.int32), f"teacher-forcing codes in [0,{V}]; {V} = pad/initial embedding row "
                  "(row 1 levels 0..Q-2, row 2 level 3); column Q-1 is never an input"),
        "logits": (logits.astype(np.float32), "teacher-forced logits of levels 0..Q-1 (position k: text/c(k-1) in, "
                   "lm_heads[k] out), float64 reference cast to f32"),
        "greedy": (gr.astype(np.int32), "greedy codes c0..c(Q-1) given hidden+text, lowest index on ties")})
    return dict(res=res, res_eager=res_eager, gen=gen)


def moshi_generate_check(dd, h, text, gr, name):
    """transformers' own MoshiDepthDecoder.generate (greedy, KV cache) vs our greedy codes; informational."""
    try:
        with torch.no_grad():
            out = dd.generate(input_ids=torch.from_numpy(text[:, None]), last_hidden_state=torch.from_numpy(h)[:, None],
                              max_new_tokens=gr.shape[1], min_new_tokens=gr.shape[1], do_sample=False)
        seq = out.numpy()[:, 1:]
        ok = np.array_equal(seq, gr)
        print(f"[{name}] MoshiDepthDecoder.generate(do_sample=False, its sliding-window cache): codes equal to the "
              f"fixture's greedy: {ok}; rows that differ: {int((seq != gr).any(1).sum())}/{len(gr)}")
        return ok
    except Exception as e:  # noqa: BLE001 -- informational only
        print(f"[{name}] MoshiDepthDecoder.generate not run: {type(e).__name__}: {str(e)[:200]}")
        return None


# ----------------------------------------------------------------------------------------------------------------
# B. Qwen3-Omni talker code predictor
def qwen_config():
    from transformers.models.qwen3_omni_moe.configuration_qwen3_omni_moe import Qwen3OmniMoeTalkerCodePredictorConfig
    q = QWEN
    return Qwen3OmniMoeTalkerCodePredictorConfig(
        vocab_size=q["V"], hidden_size=q["D"], intermediate_size=q["F"], num_hidden_layers=q["L"],
        num_attention_heads=q["H"], num_key_value_heads=q["KVH"], head_dim=q["HD"], rms_norm_eps=q["eps"],
        num_code_groups=q["Q"], max_position_embeddings=64,
        rope_parameters=dict(rope_type="default", rope_theta=q["theta"]))


def qwen_std(name, shape):
    if name.endswith("norm.weight") or "layernorm" in name:
        return 1.0, 0.1
    if "embedding" in name:
        return 0.0, 1.0
    if name.startswith("lm_head."):
        return 0.0, 2.5 / math.sqrt(shape[-1])
    if name.endswith(("o_proj.weight", "down_proj.weight")):
        return 0.0, 0.5 / math.sqrt(shape[-1])
    return 0.0, 1.0 / math.sqrt(shape[-1])


def qwen_np(w, talker, h, codes, p="", proj=None, q=QWEN):
    """Independent float64 Qwen3 code predictor, incremental with a KV cache. codes [N, S] (c0 .. c(S-1)), S >= 1.
    w: predictor tensors under prefix p; talker: the talker's codec table (c0's embedding). proj = (W, b): Qwen3-TTS's
    small_to_mtp_projection, applied to every input row (None for Qwen3-Omni).
    Returns logits [N, S, V] of levels 1..S (level k from position k with lm_head.{k-1})."""
    H, KVH, HD = q["H"], q["KVH"], q["HD"]
    kvh = np.arange(H) // (H // KVH)
    inv = q["theta"] ** (-np.arange(0, HD, 2, dtype=np.float64) / HD)
    rot = lambda t: np.concatenate([-t[..., HD // 2:], t[..., : HD // 2]], -1)
    cache, out = [([], []) for _ in range(q["L"])], []
    for pos in range(codes.shape[1] + 1):
        x = h if pos == 0 else talker[codes[:, 0]] if pos == 1 else \
            w[f"{p}model.codec_embedding.{pos - 2}.weight"][codes[:, pos - 1]]
        if proj is not None:
            x = x @ proj[0].T + proj[1]
        ang = np.concatenate([pos * inv, pos * inv])         # position pos, restarting at 0 every frame
        for i, (kc, vc) in enumerate(cache):
            lw = lambda n: w[f"{p}model.layers.{i}.{n}.weight"]
            a = rms(x, lw("input_layernorm"), q["eps"])
            qh = rms((a @ lw("self_attn.q_proj").T).reshape(-1, H, HD), lw("self_attn.q_norm"), q["eps"])
            kh = rms((a @ lw("self_attn.k_proj").T).reshape(-1, KVH, HD), lw("self_attn.k_norm"), q["eps"])
            qh, kh = qh * np.cos(ang) + rot(qh) * np.sin(ang), kh * np.cos(ang) + rot(kh) * np.sin(ang)
            kc.append(kh), vc.append((a @ lw("self_attn.v_proj").T).reshape(-1, KVH, HD))
            x = x + attend(qh, np.stack(kc, 1), np.stack(vc, 1), kvh) @ lw("self_attn.o_proj").T
            a = rms(x, lw("post_attention_layernorm"), q["eps"])
            x = x + (silu(a @ lw("mlp.gate_proj").T) * (a @ lw("mlp.up_proj").T)) @ lw("mlp.down_proj").T
        if pos >= 1:
            out.append(rms(x, w[p + "model.norm.weight"], q["eps"]) @ w[f"{p}lm_head.{pos - 1}.weight"].T)
    return np.stack(out, 1)


def predictor_tf(cp, talker, h, codes):
    """Reference logits [N, S, V] of levels 1..S given codes c0..c(S-1), for a Qwen-style code predictor module cp
    (Qwen3-Omni's, or Qwen3-TTS's, which projects every row itself): one forward per level on the prefix
    [h, talker[c0], codec_embedding.0[c1], ..] (the prefill path applies lm_head[len-2] to every row; take the last)."""
    emb = lambda p, c: talker[c] if p == 1 else cp.model.codec_embedding[p - 2].weight[c]
    x = [torch.from_numpy(h)] + [emb(p, torch.from_numpy(codes[:, p - 1])) for p in range(1, codes.shape[1] + 1)]
    out = []
    with torch.no_grad():
        for s in range(2, len(x) + 1):
            out.append(cp(inputs_embeds=torch.stack(x[:s], 1), use_cache=False).logits[:, -1].numpy())
    return np.stack(out, 1)


def predictor_refs(name, outdir, q, seed, tf, np_logits, next_embed, generate):
    """Fixture files of a Qwen-style code predictor (Qwen3-Omni, Qwen3-TTS). tf(h, codes [N, S]) -> reference logits of
    levels 1..S; np_logits: the same from the numpy re-implementation; next_embed(codes [N, Q]) -> the talker's next
    input embedding (numpy, from the files); generate(h, c0) -> (codes 1..Q-1, next embedding) by the reference's own
    generate. Rows (talker hidden state, c0) are drawn until every greedy step has a clear top-1."""
    Q, V = q["Q"], q["V"]

    def greedy(h, c0):
        c, zs = c0[:, None].astype(np.int64), []
        for k in range(1, Q):
            z = tf(h, c)[:, -1]
            zs.append(z)
            c = np.concatenate([c, np.argmax(z, -1)[:, None]], 1)
        return c, np.min(rel_gaps(np.stack(zs, 1)), 1)

    rng = np.random.default_rng(seed)
    rows, c0s, gaps, tried = [], [], [], 0
    while len(rows) < N:
        cand = rng.standard_normal((16, q.get("TD", q["D"]))).astype(np.float32)
        cc0 = rng.integers(0, V, 16)
        cc0[:2] = [0, V - 1] if not rows else cc0[:2]    # edge ids for c0 in the first rows kept, if they pass
        tried += 16
        _, g = greedy(cand.astype(np.float64), cc0)
        for r, c, gr in zip(cand, cc0, g):
            if gr > GAP_REL and len(rows) < N:
                rows.append(r), c0s.append(c), gaps.append(gr)
    hid, c0 = np.stack(rows), np.array(c0s, np.int64)
    h = hid.astype(np.float64)
    codes = rng.integers(0, V, (N, Q))
    codes[:, 0] = c0
    logits = tf(h, codes[:, : Q - 1])
    gr, _ = greedy(h, c0)
    npl = np_logits(h, codes[:, : Q - 1])
    npg = c0[:, None]
    for k in range(1, Q):
        npg = np.concatenate([npg, np.argmax(np_logits(h, npg)[:, -1], -1)[:, None]], 1)
    res = np.abs(npl - logits).max() / np.abs(logits).max()
    nxt = next_embed(gr)
    seq, tnext = generate(h, c0)
    gen_ok = np.array_equal(seq, gr[:, 1:])
    res_next = np.abs(tnext - nxt).max() / np.abs(nxt).max()
    print(f"[{name}] rows kept {N}/{tried}, smallest greedy gap {min(gaps):.4g}; logit range "
          f"[{logits.min():.2f}, {logits.max():.2f}] std {logits.std():.2f}; c0 {c0.tolist()}")
    print(f"[{name}] numpy re-impl vs the reference: rel {res:.3g}; greedy equal {np.array_equal(npg, gr)}; "
          f"its generate (cache) codes equal {gen_ok}; next embedding vs the talker's sum: rel {res_next:.3g}")
    assert res < TOL and np.array_equal(npg, gr) and gen_ok and res_next < TOL
    save_npys(name, outdir, {
        "hidden": (hid, f"talker hidden state (position 0, talker width), N(0,1) f32, resampled for greedy gaps > "
                   f"{GAP_REL:g}*max|logit| (smallest {min(gaps):.3g})"),
        "codes": (codes.astype(np.int32), "column 0 = c0 (given by the talker), columns 1..Q-1 random teacher codes "
                  "(column Q-1 never an input)"),
        "logits": (logits.astype(np.float32), "teacher-forced logits of levels 1..Q-1 (level k from position k with "
                   "lm_head.{k-1}), float64 reference cast to f32"),
        "greedy": (gr.astype(np.int32), "greedy codes given c0 (column 0 = c0), lowest index on ties"),
        "next_embed": (nxt.astype(np.float32), "talker's next input embedding for the greedy codes (talker width, "
                       "unprojected): talker_codec[c0] + sum_k codec_embedding.{k-1}[c_k], k=1..Q-1 (float64, cast "
                       "to f32)")})
    return res


def omni_generate(ref, tb, Q):
    """generate(h, c0) for predictor_refs: the Qwen3-Omni predictor ref's own generate (KV cache, greedy) given the
    talker's table tb, and the talker's next-embedding sum as its prepare_inputs_for_generation builds it from
    generate's per-step input embeddings."""
    def generate(h, c0):
        with torch.no_grad():
            g = ref.generate(inputs_embeds=torch.stack([torch.from_numpy(h), tb[torch.from_numpy(c0)]], 1),
                             max_new_tokens=Q - 1, do_sample=False, output_hidden_states=True,
                             return_dict_in_generate=True)
            mid = [hid_[0] for hid_ in g.hidden_states[1:]]
            last = ref.get_input_embeddings()[-1](g.sequences[..., -1:])
            return g.sequences.numpy(), torch.cat([tb[torch.from_numpy(c0)][:, None]] + mid + [last], 1).sum(1).numpy()
    return generate


def qwen_fixture(outdir):
    from transformers.models.qwen3_omni_moe import modeling_qwen3_omni_moe as mq
    q = QWEN
    Q, V = q["Q"], q["V"]
    model = mq.Qwen3OmniMoeTalkerCodePredictorModelForConditionalGeneration
    cp = model(qwen_config()).eval()
    rng = np.random.default_rng(40)
    with torch.no_grad():
        for k, prm in cp.named_parameters():
            mean, std = qwen_std(k, prm.shape)
            prm.copy_(torch.from_numpy(mean + std * rng.standard_normal(tuple(prm.shape))).to(torch.bfloat16))
    cp = cp.to(torch.bfloat16)
    rounded = {k: f64(v) for k, v in cp.state_dict().items()}
    talker_t = torch.from_numpy(rng.standard_normal((q["TVC"], q["D"]))).to(torch.bfloat16)
    d = os.path.join(outdir, "qwen3omni_tiny")
    cp.save_pretrained(d)
    save_file({"talker.model.codec_embedding.weight": talker_t.contiguous()},
              os.path.join(d, "talker_codec_embedding.safetensors"), metadata={"format": "pt"})
    log_dir(outdir, "qwen3omni_tiny", lambda fn: (
        "the talker's codec table, one tensor talker.model.codec_embedding.weight [72, 32] bf16 (written by this "
        "script with safetensors, named as in the full Qwen3-Omni checkpoint)" if fn.startswith("talker")
        else "Qwen3OmniMoeTalkerCodePredictorModelForConditionalGeneration.save_pretrained, bf16"
        if fn.endswith(".safetensors") else "written by save_pretrained"))
    files = read_dir(d)
    talker = files.pop("talker.model.codec_embedding.weight")
    print(f"[qwen3omni_tiny] predictor: {len(files)} tensors; talker codec table {list(talker.shape)}")
    for k in sorted(files):
        if ".layers." not in k or ".layers.0." in k:
            print(f"    {k:50s} {list(files[k].shape)}")

    ref = model.from_pretrained(d, dtype=torch.float64, attn_implementation="sdpa").eval()
    assert all(np.array_equal(f64(v), rounded[k]) for k, v in ref.state_dict().items()), "reloaded weights differ"
    assert set(files) == set(rounded) and all(np.array_equal(files[k], rounded[k]) for k in files)
    rot = ref.model.rotary_emb
    inv64 = q["theta"] ** (-np.arange(0, q["HD"], 2, dtype=np.float64) / q["HD"])
    print(f"[qwen3omni_tiny] rope inv_freq: transformers float32 vs float64 rel diff "
          f"{np.abs(f64(rot.inv_freq) / inv64 - 1).max():.2g}; attention_scaling {rot.attention_scaling}")

    # unpatched (float32 RMSNorm / RoPE internals) residual, shown once, then patch to float64
    tb = torch.from_numpy(talker)
    tf = lambda h, codes: predictor_tf(ref, tb, h, codes)

    hp = np.random.default_rng(45).standard_normal((N, q["D"]))
    cpre = np.random.default_rng(46).integers(0, V, (N, Q - 1))
    npp = qwen_np(files, talker, hp, cpre)
    r_un = np.abs(tf(hp, cpre) - npp).max() / np.abs(npp).max()
    print(f"[qwen3omni_tiny] unpatched transformers (float32 RMSNorm/RoPE internals) vs numpy: rel {r_un:.3g}")
    mq.Qwen3OmniMoeRMSNorm.forward = _qwen_rms64
    mq.Qwen3OmniMoeRotaryEmbedding.forward = _rope64
    rot.inv_freq = rot.original_inv_freq = torch.from_numpy(inv64)

    res = predictor_refs("qwen3omni_tiny", outdir, q, 41, tf, lambda h, c: qwen_np(files, talker, h, c),
                         lambda c: talker[c[:, 0]] + sum(files[f"model.codec_embedding.{k - 1}.weight"][c[:, k]]
                                                         for k in range(1, Q)), omni_generate(ref, tb, Q))
    return dict(res=res, r_un=r_un)


# ----------------------------------------------------------------------------------------------------------------
def manifest(outdir, script="scripts/make_fixtures_families.py", dims=None, log=None):
    """Replace `script`'s section of MANIFEST.txt (other sections and make_fixtures.py's head are kept)."""
    log = LOG if log is None else log
    dims = f"N={N}; moshi {MOSHI}; moshi_q12 {MOSHI12}; qwen3omni {QWEN}" if dims is None else dims
    vers = fixture_common.versions()
    lines = [f"# date (UTC): {datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d %H:%M:%S')}",
             f"# versions: {vers}",
             f"# dims: {dims}",
             "# references: float64 on CPU from the weights as stored (bf16); logits saved as float32",
             "# file | bytes | shape dtype | how"]
    lines += fixture_common.manifest_rows(outdir, log)
    fixture_common.write_manifest_section(outdir, script, lines)
    fixture_common.report(outdir, log, vers)


def main():
    args = fixture_common.start(__doc__)
    moshi_fixture(args.out)
    moshi_fixture(args.out, "moshi_q12", MOSHI12, (32, 33))
    qwen_fixture(args.out)
    manifest(args.out)


if __name__ == "__main__":
    main()
