"""Arrays from other libraries (issue 15 point 2, host side; the CUDA side: test_cuda_interop.py) and models from
tensors in memory (point 3's entry point).

- Decoder.generate / score read numpy arrays, torch CPU tensors and any host object with __dlpack__, and answer in
  the input's library (torch in, torch out): the values must equal the numpy call's bit for bit.
- depthdec is not imported with torch (a fresh interpreter checks sys.modules).
- wrong device / shape / dtype are refused with ArgumentError naming the argument.
- Model.from_tensors of a file's own tensors (numpy and torch, f32/f16/bf16) scores bitwise like the file.
Tests that need torch are skipped with a reason when it is not installed.
"""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import depthdec

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures"
needs_fixtures = pytest.mark.skipif(not (FIXTURES / "MANIFEST.txt").is_file(),
                                    reason="tests/fixtures/ not found beside python/ (not a repository checkout)")

try:
    import torch
except ImportError:  # the numpy-only tests still run
    torch = None
needs_torch = pytest.mark.skipif(torch is None, reason="torch is not installed (CI installs it: .ci/run)")


@pytest.fixture(scope="module")
def tiny():
    return depthdec.Model.synthetic("tiny-llama", "bf16", seed=3)


class Foreign:
    """A host array known only through the DLPack protocol (no __array__, not numpy)."""

    def __init__(self, a, device=(1, 0)):
        self._a = a
        self._dev = device

    def __dlpack__(self, **kw):
        return self._a.__dlpack__(**kw)

    def __dlpack_device__(self):
        return self._dev


def same_bits(a, b):
    """the same float32 bits (NaN payloads and signed zeros included)"""
    return np.array_equal(np.asarray(a).view(np.uint32), np.asarray(b).view(np.uint32))


def inputs(rng, model, n):
    c = model.config
    h = rng.standard_normal((n, c["input_dim"])).astype(np.float32)
    codes = rng.integers(0, c["codebook_size"], size=(n, c["levels"]), dtype=np.int32)
    return h, codes


def test_dlpack_object_numpy_out(tiny, rng):
    dec = depthdec.Decoder(tiny, backend="cpu")
    h, codes = inputs(rng, tiny, 5)
    want = dec.generate(h, seed=4, frame=2)
    got = dec.generate(Foreign(h), seed=4, frame=2)
    assert type(got) is np.ndarray and np.array_equal(got, want)
    l, l0 = dec.score(h, codes)
    gl, gl0 = dec.score(Foreign(h), Foreign(codes))
    assert type(gl) is np.ndarray and np.array_equal(gl.view(np.uint32), l.view(np.uint32))
    assert np.array_equal(gl0.view(np.uint32), l0.view(np.uint32))


def test_dlpack_wrong_device(tiny, rng):
    """CUDA arrays go to the device path (python/tests/test_cuda_interop.py on a GPU); here: a cpu decoder refuses
    them naming its backend, a CUDA array beside host hidden states is refused, `stream` needs CUDA arrays."""
    dec = depthdec.Decoder(tiny, backend="cpu")
    h, codes = inputs(rng, tiny, 2)
    with pytest.raises(depthdec.ArgumentError, match=r"hidden: the array is on device 'cuda' \(DLPack device type 2\) "
                                                     r"and this decoder's backend is cpu"):
        dec.generate(Foreign(h, device=(2, 0)))
    with pytest.raises(depthdec.ArgumentError, match=r"hidden: the array is on device 'cuda_managed'.*backend is cpu"):
        dec.score(Foreign(h, device=(13, 0)), codes)
    with pytest.raises(depthdec.ArgumentError, match=r"stream: only for CUDA arrays"):
        dec.generate(h, stream=0)
    with pytest.raises(depthdec.ArgumentError, match=r"stream: only for CUDA arrays"):
        dec.score(h, codes, stream=5)
    with pytest.raises(depthdec.ArgumentError, match="codes: the array is on device 'cuda'"):
        dec.score(h, Foreign(codes, device=(2, 0)))
    with pytest.raises(depthdec.ArgumentError, match="c0: the array is on device 'rocm'"):
        dec.generate(h, c0=Foreign(codes[:, 0], device=(10, 0)))


