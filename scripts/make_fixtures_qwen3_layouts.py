#!/usr/bin/env python3
"""make_fixtures_qwen3_layouts.py -- Qwen3 code predictors as they are published (issue 17, point 1): the whole
Qwen3-Omni checkpoint (sharded) and MLX-quantized predictor directories.

Writes into --out (default tests/fixtures); run it AFTER make_fixtures_families.py (it reads that script's
qwen3omni_tiny/ weights and reuses its reference machinery), and it replaces only its own section of MANIFEST.txt:

  qwen3omni_full/        Qwen3OmniMoeForConditionalGeneration.save_pretrained(max_shard_size="100KB"), bf16: a tiny
                         thinker (MoE text model, vision and audio towers), talker (MoE) and code2wav, with the
                         talker's code predictor and codec table set to qwen3omni_tiny's stored weights, so the
                         references are qwen3omni_tiny_*.npy (recomputed here through the reloaded full model and
                         asserted equal); no .npy of its own
  qwen3omni_mlx_q8/      a Qwen3-Omni code predictor directory (config.json of save_pretrained + "quantization") whose
  qwen3omni_mlx_q4/      tensors were quantized by MLX itself (mlx.core.quantize, affine; q8 group 32 / q4 group 64,
                         bf16 scales and biases as mlx-lm keeps them for a bf16 model) and written by
                         mlx.core.save_safetensors: every Linear and Embedding (layer matrices, lm_head.{j},
                         codec_embedding.{j}, and the talker's codec table in talker_codec_embedding.safetensors);
                         norms stay bf16
  qwen3omni_mlx_q{8,4}_{hidden,codes,logits,greedy,next_embed}.npy   as qwen3omni_tiny's (README-fixtures.md)

MLX references: the weights dequantized in float32 as MLX does (w = fl32(fl32(scale * q) + bias), two roundings;
asserted bit-identical to mlx.core.dequantize given float32 scales/biases), then transformers' own predictor in
float64 from those values (the float32 RMSNorm/RoPE internals patched to float64, as make_fixtures_families.py), and
cross-checked against the numpy re-implementation that reads and dequantizes the MLX-written files itself.
Needs: torch, transformers 5.x, safetensors, numpy, mlx (Linux CPU: `pip install "mlx[cpu]"`).
"""
import json
import os
import shutil

import fixture_common  # scripts/fixture_common.py
import make_fixtures_families as fam  # scripts/make_fixtures_families.py: the Qwen3-Omni fixture machinery
import numpy as np
import torch

LOG = []
# the MLX predictor: D 64 so that group 64 divides every input width (D, H*HD = 64, F = 128)
QWENQ = dict(fam.QWEN, D=64, F=128, L=2)
MLX_VARIANTS = (("qwen3omni_mlx_q8", 8, 32), ("qwen3omni_mlx_q4", 4, 64))
PRED = "talker.code_predictor."
TALKER_TABLE = "talker.model.codec_embedding.weight"


def patch64(mq):
    """float64 RMSNorm / RoPE forwards of the predictor's classes (make_fixtures_families.py's replacements)."""
    mq.Qwen3OmniMoeRMSNorm.forward = fam._qwen_rms64
    mq.Qwen3OmniMoeRotaryEmbedding.forward = fam._rope64


def set_inv64(rot, q):
    rot.inv_freq = rot.original_inv_freq = torch.from_numpy(q["theta"] ** (-np.arange(0, q["HD"], 2, dtype=np.float64)
                                                                           / q["HD"]))


def predictor_config(q):
    from transformers.models.qwen3_omni_moe.configuration_qwen3_omni_moe import Qwen3OmniMoeTalkerCodePredictorConfig
    return Qwen3OmniMoeTalkerCodePredictorConfig(
        vocab_size=q["V"], hidden_size=q["D"], intermediate_size=q["F"], num_hidden_layers=q["L"],
        num_attention_heads=q["H"], num_key_value_heads=q["KVH"], head_dim=q["HD"], rms_norm_eps=q["eps"],
        num_code_groups=q["Q"], max_position_embeddings=64,
        rope_parameters=dict(rope_type="default", rope_theta=q["theta"]))


