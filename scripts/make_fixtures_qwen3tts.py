#!/usr/bin/env python3
"""make_fixtures_qwen3tts.py -- tiny Qwen3-TTS code-predictor fixture (issue 17, point 4), made by the qwen-tts package.

Needs its own venv: qwen-tts 0.1.1 pins transformers 4.57.3 (the other fixtures use transformers 5.x), e.g.
  python3 -m venv /tmp/venv-tts && /tmp/venv-tts/bin/pip install transformers==4.57.3 safetensors numpy einops torch
  /tmp/venv-tts/bin/pip install --no-deps accelerate==1.12.0 qwen-tts==0.1.1
qwen-tts's package __init__ imports its audio front ends (librosa, soundfile, torchaudio, sox, onnxruntime, gradio);
the code predictor uses none of them, so they are replaced by stub modules that raise if anything calls them.

Writes into --out (default tests/fixtures), touching only qwen3tts_tiny* and its own MANIFEST.txt section:
  qwen3tts_tiny/                Qwen3TTSForConditionalGeneration.save_pretrained (bf16): the whole tiny model
                                (talker, its code predictor, speaker encoder), names talker.code_predictor.*,
                                talker.model.codec_embedding.weight, ... as the published checkpoint
  qwen3tts_tiny_hidden.npy      f32 [N, 48]      talker hidden state (talker width 48; predictor width 32)
  qwen3tts_tiny_codes.npy       i32 [N, Q]       column 0 = c0 (given by the talker), the rest teacher codes
  qwen3tts_tiny_logits.npy      f32 [N, Q-1, V]  teacher-forced logits of levels 1..Q-1
  qwen3tts_tiny_greedy.npy      i32 [N, Q]       greedy codes given c0 (column 0 = c0)
  qwen3tts_tiny_next_embed.npy  f32 [N, 48]      talker's next input embedding for the greedy codes (talker-wide,
                                                 unprojected): talker_codec[c0] + sum_k codec_embedding.{k-1}[c_k]
Conventions as make_fixtures_families.py (float64 references from the stored bf16 weights by the package's own
modules, float32 casts in RMSNorm/RoPE replaced by float64 ones, sdpa attention; numpy cross-check; greedy gaps).
"""
import importlib.machinery
import math
import os
import sys
import types

import fixture_common  # scripts/fixture_common.py
import numpy as np
import torch
import transformers
from transformers import AutoConfig, AutoModel, AutoProcessor, GenerationMixin, PreTrainedModel  # noqa: F401
import transformers.generation.utils  # noqa: F401  (imported before the stubs below)
import transformers.modeling_utils  # noqa: F401
import transformers.processing_utils  # noqa: F401

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_fixtures_families as fam  # noqa: E402  (shared helpers; its family imports are lazy)
from make_fixtures_families import N, f64  # noqa: E402

for _n in ("librosa", "librosa.filters", "soundfile", "torchaudio", "torchaudio.compliance",
           "torchaudio.compliance.kaldi", "sox", "onnxruntime", "gradio"):
    _m = types.ModuleType(_n)
    _m.__path__, _m.__spec__ = [], importlib.machinery.ModuleSpec(_n, None, is_package=True)

    def _stub(*a, _n=_n, **k):
        raise RuntimeError(f"stub module {_n} called: not needed by the code predictor")
    _m.__getattr__ = lambda attr, _s=_stub: _s
    sys.modules[_n] = _m
    if "." in _n:
        setattr(sys.modules[_n.rsplit(".", 1)[0]], _n.rsplit(".", 1)[1], _m)
from qwen_tts.core.models import modeling_qwen3_tts as mt  # noqa: E402
from qwen_tts.core.models.configuration_qwen3_tts import Qwen3TTSConfig  # noqa: E402

TTS = dict(Q=8, V=64, TVC=72, TD=48, D=32, L=3, H=4, KVH=2, HD=16, F=64, eps=1e-6, theta=1000000.0)
LOG = []


def tts_config():
    t = TTS
    cp = dict(vocab_size=t["V"], hidden_size=t["D"], intermediate_size=t["F"], num_hidden_layers=t["L"],
              num_attention_heads=t["H"], num_key_value_heads=t["KVH"], head_dim=t["HD"], rms_norm_eps=t["eps"],
              num_code_groups=t["Q"], rope_theta=t["theta"], max_position_embeddings=64)
    talker = dict(code_predictor_config=cp, vocab_size=t["TVC"], hidden_size=t["TD"], intermediate_size=96,
                  num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=2, head_dim=12,
                  num_code_groups=t["Q"], text_hidden_size=40, text_vocab_size=50, max_position_embeddings=64,
                  spk_id={}, spk_is_dialect={}, codec_language_id={})
    spk = dict(mel_dim=16, enc_dim=t["TD"], enc_channels=[16, 16, 16, 16, 48], enc_attention_channels=8,
               enc_res2net_scale=2, enc_se_channels=8)
    return Qwen3TTSConfig(talker_config=talker, speaker_encoder_config=spk, tts_model_type="base")


def tts_std(name, shape):
    if name.endswith("norm.weight") or "layernorm" in name:
        return 1.0, 0.1
    if "embedding" in name:
        return 0.0, 1.0
    if ".lm_head." in name:
        return 0.0, 2.5 / math.sqrt(shape[-1])
    if name.endswith("small_to_mtp_projection.bias"):
        return 0.0, 0.1
    if name.endswith(("o_proj.weight", "down_proj.weight")):
        return 0.0, 0.5 / math.sqrt(shape[-1])
    return 0.0, 1.0 / math.sqrt(shape[-1])