def test_torch_not_imported():
    code = ("import sys, numpy as np, depthdec\n"
            "m = depthdec.Model.synthetic('tiny-gpt', 'f32')\n"
            "d = depthdec.Decoder(m, backend='cpu')\n"
            "d.generate(np.zeros((2, m.config['input_dim']), np.float32))\n"
            "assert 'torch' not in sys.modules, 'torch was imported'\n"
            "print('ok')\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr


@needs_torch
def test_torch_in_torch_out(tiny, rng):
    dec = depthdec.Decoder(tiny, backend="cpu")
    h, codes = inputs(rng, tiny, 6)
    want = dec.generate(h, seed=9, frame=1, temperature=1.1, top_k=7)
    ht = torch.from_numpy(h)
    got = dec.generate(ht, seed=9, frame=1, temperature=1.1, top_k=7)
    assert isinstance(got, torch.Tensor) and got.dtype == torch.int32 and got.device.type == "cpu"
    assert np.array_equal(got.numpy(), want)
    # c0, seeds and frames as tensors; hidden with requires_grad, non-contiguous, bfloat16 and float64
    c0 = torch.from_numpy(want[:, 0].astype(np.int64))
    seeds = torch.arange(6, dtype=torch.int64)
    frames = torch.full((6,), 3, dtype=torch.int64)
    w2 = dec.generate(h, c0=want[:, 0], seed=np.arange(6), frame=np.full(6, 3))
    g2 = dec.generate(ht.clone().requires_grad_(True), c0=c0, seed=seeds, frame=frames)
    assert np.array_equal(g2.numpy(), w2)
    hh = np.concatenate([h, h], axis=1)
    wide = torch.from_numpy(hh)[:, ::2]  # a strided view
    assert not wide.is_contiguous()
    assert np.array_equal(dec.generate(wide, greedy=True).numpy(),
                          dec.generate(np.ascontiguousarray(hh[:, ::2]), greedy=True))
    hb = ht.to(torch.bfloat16)
    assert np.array_equal(dec.generate(hb, greedy=True).numpy(), dec.generate(hb.to(torch.float32).numpy(), greedy=True))
    assert np.array_equal(dec.generate(ht.double(), greedy=True).numpy(), dec.generate(h, greedy=True))
    l, l0 = dec.score(h, codes)
    tl, tl0 = dec.score(ht, torch.from_numpy(codes.astype(np.int64)))
    assert isinstance(tl, torch.Tensor) and isinstance(tl0, torch.Tensor) and tl.dtype == torch.float32
    assert np.array_equal(tl.numpy().view(np.uint32), l.view(np.uint32))
    assert np.array_equal(tl0.numpy().view(np.uint32), l0.view(np.uint32))
    # an empty batch is refused, as the CLI refuses it (one input rule, dd_input_check)
    with pytest.raises(depthdec.ArgumentError, match=r"hidden: no rows"):
        dec.generate(ht[:0])


@needs_torch
def test_torch_errors(tiny, rng):
    dec = depthdec.Decoder(tiny, backend="cpu")
    h, codes = inputs(rng, tiny, 3)
    ht = torch.from_numpy(h)
    with pytest.raises(depthdec.ArgumentError, match=r"hidden: shape \(3, %d\)" % (h.shape[1] - 1)):
        dec.generate(ht[:, 1:])
    with pytest.raises(depthdec.ArgumentError, match="hidden: dtype bool"):
        dec.generate(ht > 0)
    with pytest.raises(depthdec.ArgumentError, match="codes: dtype float32, want int32 or int64"):
        dec.score(ht, torch.from_numpy(codes).float())
    with pytest.raises(depthdec.ArgumentError, match="c0 row 1: code"):
        dec.generate(ht, c0=torch.tensor([0, 10**6, 0]))
    bad = ht.clone()
    bad[2, 1] = float("nan")
    with pytest.raises(depthdec.ArgumentError, match="hidden row 2, element 1: non-finite"):
        dec.generate(bad)
    if torch.cuda.is_available():  # the real thing, where a GPU is present
        with pytest.raises(depthdec.ArgumentError, match="on device 'cuda'"):
            dec.generate(ht.cuda())


# ---- Model.from_tensors --------------------------------------------------------------------------------------


def _st_read(path):
    """A safetensors file's tensors as numpy arrays (bf16 as uint16 words) with the dtype names: the standard
    library and numpy only."""
    import struct

    b = Path(path).read_bytes()
    (n,) = struct.unpack("<Q", b[:8])
    hdr = json.loads(b[8:8 + n])
    out = {}
    for k, v in hdr.items():
        if k == "__metadata__":
            continue
        s, e = v["data_offsets"]
        dt = {"F32": np.float32, "F16": np.float16, "BF16": np.uint16}.get(v["dtype"])
        if dt is None:
            continue
        out[k] = (v["dtype"], np.frombuffer(b[8 + n + s:8 + n + e], dtype=dt).reshape(v["shape"]))
    return hdr.get("__metadata__", {}), out


@needs_fixtures
def test_from_tensors_numpy_fixture(rng):
    # gpt_f16 (native names, f16) from numpy arrays; config from the file's metadata
    meta, ts = _st_read(FIXTURES / "gpt_f16.safetensors")
    a = depthdec.Model(FIXTURES / "gpt_f16.safetensors")
    b = depthdec.Model.from_tensors(meta["depthdec.config"], {k: v for k, (_, v) in ts.items()})
    assert b.source == "tensors" and b.config == a.config
    h, codes = inputs(rng, a, 4)
    da, db = depthdec.Decoder(a, backend="cpu"), depthdec.Decoder(b, backend="cpu")
    la, _ = da.score(h, codes)
    lb, _ = db.score(h, codes)
    assert np.array_equal(la.view(np.uint32), lb.view(np.uint32))
    assert np.array_equal(da.generate(h, seed=1), db.generate(h, seed=1))


@needs_fixtures
def test_from_tensors_errors():
    meta, ts = _st_read(FIXTURES / "gpt_f16.safetensors")
    cfg = meta["depthdec.config"]
    arrs = {k: v for k, (_, v) in ts.items()}
    bad = dict(arrs)
    bad["layers.0.fc2.weight"] = bad["layers.0.fc2.weight"][:-1]
    with pytest.raises(depthdec.Error, match=r"tensor 'layers.0.fc2.weight': shape") as e:
        depthdec.Model.from_tensors(cfg, bad)
    assert e.value.code == depthdec.Status.EMODEL
    bad = dict(arrs)
    del bad["norm.weight"]
    with pytest.raises(depthdec.Error, match="missing tensor 'norm.weight'"):
        depthdec.Model.from_tensors(cfg, bad)
    bad = dict(arrs)
    bad["norm.weight"] = bad["norm.weight"].astype(np.int32)
    with pytest.raises(depthdec.ArgumentError, match="tensor 'norm.weight': dtype int32"):
        depthdec.Model.from_tensors(cfg, bad)
    with pytest.raises(depthdec.Error, match="config JSON"):
        depthdec.Model.from_tensors("{", arrs)
    with pytest.raises(depthdec.ArgumentError, match="config must be a dict or JSON text"):
        depthdec.Model.from_tensors(3, arrs)
    with pytest.raises(depthdec.ArgumentError, match="tensors must be a mapping"):
        depthdec.Model.from_tensors(cfg, 5)


@needs_torch
@needs_fixtures
def test_from_tensors_torch_csm(rng):
    # csm_tiny (HF names, bf16) from torch tensors: bf16 as stored, then widened to f32 and rounded to f16
    cfg = json.loads((FIXTURES / "csm_tiny" / "config.json").read_text())
    _, ts = _st_read(FIXTURES / "csm_tiny" / "model.safetensors")
    bf = {k: torch.from_numpy(v.astype(np.int16)).view(torch.bfloat16) if d == "BF16" else torch.from_numpy(v)
          for k, (d, v) in ts.items()}
    a = depthdec.Model(FIXTURES / "csm_tiny")
    b = depthdec.Model.from_tensors(cfg, bf)
    assert b.config == a.config
    h, codes = inputs(rng, a, 4)
    da, db = depthdec.Decoder(a, backend="cpu"), depthdec.Decoder(b, backend="cpu")
    la, l0a = da.score(h, codes)
    lb, l0b = db.score(h, codes)
    assert np.array_equal(la.view(np.uint32), lb.view(np.uint32))
    assert np.array_equal(l0a.view(np.uint32), l0b.view(np.uint32))
    assert np.array_equal(da.generate(h, seed=3), db.generate(h, seed=3))
    # f32 and f16 copies load and agree with the bf16 model to their rounding (f32 holds bf16 exactly)
    for dt, tol in ((torch.float32, 1e-5), (torch.float16, 2e-2)):
        c = depthdec.Model.from_tensors(cfg, {k: v.to(dt) for k, v in bf.items()})
        assert c.config["weight_type"] == {torch.float32: "f32", torch.float16: "f16"}[dt]
        lc, _ = depthdec.Decoder(c, backend="ref").score(h, codes)
        lr, _ = depthdec.Decoder(a, backend="ref").score(h, codes)
        assert np.max(np.abs(lc - lr)) <= tol * np.max(np.abs(lr))
    bad = dict(bf)
    bad["depth_decoder.codebooks_head.weight"] = bad["depth_decoder.codebooks_head.weight"][:, :, 1:]
    with pytest.raises(depthdec.Error, match=r"tensor 'depth_decoder.codebooks_head.weight': shape \[7, 64, 63\], "
                                             r"expected \[7, 64, 64\]"):
        depthdec.Model.from_tensors(cfg, bad)
    bad = dict(bf)
    bad["lm_head.weight"] = bad["lm_head.weight"].to(torch.int32)
    with pytest.raises(depthdec.ArgumentError, match="tensor 'lm_head.weight': dtype torch.int32"):
        depthdec.Model.from_tensors(cfg, bad)


@needs_torch
def test_moshi_from_state_dict():
    """A live transformers Moshi model's tensors (the whole MoshiForConditionalGeneration state_dict, bf16, its config
    dict) give the same model as its saved directory: scores bitwise equal to the directory's on the fixture."""
    from safetensors.torch import load_file

    d = FIXTURES / "moshi_tiny"
    sd = {}
    for f in sorted(d.glob("*.safetensors")):
        sd.update(load_file(str(f)))
    cfg = json.loads((d / "config.json").read_text())
    m = depthdec.Model.from_tensors(cfg, sd)
    assert m.config["per_position"] and m.config["text_vocab"] == 40
    h, codes, text = (np.load(FIXTURES / ("moshi_tiny_%s.npy" % k)) for k in ("hidden", "codes", "text"))
    got = depthdec.Decoder(m, backend="cpu").score(h, codes, text=text)
    want = depthdec.Decoder(depthdec.Model(d), backend="cpu").score(h, codes, text=text)
    assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])
    del sd["depth_decoder.lm_heads.weight"]
    with pytest.raises(depthdec.Error, match="lm_heads.weight"):
        depthdec.Model.from_tensors(cfg, sd)