# ----------------------------------------------------------------------------------------------------------------
# A. The whole Qwen3-Omni model
def full_config():
    """Tiny Qwen3OmniMoeConfig: the code predictor is QWEN's (as qwen3omni_tiny), the talker as wide as it (32: the
    talker feeds its hidden state and codec embedding to the predictor unprojected). Two keys the 5.x modules read
    but the config classes do not define (talker text_config.shared_expert_intermediate_size, talker_config.
    spatial_merge_size) are given as the published config.json gives them."""
    from transformers.models.qwen3_omni_moe.configuration_qwen3_omni_moe import Qwen3OmniMoeConfig
    q = fam.QWEN
    cp = predictor_config(q).to_dict()
    talker_text = dict(vocab_size=q["TVC"], hidden_size=q["D"], intermediate_size=32, num_hidden_layers=1,
                       num_attention_heads=2, num_key_value_heads=1, head_dim=16, moe_intermediate_size=16,
                       shared_expert_intermediate_size=16, num_experts=2, num_experts_per_tok=1,
                       rope_parameters=dict(rope_type="default", rope_theta=1e6))
    thinker = dict(
        text_config=dict(vocab_size=128, hidden_size=16, intermediate_size=16, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1, head_dim=8, moe_intermediate_size=8,
                         num_experts=2, num_experts_per_tok=1, rope_parameters=dict(rope_type="default",
                                                                                     rope_theta=1e6)),
        vision_config=dict(depth=1, hidden_size=16, intermediate_size=16, num_heads=2, out_hidden_size=16,
                           patch_size=4, temporal_patch_size=1, deepstack_visual_indexes=[0],
                           num_position_embeddings=64),
        audio_config=dict(d_model=16, encoder_layers=1, encoder_attention_heads=2, encoder_ffn_dim=16,
                          num_mel_bins=16, downsample_hidden_size=4, output_dim=16, max_source_positions=32))
    code2wav = dict(codebook_size=16, hidden_size=16, num_attention_heads=2, num_key_value_heads=2,
                    intermediate_size=16, num_hidden_layers=1, num_quantizers=q["Q"], upsample_rates=[2, 2],
                    upsampling_ratios=[2], decoder_dim=16, max_position_embeddings=64, sliding_window=8)
    return Qwen3OmniMoeConfig(
        thinker_config=thinker, code2wav_config=code2wav,
        talker_config=dict(text_config=talker_text, code_predictor_config=cp, num_code_groups=q["Q"],
                           thinker_hidden_size=16, spatial_merge_size=2))


