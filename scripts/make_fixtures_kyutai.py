#!/usr/bin/env python3
"""make_fixtures_kyutai.py -- a tiny Moshi LM in Kyutai's own checkpoint format, with float64 references from the
`moshi` package's own depformer (kyutai-labs/moshi, PyPI `moshi`).

Writes into --out (default tests/fixtures):
  kyutai_tiny/model.safetensors    the whole tiny LMModel's state_dict as the package saves it (safetensors.torch
                                   .save_file of the state dict, bf16): temporal transformer + depformer; per-step
                                   attention weights as self_attn.in_projs.{p} / out_projs.{p} (package >= 0.2.x)
  kyutai_tiny/config.json          the LMModel kwargs (Kyutai's config.json keys): depformer_num_heads, norm, ...
  kyutai_tiny_legacy/                   (model.safetensors + config.json) the same weights with the older stacked names (self_attn.in_proj_weight
                                   [Q*(D+2*kv), D], self_attn.out_proj.weight [Q*D, D]) as in kyutai/moshiko-pytorch-bf16;
                                   checked here to load into the package (its _load_hook) to the same parameters
  kyutai_tiny_hidden.npy   f32 [N, IN]   temporal-transformer output (the depformer's input)
  kyutai_tiny_text.npy     i32 [N]       the frame's text token in [0, text_card]
  kyutai_tiny_codes.npy    i32 [N, Q]    teacher-forcing codes in [0, card] (card = the initial/pad row)
  kyutai_tiny_logits.npy   f32 [N, Q, V] LMModel.forward_depformer_training (float64) logits of all Q levels
  kyutai_tiny_greedy.npy   f32 [N, Q]    greedy codes: position p's argmax given the greedy codes before it,
                                         through the package's streaming forward_depformer (as LMGen.depformer_step)

The references are float64 on the CPU with the weights as stored (bf16, re-read from the file). norm is "rms_norm"
(eps 1e-5, computed in the input's dtype): moshiko's "rms_norm_f32" casts to float32 inside, which would make a
float64 reference float32. GQA on (depformer_kv_repeat 2), weights per step on, multi-linear on.
Needs: torch, safetensors, numpy, moshi (installed --no-deps beside einops and sentencepiece works)."""
import datetime
import json
import os
import sys

os.environ.setdefault("NO_TORCH_COMPILE", "1")

import numpy as np
import torch
from safetensors.torch import load_file, save_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fixture_common  # noqa: E402

N = 6
GAP_REL = 1e-3
KW = dict(dim=48, text_card=40, existing_text_padding_id=3, n_q=6, dep_q=6, card=64, num_heads=4, num_layers=1,
          hidden_scale=2, causal=True, layer_scale=None, context=10, max_period=10000, gating="silu",
          norm="rms_norm", positional_embedding="rope", depformer_dim=32, depformer_dim_feedforward=96,
          depformer_num_heads=4, depformer_num_layers=3, depformer_layer_scale=None, depformer_multi_linear=True,
          depformer_context=6, depformer_max_period=10000, depformer_gating="silu", depformer_pos_emb="none",
          depformer_weights_per_step=True, depformer_kv_repeat=2, delays=[0] * 7)


def build(dtype):
    from moshi.models.lm import LMModel
    return LMModel(**KW, dtype=dtype).eval()


def legacy(sd, Q):
    """The older names: per-step attention weights stacked along rows."""
    out = {}
    for k, v in sd.items():
        if k.startswith("depformer.") and (".self_attn.in_projs." in k or ".self_attn.out_projs." in k):
            continue
        out[k] = v
    for i in range(KW["depformer_num_layers"]):
        p = f"depformer.layers.{i}.self_attn."
        out[p + "in_proj_weight"] = torch.cat([sd[p + f"in_projs.{q}.weight"] for q in range(Q)], 0).contiguous()
        out[p + "out_proj.weight"] = torch.cat([sd[p + f"out_projs.{q}.weight"] for q in range(Q)], 0).contiguous()
    return out