@needs_torch
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_moshi_dense_types(tmp_path, dtype):
    """MoshiDepthDecoder directories saved in f32 / f16 (the fixture's bf16 values, which both hold exactly) load
    and match the float64 fixture on every CPU backend, as the bf16 original does."""
    import shutil

    from safetensors.torch import load_file, save_file

    src = FIXTURES / "moshi_tiny_depth"
    sd = {k: v.to(getattr(torch, dtype)) for k, v in load_file(str(src / "model.safetensors")).items()}
    save_file(sd, str(tmp_path / "model.safetensors"))
    shutil.copy(src / "config.json", tmp_path / "config.json")
    m = depthdec.Model(tmp_path)
    h, codes, text, greedy = (np.load(FIXTURES / ("moshi_tiny_%s.npy" % k)) for k in ("hidden", "codes", "text", "greedy"))
    ref = np.load(FIXTURES / "moshi_tiny_logits.npy")
    assert m.config["weight_type"] == {"float32": "f32", "float16": "f16"}[dtype]
    for b in ("ref", "cpu"):
        d = depthdec.Decoder(m, backend=b)
        logits, logits0 = d.score(h, codes, text=text)
        assert np.max(np.abs(logits - ref[:, 1:])) <= 1e-4 * np.max(np.abs(ref))
        assert np.max(np.abs(logits0 - ref[:, 0])) <= 1e-4 * np.max(np.abs(ref[:, 0]))
        assert np.array_equal(d.generate(h, text=text, greedy=True), greedy)