def omni_full(outdir):
    from transformers.models.qwen3_omni_moe import modeling_qwen3_omni_moe as mq
    q = fam.QWEN
    Q = q["Q"]
    src = fam.read_dir(os.path.join(outdir, "qwen3omni_tiny"))   # the predictor alone + the talker's table (bf16)
    model = mq.Qwen3OmniMoeForConditionalGeneration(full_config()).eval()
    rng = np.random.default_rng(50)
    copied = 0
    with torch.no_grad():
        for k, prm in model.named_parameters():
            if k.startswith(PRED):
                v = src[k[len(PRED):]]
                copied += 1
            elif k == TALKER_TABLE:
                v = src[k]
                copied += 1
            elif k.endswith("norm.weight") or "layernorm" in k or k.endswith("ln_post.weight"):
                v = 1.0 + 0.1 * rng.standard_normal(tuple(prm.shape))
            else:
                v = 0.05 * rng.standard_normal(tuple(prm.shape))
            assert v.shape == tuple(prm.shape), (k, v.shape, prm.shape)
            prm.copy_(torch.from_numpy(np.asarray(v)))
    assert copied == len(src), (copied, len(src))
    model = model.to(torch.bfloat16)
    d = os.path.join(outdir, "qwen3omni_full")
    shutil.rmtree(d, ignore_errors=True)
    model.save_pretrained(d, max_shard_size="100KB")

    # the layout as written: names, shards, config keys the C loader reads
    idx = json.load(open(os.path.join(d, "model.safetensors.index.json")))["weight_map"]
    cfg = json.load(open(os.path.join(d, "config.json")))
    shards = sorted(set(idx.values()))
    pred_shards = sorted({idx[k] for k in idx if k.startswith(PRED) or k == TALKER_TABLE})
    want = {PRED + k for k in src if k != TALKER_TABLE} | {TALKER_TABLE}
    assert want <= set(idx), sorted(want - set(idx))
    assert set(k for k in idx if k.startswith(PRED)) == want - {TALKER_TABLE}
    tc = cfg["talker_config"]
    assert cfg["model_type"] == "qwen3_omni_moe" and tc["text_config"]["hidden_size"] == q["D"]
    assert tc["code_predictor_config"]["hidden_size"] == q["D"] and tc["code_predictor_config"]["num_code_groups"] == Q
    print(f"[qwen3omni_full] {len(idx)} tensors in {len(shards)} shards; the predictor and the talker's codec table "
          f"({len(want)} tensors) in {pred_shards}; model_type {cfg['model_type']}, talker text_config.hidden_size "
          f"{tc['text_config']['hidden_size']}, code_predictor_config.hidden_size "
          f"{tc['code_predictor_config']['hidden_size']}; no projection between them in the module")
    files = fam.read_dir(d)
    assert all(np.array_equal(files[PRED + k] if k != TALKER_TABLE else files[k], src[k]) for k in src)
    how = lambda fn: ("written by save_pretrained" if not fn.endswith(".safetensors") else
                      "Qwen3OmniMoeForConditionalGeneration.save_pretrained(max_shard_size='100KB'), bf16; " +
                      (f"holds talker.code_predictor.* / {TALKER_TABLE} tensors (= qwen3omni_tiny's)"
                       if fn in pred_shards else "no tensor depthdec reads (thinker / talker / code2wav only)"))
    LOG.extend((f"qwen3omni_full/{fn}", how(fn)) for fn in sorted(os.listdir(d)))

    # references through the reloaded full model, float64, as qwen3omni_tiny's
    ref = mq.Qwen3OmniMoeForConditionalGeneration.from_pretrained(d, dtype=torch.float64,
                                                                  attn_implementation="sdpa").eval()
    cp = ref.talker.code_predictor
    tb = ref.talker.model.codec_embedding.weight.detach()
    assert np.array_equal(fam.f64(tb), src[TALKER_TABLE])
    assert all(np.array_equal(fam.f64(v), src[k]) for k, v in cp.state_dict().items() if k in src)
    patch64(mq)
    set_inv64(cp.model.rotary_emb, q)
    load = lambda s: np.load(os.path.join(outdir, f"qwen3omni_tiny_{s}.npy"))
    h, codes, logits, greedy = load("hidden").astype(np.float64), load("codes"), load("logits"), load("greedy")
    tf = lambda hh, cc: fam.predictor_tf(cp, tb, hh, cc)
    lg = tf(h, codes[:, : Q - 1])
    c = greedy[:, :1].astype(np.int64)
    for _ in range(1, Q):
        c = np.concatenate([c, np.argmax(tf(h, c)[:, -1], -1)[:, None]], 1)
    talker = files[TALKER_TABLE]
    npl = fam.qwen_np(files, talker, h, codes[:, : Q - 1], p=PRED)
    res = np.abs(lg - logits).max() / np.abs(logits).max()
    res_np = np.abs(npl - lg).max() / np.abs(lg).max()
    same32 = np.array_equal(lg.astype(np.float32), logits)
    print(f"[qwen3omni_full] full model's talker.code_predictor (float64) vs qwen3omni_tiny_logits.npy: rel {res:.3g} "
          f"(float32 casts bit-identical: {same32}); greedy equal {np.array_equal(c, greedy)}; numpy re-impl on the "
          f"shards vs transformers: rel {res_np:.3g}")
    assert res < 1e-6 and np.array_equal(c, greedy) and res_np < fam.TOL
    return dict(full_res=res, full_np=res_np)


