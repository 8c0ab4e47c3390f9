"""depthdec.hf: depthdec as the depth decoder inside transformers' own CsmForConditionalGeneration.generate (CPU).

The independent reference is stock transformers: greedy generation (backbone + depth decoder, several frames,
batch 3) with depthdec.hf must give the same codes as the same model without it, for the PyTorch-made csm_tiny
fixture in float32 and for a random CsmForConditionalGeneration built from a config here. A counter on the stock
depth decoder's forward proves which one ran. Sampled generation is checked against SPEC §3 through the
plain Decoder on the fixture file (row b = stream seed + b, frame = frame + backbone step), with the backbone
hidden states captured by a forward hook. Skipped with a reason when torch or transformers >= 5 is missing
(.ci/run installs the pinned versions).

GPU cases (test_cuda_*; skipped, saying why, without a CUDA device or when the package was built without the cuda
backend, DEPTHDEC_CUDA=1): the model on CUDA, depthdec.hf with backend "cuda" must take the device path (a spy on
the Decoder sees only CUDA tensors, and one sync() per generate call) and give, greedy, the codes of stock
transformers on CUDA and of depthdec.hf with backend "cpu" (host path), and, sampled, the codes of backend "cpu"
and frame by frame those of a cuda Decoder's host path on the captured hidden states (bit-identical by the device
API's contract); a NaN backbone state is raised by the generate call (the sync at its end), after which the decoder
works again.
"""

import os
from pathlib import Path

import numpy as np
import pytest

import depthdec

torch = pytest.importorskip("torch", reason="torch is not installed (.ci/run installs it)")
transformers = pytest.importorskip("transformers", reason="transformers is not installed (.ci/run installs it)")
if int(transformers.__version__.split(".")[0]) < 5:
    pytest.skip("transformers %s < 5" % transformers.__version__, allow_module_level=True)

import depthdec.hf  # noqa: E402
from transformers import CsmConfig, CsmForConditionalGeneration  # noqa: E402

transformers.utils.logging.set_verbosity_error()
REPO = Path(__file__).resolve().parents[2]
FIXTURE = REPO / "tests" / "fixtures" / "csm_tiny"


def load_fixture(dtype=torch.float32):
    if not (FIXTURE / "config.json").is_file():
        pytest.skip("tests/fixtures/csm_tiny not found (not a repository checkout)")
    return CsmForConditionalGeneration.from_pretrained(str(FIXTURE), dtype=dtype).eval()


def random_model(seed):
    """A random CSM with other dims than the fixture (depth: 3 layers, GQA 4/1, Q 6, V 40)."""
    torch.manual_seed(seed)
    cfg = CsmConfig(
        num_codebooks=6, vocab_size=40, text_vocab_size=50, hidden_size=48, intermediate_size=64,
        num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=2, head_dim=12,
        codebook_pad_token_id=39, codebook_eos_token_id=0, audio_token_id=45, audio_eos_token_id=46,
        bos_token_id=44, pad_token_id=45, tie_codebooks_embeddings=True,
        depth_decoder_config=dict(num_codebooks=6, vocab_size=40, backbone_hidden_size=48, hidden_size=32,
                                  intermediate_size=56, num_hidden_layers=3, num_attention_heads=4,
                                  num_key_value_heads=1, head_dim=8, max_position_embeddings=7),
        codec_config=dict(model_type="mimi", codebook_size=64, num_quantizers=6, hidden_size=32, intermediate_size=64,
                          num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=2, head_dim=16,
                          num_filters=4, upsampling_ratios=[2, 2], codebook_dim=16,
                          vector_quantization_hidden_dimension=16, sliding_window=16, upsample_groups=32, max_position_embeddings=64),
    )
    m = CsmForConditionalGeneration(cfg).eval()
    with torch.no_grad():  # weights of O(1) effect, so that argmaxes are far from ties
        for n, p in m.named_parameters():
            if n.startswith("codec_model."):
                continue
            if "norm" in n:
                p.copy_(1.0 + 0.1 * torch.randn_like(p))
            elif p.ndim >= 2:
                p.copy_(torch.randn_like(p) * (1.5 / p.shape[-1] ** 0.5 if "embed" not in n else 1.0))
    return m