def tts_np(w, h, codes, p="talker.code_predictor."):
    """Independent float64 Qwen3-TTS code predictor: the Qwen3-Omni one of make_fixtures_families.py with the
    talker-wide tables and small_to_mtp_projection (x W^T + b) on every input row."""
    return fam.qwen_np(w, w["talker.model.codec_embedding.weight"], h, codes, p,
                       (w[p + "small_to_mtp_projection.weight"], w[p + "small_to_mtp_projection.bias"]), TTS)


def tts_fixture(outdir):
    t = TTS
    Q, V = t["Q"], t["V"]
    torch.manual_seed(0)                      # init of the parts the references do not use (talker layers, ...)
    model = mt.Qwen3TTSForConditionalGeneration(tts_config()).eval()
    rng = np.random.default_rng(50)
    with torch.no_grad():
        for k, prm in model.named_parameters():
            if k.startswith("talker.code_predictor.") or k == "talker.model.codec_embedding.weight":
                mean, std = tts_std(k, prm.shape)
                prm.copy_(torch.from_numpy(mean + std * rng.standard_normal(tuple(prm.shape))).to(torch.bfloat16))
    model = model.to(torch.bfloat16)
    rounded = {k: f64(v) for k, v in model.state_dict().items()}
    d = os.path.join(outdir, "qwen3tts_tiny")
    model.save_pretrained(d)
    fam.log_dir(outdir, "qwen3tts_tiny", lambda fn: "Qwen3TTSForConditionalGeneration.save_pretrained (qwen-tts "
                "0.1.1), bf16, whole tiny model" if fn.endswith(".safetensors") else "written by save_pretrained")
    files = fam.read_dir(d)
    print(f"[qwen3tts_tiny] {len(files)} tensors; code predictor + talker codec table:")
    for k in sorted(files):
        if (k.startswith("talker.code_predictor.") and ".layers.1." not in k and ".layers.2." not in k
                and not k[:-len(".weight")].endswith(tuple(f".{j}" for j in range(1, Q)))) \
                or k == "talker.model.codec_embedding.weight":
            print(f"    {k:60s} {list(files[k].shape)}")
    assert set(files) == set(rounded) and all(np.array_equal(files[k], rounded[k]) for k in files)

    # Qwen3TTSForConditionalGeneration.from_pretrained also loads a speech tokenizer (speech_tokenizer/): not part
    # of this fixture, so the plain PreTrainedModel.from_pretrained reloads the saved weights. The config is passed
    # in: qwen-tts 0.1.1 cannot re-read the config.json it writes (Qwen3TTSSpeakerEncoderConfig is a plain class
    # and rejects the model_type key that save_pretrained puts into speaker_encoder_config)
    ref = PreTrainedModel.from_pretrained.__func__(mt.Qwen3TTSForConditionalGeneration, d, config=tts_config(),
                                                    torch_dtype=torch.float64, attn_implementation="sdpa").eval()
    assert all(np.array_equal(f64(v), rounded[k]) for k, v in ref.state_dict().items()), "reloaded weights differ"
    cp = ref.talker.code_predictor
    tb = ref.talker.model.codec_embedding.weight
    assert isinstance(cp.small_to_mtp_projection, torch.nn.Linear)
    tf = lambda h, codes: fam.predictor_tf(cp, tb, h, codes)     # talker-wide rows, projected inside cp

    hp = np.random.default_rng(55).standard_normal((N, t["TD"]))
    cpre = np.random.default_rng(56).integers(0, V, (N, Q - 1))
    npp = tts_np(files, hp, cpre)
    r_un = np.abs(tf(hp, cpre) - npp).max() / np.abs(npp).max()
    print(f"[qwen3tts_tiny] unpatched (float32 RMSNorm/RoPE internals) vs numpy: rel {r_un:.3g}")
    mt.Qwen3TTSRMSNorm.forward = fam._qwen_rms64
    mt.Qwen3TTSRotaryEmbedding.forward = fam._rope64
    rot = cp.model.rotary_emb
    rot.inv_freq = rot.original_inv_freq = torch.from_numpy(t["theta"] ** (-np.arange(0, t["HD"], 2) / t["HD"]))

    def generate(h, c0):
        """the package's own generate (KV cache, greedy) and the talker's next embedding exactly as
        Qwen3TTSTalkerForConditionalGeneration.forward builds it (codec_hiddens summed)."""
        with torch.no_grad():
            last_id_hidden = tb[torch.from_numpy(c0)][:, None]
            g = cp.generate(inputs_embeds=torch.cat([torch.from_numpy(h)[:, None], last_id_hidden], 1),
                            max_new_tokens=Q - 1, do_sample=False, output_hidden_states=True,
                            return_dict_in_generate=True)
            seq = g.sequences
            return seq.numpy(), torch.cat([last_id_hidden] + [cp.get_input_embeddings()[i](seq[..., i:i + 1])
                                                              for i in range(Q - 1)], 1).sum(1).numpy()

    tab, p = files["talker.model.codec_embedding.weight"], "talker.code_predictor."
    fam.predictor_refs("qwen3tts_tiny", outdir, t, 51, tf, lambda h, c: tts_np(files, h, c),
                       lambda c: tab[c[:, 0]] + sum(files[f"{p}model.codec_embedding.{k - 1}.weight"][c[:, k]]
                                                    for k in range(1, Q)), generate)


def main():
    args = fixture_common.start(__doc__)
    fam.LOG = LOG
    tts_fixture(args.out)
    import qwen_tts
    fam.manifest(args.out, "scripts/make_fixtures_qwen3tts.py",
                 f"N={N}; qwen3tts {TTS}; qwen-tts {getattr(qwen_tts, '__version__', '0.1.1')}", LOG)


if __name__ == "__main__":
    main()