# ----------------------------------------------------------------------------------------------------------------
# B. MLX-quantized predictor directories
def unpack(wq, bits):
    """MLX affine packing: values from the least significant bits of each uint32 (bits 8: byte k is element k)."""
    per, mask = 32 // bits, (1 << bits) - 1
    sh = np.arange(per, dtype=np.uint32) * bits
    return ((wq[..., None] >> sh) & mask).reshape(*wq.shape[:-1], wq.shape[-1] * per).astype(np.float32)


def dequant32(wq, s, b, bits, group):
    """w = fl32(fl32(scale * q) + bias): float32, two roundings, no fma (numpy rounds every operation)."""
    qv = unpack(wq, bits)
    rows, K = qv.shape
    s32 = np.repeat(s.astype(np.float32), group, -1)
    b32 = np.repeat(b.astype(np.float32), group, -1)
    sq = (s32 * qv).astype(np.float32)
    return (sq + b32).astype(np.float32)


def mlx_read(path):
    """tensors of an MLX-written file: uint32 as numpy uint32, bf16/f32 as numpy float32 (exact)."""
    import mlx.core as mx
    out = {}
    for k, v in mx.load(path).items():
        out[k] = np.array(v) if v.dtype == mx.uint32 else np.array(v.astype(mx.float32))
    return out


def quantizable(name, shape):
    return len(shape) == 2 and name.endswith(".weight") and "norm" not in name