def main():
    args = fixture_common.start(__doc__)
    torch.manual_seed(40)
    g = torch.Generator().manual_seed(41)
    lm = build(torch.float32)
    with torch.no_grad():
        for name, p in lm.named_parameters():
            if name.endswith("alpha"):
                p.copy_(1 + 0.3 * torch.randn(p.shape, generator=g))
            elif p.dim() == 2 and ("emb" in name and "depformer_in" not in name):
                p.copy_(torch.randn(p.shape, generator=g))
            elif p.dim() == 2:
                p.copy_(torch.randn(p.shape, generator=g) / p.shape[1] ** 0.5)
    sd = {k: v.to(torch.bfloat16).contiguous() for k, v in lm.state_dict().items()}
    Q, V, TV, IN = KW["dep_q"], KW["card"], KW["text_card"], KW["dim"]
    d = os.path.join(args.out, "kyutai_tiny")
    os.makedirs(d, exist_ok=True)
    save_file(sd, os.path.join(d, "model.safetensors"))
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(KW, f, indent=1)
    os.makedirs(os.path.join(args.out, "kyutai_tiny_legacy"), exist_ok=True)
    with open(os.path.join(args.out, "kyutai_tiny_legacy", "config.json"), "w") as f:
        json.dump(KW, f, indent=1)
    save_file(legacy(sd, Q), os.path.join(args.out, "kyutai_tiny_legacy", "model.safetensors"))

    # float64 model from the weights as stored
    ref = build(torch.float64)
    stored = load_file(os.path.join(d, "model.safetensors"))
    ref.load_state_dict({k: v.to(torch.float64) for k, v in stored.items()})
    ref2 = build(torch.float64)
    ref2.load_state_dict({k: v.to(torch.float64) for k, v in load_file(
        os.path.join(args.out, "kyutai_tiny_legacy", "model.safetensors")).items()})
    for (k, a), (k2, b) in zip(ref.state_dict().items(), ref2.state_dict().items()):
        assert k == k2 and torch.equal(a, b), k
    print("legacy names load into the package to the same parameters")

    def tf(h, text, codes):
        seq = torch.zeros(h.shape[0], KW["n_q"] + 1, 1, dtype=torch.long)
        seq[:, 0, 0] = torch.as_tensor(text)
        seq[:, 1:Q, 0] = torch.as_tensor(codes[:, :Q - 1], dtype=torch.long)
        with torch.no_grad():
            lg = ref.forward_depformer_training(seq, torch.as_tensor(h, dtype=torch.float64)[:, None])
        return lg[:, :, 0].numpy()  # [B, Ka, card]

    def greedy(h, text):
        B = h.shape[0]
        out = np.zeros((B, Q), np.int64)
        hh = torch.as_tensor(h, dtype=torch.float64)[:, None]
        with torch.no_grad(), ref.depformer.streaming(B):
            prev = torch.as_tensor(text, dtype=torch.long)[:, None]
            for p in range(Q):
                lg = ref.forward_depformer(p, prev[:, None], hh)  # [B, 1, 1, card]
                nxt = lg.reshape(B, -1).argmax(-1)
                out[:, p] = nxt.numpy()
                prev = nxt[:, None]
        return out

    rng = np.random.default_rng(42)
    text = rng.permutation(TV + 1)[:N].astype(np.int32)
    text[0], text[1] = TV, 0
    codes = rng.integers(0, V, size=(N, Q)).astype(np.int32)
    codes[1, :Q - 1] = V
    codes[2, 3] = V
    hid = rng.standard_normal((N, IN)).astype(np.float32)
    gaps = []
    for r in range(N):
        for _ in range(200):
            gr = greedy(hid[r:r + 1], text[r:r + 1])
            lg = tf(hid[r:r + 1], text[r:r + 1], gr)[0]
            z = np.sort(lg, -1)
            gap = ((z[:, -1] - z[:, -2]) / np.abs(lg).max()).min()
            if gap > GAP_REL:
                break
            hid[r] = rng.standard_normal(IN).astype(np.float32)
        else:
            raise SystemExit("no hidden row with greedy gaps found")
        gaps.append(gap)
    gr = greedy(hid, text)
    # the streaming path and teacher forcing agree: teacher-forced argmax on the greedy codes is the greedy code
    assert (tf(hid, text, gr).argmax(-1) == gr).all()
    logits = tf(hid, text, codes).astype(np.float32)
    files = {
        "hidden": (hid, f"temporal hidden state, N(0,1) f32, resampled for greedy gaps > {GAP_REL:g}*max|logit| "
                   f"(smallest {min(gaps):.3g})"),
        "text": (text, f"text token per row in [0,{TV}]; {TV} (the extra row) at row 0, 0 at row 1"),
        "codes": (codes, f"teacher-forcing codes in [0,{V}]; {V} = initial/pad row (row 1 levels 0..Q-2, row 2 "
                  "level 3); column Q-1 is never an input"),
        "logits": (logits, "LMModel.forward_depformer_training logits of levels 0..Q-1 (float64, cast to f32)"),
        "greedy": (gr.astype(np.int32), "greedy codes c0..c(Q-1) given hidden+text, streaming forward_depformer "
                   "(argmax, lowest index on ties)"),
    }
    log = [("kyutai_tiny/model.safetensors", "moshi LMModel state_dict, safetensors.torch.save_file, bf16, whole "
            "tiny LM (temporal transformer + depformer)"),
           ("kyutai_tiny/config.json", "the LMModel kwargs (Kyutai config.json keys)"),
           ("kyutai_tiny_legacy/config.json", "the same LMModel kwargs"),
           ("kyutai_tiny_legacy/model.safetensors", "the same weights, older stacked names in_proj_weight / out_proj.weight "
            "(loaded by the package to identical parameters)")]
    for k, (a, desc) in files.items():
        fn = f"kyutai_tiny_{k}.npy"
        np.save(os.path.join(args.out, fn), a)
        log.append((fn, desc))
    import moshi
    vers = fixture_common.versions() + f"; moshi {getattr(moshi, '__version__', '?')}"
    dims = dict(Q=Q, V=V, TV=TV, IN=IN, D=KW["depformer_dim"], L=KW["depformer_num_layers"],
                H=KW["depformer_num_heads"], KVH=KW["depformer_num_heads"] // KW["depformer_kv_repeat"],
                F=2 * KW["depformer_dim_feedforward"] // 3, eps=1e-5)
    lines = [f"# date (UTC): {datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d %H:%M:%S')}",
             f"# versions: {vers}", f"# dims: N={N}; kyutai {dims}",
             "# references: float64 on CPU from the weights as stored (bf16); logits saved as float32",
             "# file | bytes | shape dtype | how"] + fixture_common.manifest_rows(args.out, log)
    fixture_common.write_manifest_section(args.out, "scripts/make_fixtures_kyutai.py", lines)
    fixture_common.report(args.out, log, vers)


if __name__ == "__main__":
    main()