class DepthCalls:
    """Counts forward calls of the stock depth decoder."""

    def __init__(self, model):
        self.n = 0
        self._h = model.depth_decoder.register_forward_pre_hook(self._hook)

    def _hook(self, *a):
        self.n += 1

    def remove(self):
        self._h.remove()


def prompt(model, B, T, seed):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, model.config.text_vocab_size - 8, (B, T), generator=g)
    return dict(input_ids=ids, attention_mask=torch.ones_like(ids))


GREEDY = dict(do_sample=False, depth_decoder_do_sample=False)


@pytest.mark.parametrize("which", ["fixture", "random"])
def test_greedy_identical_to_transformers(which):
    m = load_fixture() if which == "fixture" else random_model(5)
    kw = dict(prompt(m, 3, 6, 11), max_new_tokens=6, **GREEDY)
    calls = DepthCalls(m)
    ref = m.generate(**kw)
    assert calls.n > 0  # the stock depth decoder ran
    assert ref.shape == (3, 6, m.config.num_codebooks)
    h = depthdec.hf.accelerate(m, backend="cpu")
    calls.n = 0
    got = m.generate(**kw)
    assert calls.n == 0, "the stock depth decoder ran under depthdec.hf"
    assert h._step == 6  # one depthdec call per backbone step
    assert torch.equal(got, ref)
    # undo: stock again, and accelerating again works
    depthdec.hf.restore(m)
    assert "generate" not in m.depth_decoder.__dict__ and "generate" not in m.__dict__
    assert torch.equal(m.generate(**kw), ref) and calls.n > 0
    h2 = depthdec.hf.accelerate(m, backend="ref")
    assert torch.equal(m.generate(**kw), ref)
    h2.restore()
    h2.restore()  # idempotent
    calls.remove()


def test_batch_rows_independent():
    # a row's codes do not depend on the batch it is generated in (batch 3 vs each row alone)
    m = load_fixture()
    depthdec.hf.accelerate(m, backend="cpu")
    kw = prompt(m, 3, 5, 2)
    full = m.generate(**kw, max_new_tokens=4, **GREEDY)
    for b in range(3):
        one = m.generate(input_ids=kw["input_ids"][b:b + 1], attention_mask=kw["attention_mask"][b:b + 1],
                         max_new_tokens=4, **GREEDY)
        assert torch.equal(one[0], full[b])
    depthdec.hf.restore(m)


class BackboneHidden:
    """The backbone's last hidden state at the last position, per forward call (what _sample hands the depth
    decoder)."""

    def __init__(self, model):
        self.h = []
        self._r = model.backbone_model.register_forward_hook(self._hook)

    def _hook(self, mod, args, out):
        self.h.append(out.last_hidden_state[:, -1, :].detach().float().clone())

    def remove(self):
        self._r.remove()


def test_sampled_follows_spec3():
    m = load_fixture()
    T, K, S, F = 0.8, 20, 1234, 7
    sample = dict(do_sample=False, depth_decoder_do_sample=True, depth_decoder_temperature=T, depth_decoder_top_k=K)
    kw = dict(prompt(m, 3, 5, 4), max_new_tokens=5, **sample)
    depthdec.hf.accelerate(m, backend="cpu", seed=S, frame=F)
    cap = BackboneHidden(m)
    got = m.generate(**kw)
    cap.remove()
    assert len(cap.h) == got.shape[1]
    # independently: the plain Decoder on the fixture file, row b = stream S + b, frame F + step
    dec = depthdec.Decoder(depthdec.Model(FIXTURE), backend="ref")
    for s in range(got.shape[1]):
        want = dec.generate(cap.h[s].numpy(), c0=got[:, s, 0].numpy(), seed=S + np.arange(3),
                            frame=np.full(3, F + s), temperature=T, top_k=K)
        assert np.array_equal(got[:, s, :].numpy(), want), "frame %d" % s
    # reproducible; another seed per call changes the codes; the handle's seed comes back after it
    assert torch.equal(m.generate(**kw), got)
    other = m.generate(**kw, depthdec_seed=S + 100)
    assert not torch.equal(other, got)
    assert torch.equal(m.generate(**kw), got)
    assert torch.equal(m.generate(**kw, depthdec_seed=S + 100), other)
    depthdec.hf.restore(m)