def mlx_fixture(outdir, pre):
    from transformers.models.qwen3_omni_moe import modeling_qwen3_omni_moe as mq
    import mlx.core as mx
    q = QWENQ
    Q, V = q["Q"], q["V"]
    model = mq.Qwen3OmniMoeTalkerCodePredictorModelForConditionalGeneration
    cp = model(predictor_config(q)).eval()
    rng = np.random.default_rng(60)
    with torch.no_grad():
        for k, prm in cp.named_parameters():
            mean, std = fam.qwen_std(k, prm.shape)
            prm.copy_(torch.from_numpy(mean + std * rng.standard_normal(tuple(prm.shape))).to(torch.bfloat16))
    cp = cp.to(torch.bfloat16)
    bf = {k: v.detach().float().numpy() for k, v in cp.state_dict().items()}        # bf16 values, exact in f32
    bf[TALKER_TABLE] = torch.from_numpy(rng.standard_normal((q["TVC"], q["D"]))).to(torch.bfloat16).float().numpy()
    tmp = os.path.join(pre, "saved")
    cp.save_pretrained(tmp)                                                          # for its config.json
    base_cfg = json.load(open(os.path.join(tmp, "config.json")))
    stats = {}
    for name, bits, group in MLX_VARIANTS:
        d = os.path.join(outdir, name)
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
        pred, tab, deq = {}, {}, {}
        worst = 0.0
        for k, v in bf.items():
            dst = tab if k == TALKER_TABLE else pred
            if not quantizable(k, v.shape):
                dst[k] = mx.array(v).astype(mx.bfloat16)
                deq[k] = v.astype(np.float64)
                continue
            wq, s, b = mx.quantize(mx.array(v).astype(mx.bfloat16), group_size=group, bits=bits)
            base = k[: -len(".weight")]
            dst[base + ".weight"], dst[base + ".scales"], dst[base + ".biases"] = wq, s, b
            w32 = dequant32(np.array(wq), np.array(s.astype(mx.float32)), np.array(b.astype(mx.float32)), bits, group)
            m32 = np.array(mx.dequantize(wq, s.astype(mx.float32), b.astype(mx.float32), group_size=group, bits=bits))
            assert np.array_equal(w32.view(np.uint32), m32.view(np.uint32)), f"{name} {k}: MLX's float32 dequantize " \
                                                                             "differs from scale*q + bias"
            worst = max(worst, float(np.abs(w32 - v).max() / np.abs(v).max()))
            deq[k] = w32.astype(np.float64)
        mx.save_safetensors(os.path.join(d, "model.safetensors"), pred, metadata={"format": "mlx"})
        mx.save_safetensors(os.path.join(d, "talker_codec_embedding.safetensors"), tab, metadata={"format": "mlx"})
        cfg = dict(base_cfg, quantization=dict(group_size=group, bits=bits, mode="affine"),
                   quantization_config=dict(group_size=group, bits=bits, mode="affine"))
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(cfg, f, indent=2, sort_keys=True)
        nq = sum(1 for k in pred if k.endswith(".scales"))
        print(f"[{name}] MLX {mx.__version__} affine {bits}-bit group {group}: {nq} predictor matrices + the talker's "
              f"table quantized (bf16 scales/biases); float32 dequantize == mlx.core.dequantize bit for bit; max "
              f"|w_q - w| / max|w| = {worst:.3g}")
        LOG.extend((f"{name}/{fn}", "written by mlx.core.save_safetensors (MLX-quantized: U32 .weight + bf16 .scales "
                    f"/ .biases, {bits}-bit group {group}; norms bf16)" if fn.endswith(".safetensors") else
                    "save_pretrained's config.json + MLX's quantization / quantization_config")
                   for fn in sorted(os.listdir(d)))

        # the float64 reference: transformers' predictor holding the dequantized values
        ref = model._from_config(predictor_config(q), attn_implementation="sdpa", dtype=torch.float64).eval()
        sd = {k: torch.from_numpy(v) for k, v in deq.items() if k != TALKER_TABLE}
        missing, unexpected = ref.load_state_dict(sd, strict=False)
        assert not unexpected and all("rotary" in k for k in missing), (missing, unexpected)
        patch64(mq)
        set_inv64(ref.model.rotary_emb, q)
        tb = torch.from_numpy(deq[TALKER_TABLE])
        files = mlx_read(os.path.join(d, "model.safetensors"))
        files.update(mlx_read(os.path.join(d, "talker_codec_embedding.safetensors")))
        wnp = {}   # the numpy re-implementation's weights: dequantized from the files themselves
        for k in files:
            if k.endswith(".weight") and k[:-7] + ".scales" in files:
                bk = k[:-7]
                wnp[k] = dequant32(files[k], files[bk + ".scales"], files[bk + ".biases"], bits, group).astype(np.float64)
            elif k.endswith(".weight"):
                wnp[k] = files[k].astype(np.float64)
        talker = wnp.pop(TALKER_TABLE)

        fam.LOG.clear()
        res = fam.predictor_refs(name, outdir, q, 61, lambda h, c: fam.predictor_tf(ref, tb, h, c),
                                 lambda h, c: fam.qwen_np(wnp, talker, h, c, q=q),
                                 lambda c: talker[c[:, 0]] + sum(wnp[f"model.codec_embedding.{k - 1}.weight"][c[:, k]]
                                                                 for k in range(1, Q)), fam.omni_generate(ref, tb, Q))
        LOG.extend(fam.LOG)
        stats[name] = res
    return stats


def main():
    args = fixture_common.start(__doc__)
    import tempfile
    st = omni_full(args.out)
    with tempfile.TemporaryDirectory() as pre:
        st.update(mlx_fixture(args.out, pre))
    import mlx.core as mx
    fam.manifest(args.out, "scripts/make_fixtures_qwen3_layouts.py",
                 f"N={fam.N}; qwen3omni_full: predictor {fam.QWEN}; mlx {mx.__version__}: {QWENQ}, variants (name, "
                 f"bits, group) {MLX_VARIANTS}; MLX references from the float32-dequantized weights", LOG)


if __name__ == "__main__":
    main()