def test_errors():
    m = load_fixture()
    with pytest.raises(depthdec.ArgumentError, match="want a transformers CsmForConditionalGeneration"):
        depthdec.hf.accelerate(torch.nn.Linear(2, 2))
    h = depthdec.hf.accelerate(m, backend="cpu")
    with pytest.raises(depthdec.ArgumentError, match="already accelerated"):
        depthdec.hf.accelerate(m)
    with pytest.raises(depthdec.Error, match="top_p=0.5.*does not implement"):
        m.generate(**prompt(m, 2, 4, 1), max_new_tokens=2, do_sample=False, depth_decoder_do_sample=True,
                   depth_decoder_top_p=0.5)
    m.depth_decoder.generation_config.top_p = 1.0
    with pytest.raises(depthdec.Error, match="called as transformers' CSM generation loop does not"):
        m.depth_decoder.generate(input_ids=torch.zeros(2, 3, dtype=torch.long),
                                 backbone_last_hidden_state=torch.zeros(2, 96))
    h.restore()
    depthdec.hf.restore(m)  # not accelerated: nothing happens


def test_bf16_model_runs():
    # a bf16 model: the weights go in as bf16; transformers' bf16 arithmetic is not depthdec's float32, so only
    # validity and determinism are checked here, not identity
    m = load_fixture(torch.bfloat16)
    depthdec.hf.accelerate(m, backend="cpu")
    kw = dict(prompt(m, 2, 4, 3), max_new_tokens=3, **GREEDY)
    a = m.generate(**kw)
    assert a.shape == (2, 3, 8) and int(a.min()) >= 0 and int(a.max()) < 64
    assert torch.equal(m.generate(**kw), a)
    depthdec.hf.restore(m)



def nan_hook(model, at):
    """A forward hook on the backbone's final norm that makes its `at`-th output (1: the prefill) NaN: the state
    handed to the depth decoder (and the backbone's own logits, whose argmax stays a valid c0)."""
    calls = []

    def hook(mod, args, out):
        calls.append(1)
        return out.fill_(float("nan")) if len(calls) == at else out

    return calls, model.backbone_model.norm.register_forward_hook(hook)


def test_nan_backbone_state_host_path():
    # host path: the frame with a NaN state is refused at once, naming the problem
    m = load_fixture()
    kw = dict(prompt(m, 2, 4, 3), max_new_tokens=4, **GREEDY)
    h = depthdec.hf.accelerate(m, backend="cpu")
    ref = m.generate(**kw)
    calls, r = nan_hook(m, 3)
    with pytest.raises(depthdec.Error) as e:
        m.generate(**kw)
    r.remove()
    assert len(calls) == 3 and e.value.code == depthdec.Status.ENUMERIC, str(e.value)
    assert torch.equal(m.generate(**kw), ref)
    h.restore()

# ---- GPU: the device path (CUDA model, cuda decoder) -------------------------------------------------------------

if not torch.cuda.is_available():
    _NO_CUDA = "no CUDA device (torch.cuda.is_available() is False)"
elif not depthdec.backend_available("cuda"):
    _NO_CUDA = "depthdec was built without the cuda backend (install with DEPTHDEC_CUDA=1)"
else:
    _NO_CUDA = None
needs_cuda = pytest.mark.skipif(_NO_CUDA is not None, reason=_NO_CUDA or "")


class DecoderSpy:
    """Records, per depthdec Decoder.generate call of a handle, whether every tensor argument was a CUDA tensor;
    counts sync() calls and keeps the errors they raised."""

    def __init__(self, handle):
        self.calls, self.syncs, self.sync_errors = [], 0, []
        dec = handle.decoder
        gen, sync = dec.generate, dec.sync

        def generate(hidden, c0=None, seed=0, frame=0, **kw):
            args = (hidden, c0, seed, frame)
            self.calls.append(all(torch.is_tensor(a) and a.is_cuda for a in args))
            return gen(hidden, c0=c0, seed=seed, frame=frame, **kw)

        def count_sync():
            self.syncs += 1
            try:
                return sync()
            except depthdec.Error as e:
                self.sync_errors.append(e)
                raise

        dec.generate, dec.sync = generate, count_sync


def cuda_kw(kw):
    return {k: (v.cuda() if torch.is_tensor(v) else v) for k, v in kw.items()}


@needs_cuda
@pytest.mark.parametrize("which", ["fixture", "random"])
def test_cuda_device_path_matches_transformers_and_cpu(which):
    tf32 = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False  # stock transformers in true float32, as depthdec
    try:
        m = (load_fixture() if which == "fixture" else random_model(5)).cuda()
        B, steps = 3, 6
        kw = cuda_kw(dict(prompt(m, B, 6, 11), max_new_tokens=steps, **GREEDY))
        calls = DepthCalls(m)
        ref = m.generate(**kw)  # stock transformers on CUDA
        assert calls.n > 0 and ref.is_cuda and ref.shape == (B, steps, m.config.num_codebooks)

        h = depthdec.hf.accelerate(m, backend="cuda")
        assert h.decoder.backend == "cuda"
        spy = DecoderSpy(h)
        calls.n = 0
        got = m.generate(**kw)
        assert calls.n == 0, "the stock depth decoder ran under depthdec.hf"
        assert spy.calls == [True] * steps, "not every frame took the device path (all-CUDA arguments)"
        assert spy.syncs == 1  # once, at the end of the generate call
        assert got.is_cuda and torch.equal(got, ref)

        # sampled, backend cuda (device path): captured backbone states for the frame-by-frame check below
        T, K, S, F = 0.8, 20, 2**64 - 2, 2**64 - 3  # keys that wrap mod 2**64 within the batch and the steps
        sample = dict(do_sample=False, depth_decoder_do_sample=True, depth_decoder_temperature=T,
                      depth_decoder_top_k=K, depthdec_seed=S, depthdec_frame=F)
        skw = cuda_kw(dict(prompt(m, B, 5, 4), max_new_tokens=steps, **sample))
        cap = BackboneHidden(m)
        sampled = m.generate(**skw)
        cap.remove()
        assert spy.calls == [True] * (2 * steps) and spy.syncs == 2
        assert torch.equal(m.generate(**skw), sampled)  # reproducible
        # frame by frame: a cuda Decoder's host path (bit-identical to its device path by contract) on the same
        # hidden states, c0 and keys (row b: S + b, frame F + s, mod 2**64)
        dec = depthdec.Decoder(h.dd_model, backend="cuda")
        seeds = (S + np.arange(B, dtype=np.uint64)).astype(np.uint64)
        for s in range(sampled.shape[1]):
            want = dec.generate(cap.h[s].cpu().numpy(), c0=sampled[:, s, 0].cpu().numpy(), seed=seeds,
                                frame=np.full(B, (F + s) % 2**64, dtype=np.uint64), temperature=T, top_k=K)
            assert np.array_equal(sampled[:, s, :].cpu().numpy(), want), "frame %d" % s
        h.restore()

        # backend cpu on the same CUDA model: the host path (hidden copied each frame), the same codes (the cpu and
        # cuda backends' logits agree to a tolerance, not bit for bit: a near-tie could split them, none expected here)
        hc = depthdec.hf.accelerate(m, backend="cpu")
        assert torch.equal(m.generate(**kw), ref)
        assert torch.equal(m.generate(**skw), sampled)
        hc.restore()
        calls.remove()
    finally:
        torch.backends.cuda.matmul.allow_tf32 = tf32


@needs_cuda
def test_cuda_device_error_raised_by_generate():
    m = load_fixture().cuda()
    kw = cuda_kw(dict(prompt(m, 2, 4, 3), max_new_tokens=4, **GREEDY))
    h = depthdec.hf.accelerate(m, backend="cuda")
    ref = m.generate(**kw)
    spy = DecoderSpy(h)
    calls, r = nan_hook(m, 3)
    with pytest.raises(depthdec.Error) as e:
        m.generate(**kw)
    r.remove()
    # the NaN frame did not stop the loop (the frame call returned); the error came from the sync ending the call
    # (the loop may stop early anyway: a failed frame's clamped codes can read as codebook EOS)
    assert len(spy.calls) == len(calls) >= 3 and all(spy.calls)
    assert spy.syncs == 1 and spy.sync_errors == [e.value]
    assert e.value.code == depthdec.Status.ENUMERIC, str(e.value)
    assert torch.equal(m.generate(**kw), ref)  # reported once, then cleared
    h.restore()
