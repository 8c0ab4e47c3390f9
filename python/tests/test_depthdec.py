"""Tests of the depthdec Python package (run after `pip install ./python`: `cd python && python3 -m pytest -q tests`).

- fixture parity with the PyTorch/transformers float64 references, with the C tests' thresholds (logits within
  1e-4 * max|ref|, greedy codes identical), for every fixture on backends ref, auto and every other one available;
- identical results to the CLI (build/depthdec at the repository root; skipped with a reason when not built);
- errors on bad inputs; reproducibility from seed and frame; thread use (one shared Model, a Decoder per thread;
  the GIL released while decoding).

Random inputs are fresh each run; the seed is printed (shown by pytest on failure) and DEPTHDEC_TEST_SEED=N
replays a run.
"""

import json
import os
import struct
import subprocess
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import depthdec

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures"
CLI = REPO / "build" / "depthdec"
NAMES = ["gpt_f16", "gpt_bf16", "gpt_q8", "csm_tiny"]

needs_fixtures = pytest.mark.skipif(not (FIXTURES / "MANIFEST.txt").is_file(),
                                    reason="tests/fixtures/ not found beside python/ (not a repository checkout)")
needs_cli = pytest.mark.skipif(not os.access(CLI, os.X_OK),
                               reason="%s not built (run `make` at the repository root)" % CLI)

# Backends judged against the fixtures: ref, auto, and every other backend this build can run here.
BACKENDS = ["ref", "auto"] + [b for b in depthdec.available_backends() if b != "ref"]


def model_path(name):
    return FIXTURES / (name if name == "csm_tiny" else name + ".safetensors")


def fixture(name, what):
    return np.load(FIXTURES / ("%s_%s.npy" % (name, what)))


@pytest.fixture(scope="module")
def models():
    return {n: depthdec.Model(model_path(n)) for n in NAMES}


def rand_hidden(rng, n, model):
    return rng.standard_normal((n, model.config["input_dim"])).astype(np.float32)


def rand_codes(rng, n, model):
    c = model.config
    return rng.integers(0, c["codebook_size"], size=(n, c["levels"]), dtype=np.int32)


# ---- the package and its models -----------------------------------------------------------------------------


def test_version_and_backends():
    assert depthdec.__version__ == "0.1.0" or depthdec.__version__.count(".") == 2
    assert "ref" in depthdec.available_backends()
    assert depthdec.backend_available("auto")
    assert issubclass(depthdec.Error, RuntimeError)
    assert issubclass(depthdec.ArgumentError, depthdec.Error) and issubclass(depthdec.ArgumentError, ValueError)


@needs_fixtures
def test_config(models):
    m = models["gpt_f16"]
    c = m.config
    assert c == {"block": "gpt", "levels": 8, "codebook_size": 64, "input_dim": 96, "dim": 64, "layers": 2,
                 "heads": 4, "kv_heads": 4, "head_dim": 16, "ffn_dim": 256, "norm_eps": 1e-05, "rope": None,
                 "quantization": None, "weight_type": "f16", "has_head0": True, "has_in_proj": True,
                 "has_pos": True, "embed_in_input_space": False, "has_qk_norm": False, "per_position": False,
                 "text_vocab": 0}
    assert m.tensor_count == 32 and m.weight_bytes_per_frame > 0 and m.weight_bytes > 0
    assert m.source == str(model_path("gpt_f16"))
    c["levels"] = 99  # a copy: the model is immutable
    assert m.config["levels"] == 8
    q = models["gpt_q8"].config
    assert q["quantization"] == {"bits": 8, "group_size": 32, "mode": "affine"} and q["weight_type"] == "q8"
    s = models["csm_tiny"].config
    assert s["block"] == "llama" and s["kv_heads"] == 2 and s["embed_in_input_space"] is True
    assert s["rope"] == {"theta": 500000.0, "scaling": {"rope_type": "llama3", "factor": 32.0,
                                                        "low_freq_factor": 0.5, "high_freq_factor": 4.0,
                                                        "original_max_position_embeddings": 32}}


def test_synthetic():
    m = depthdec.Model.synthetic("tiny-gpt", weights="q8", seed=3)
    assert m.config["quantization"]["bits"] == 8 and m.source.startswith("synthetic")
    a = depthdec.Model.synthetic("tiny-llama", seed=1)
    b = depthdec.Model.synthetic("tiny-llama", seed=1)
    h = np.ones((2, a.config["input_dim"]), np.float32)
    assert np.array_equal(depthdec.Decoder(a, "ref").score(h, np.zeros((2, 8), np.int32))[0],
                          depthdec.Decoder(b, "ref").score(h, np.zeros((2, 8), np.int32))[0])
    with pytest.raises(depthdec.Error, match="nope"):
        depthdec.Model.synthetic("nope")
    with pytest.raises(depthdec.Error, match="weights 'f8'"):
        depthdec.Model.synthetic("tiny-gpt", weights="f8")


# ---- fixture parity ------------------------------------------------------------------------------------------


@needs_fixtures
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", NAMES)
def test_fixture_parity(models, name, backend):
    m = models[name]
    d = depthdec.Decoder(m, backend=backend, max_batch=6)
    h, codes = fixture(name, "hidden"), fixture(name, "codes")
    ref, ref0, greedy = fixture(name, "logits"), fixture(name, "logits0"), fixture(name, "greedy")
    logits, logits0 = d.score(h, codes)
    assert logits.dtype == np.float32 and logits.shape == ref.shape
    assert logits0.dtype == np.float32 and logits0.shape == ref0.shape
    err = np.abs(logits.astype(np.float64) - ref).max()
    err0 = np.abs(logits0.astype(np.float64) - ref0).max()
    print("%s %s: max rel logit err %.3g, level-0 %.3g" % (name, d.backend, err / np.abs(ref).max(),
                                                          err0 / np.abs(ref0).max()))
    assert err <= 1e-4 * np.abs(ref).max()
    assert err0 <= 1e-4 * np.abs(ref0).max()
    out = d.generate(h, greedy=True)
    assert out.dtype == np.int32 and out.shape == greedy.shape
    np.testing.assert_array_equal(out, greedy)
    # c0 given: the rest of the frame follows it
    np.testing.assert_array_equal(d.generate(h, c0=greedy[:, 0], greedy=True), greedy)


# ---- identical results to the CLI ---------------------------------------------------------------------------


def run_cli(*args):
    p = subprocess.run([str(CLI), *map(str, args)], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, "depthdec %s: exit %d: %s" % (" ".join(map(str, args)), p.returncode, p.stderr)


@needs_fixtures
@needs_cli
@pytest.mark.parametrize("backend", ["ref", "auto"])
@pytest.mark.parametrize("name", NAMES)
def test_cli_generate(models, name, backend, rng, tmp_path):
    m = models[name]
    d = depthdec.Decoder(m, backend=backend)
    n = 70  # more than one batch of 64, as the CLI splits them
    h = rand_hidden(rng, n, m)
    c0 = rng.integers(0, m.config["codebook_size"], size=n).astype(np.int64)
    np.save(tmp_path / "h.npy", h)
    np.save(tmp_path / "c0.npy", c0)
    cases = [dict(), dict(seed=7, frame=1000), dict(seed=2**64 - 1, frame=2**63, temperature=1.3, top_k=0),
             dict(seed=12345, temperature=0.5, top_k=3), dict(greedy=True), dict(seed=5, c0=True)]
    for i, kw in enumerate(cases):
        args = ["generate", "--model", model_path(name), "--hidden", tmp_path / "h.npy", "--out",
                tmp_path / ("out%d.npy" % i), "--backend", backend]
        py = {}
        for k, v in kw.items():
            if k == "greedy":
                args.append("--greedy")
                py["greedy"] = True
            elif k == "c0":
                args += ["--c0", tmp_path / "c0.npy"]
                py["c0"] = c0
            else:
                args += ["--" + k.replace("_", "-"), v]
                py[k] = v
        run_cli(*args)
        want = np.load(tmp_path / ("out%d.npy" % i))
        got = d.generate(h, **py)
        np.testing.assert_array_equal(got, want, err_msg="case %r" % kw)


@needs_fixtures
@needs_cli
@pytest.mark.parametrize("backend", ["ref", "auto"])
@pytest.mark.parametrize("name", NAMES)
def test_cli_score(models, name, backend, rng, tmp_path):
    m = models[name]
    n = 70
    h, codes = rand_hidden(rng, n, m), rand_codes(rng, n, m)
    np.save(tmp_path / "h.npy", h)
    np.save(tmp_path / "codes.npy", codes)
    run_cli("score", "--model", model_path(name), "--hidden", tmp_path / "h.npy", "--codes", tmp_path / "codes.npy",
            "--out", tmp_path / "lg.npy", "--logits0", tmp_path / "l0.npy", "--backend", backend)
    logits, logits0 = depthdec.Decoder(m, backend=backend).score(h, codes)
    np.testing.assert_array_equal(logits, np.load(tmp_path / "lg.npy"))
    np.testing.assert_array_equal(logits0, np.load(tmp_path / "l0.npy"))


# ---- reproducibility ----------------------------------------------------------------------------------------


@needs_fixtures
@pytest.mark.parametrize("name", NAMES)
def test_seed_and_frame(models, name, rng):
    m = models[name]
    d = depthdec.Decoder(m, backend="auto", max_batch=16)
    n, S, F = 40, int(rng.integers(0, 2**63)), int(rng.integers(0, 2**40))
    h = rand_hidden(rng, n, m)
    a = d.generate(h, seed=S, frame=F)
    np.testing.assert_array_equal(a, d.generate(h, seed=S, frame=F))  # same keys, same codes
    # row r is frame F + r of stream S: per-row arrays and single rows give the same codes
    np.testing.assert_array_equal(a, d.generate(h, seed=np.full(n, S, np.uint64), frame=F + np.arange(n)))
    for r in (0, 17, n - 1):
        np.testing.assert_array_equal(a[r:r + 1], d.generate(h[r:r + 1], seed=S, frame=F + r))
    # independent of the batch split, the row order and the backend
    for mb in (1, 7, 64):
        np.testing.assert_array_equal(a, depthdec.Decoder(m, "ref", max_batch=mb).generate(h, seed=S, frame=F))
    perm = rng.permutation(n)
    np.testing.assert_array_equal(a[perm], d.generate(h[perm], seed=S, frame=(F + np.arange(n))[perm]))
    # other keys, other noise
    assert not np.array_equal(a, d.generate(h, seed=S + 1, frame=F))
    assert not np.array_equal(a, d.generate(h, seed=S, frame=F + 1))
    # top_k 1 keeps only the best code: sampling then equals greedy
    np.testing.assert_array_equal(d.generate(h, seed=S, top_k=1, temperature=2.0), d.generate(h, greedy=True))
    np.testing.assert_array_equal(d.generate(h, temperature=0.0), d.generate(h, greedy=True, temperature=5.0))


@needs_fixtures
@pytest.mark.parametrize("name", NAMES)
def test_generate_agrees_with_score(models, name, rng):
    """Sampled codes are in range, c0 is kept when given, and greedy codes are the argmax of the teacher-forced
    logits (up to rounding between the two code paths)."""
    m = models[name]
    d = depthdec.Decoder(m, backend="auto")
    V, n = m.config["codebook_size"], 30
    h = rand_hidden(rng, n, m)
    codes = d.generate(h, seed=3)
    assert codes.shape == (n, m.config["levels"]) and codes.min() >= 0 and codes.max() < V
    c0 = rng.integers(0, V, size=n)
    assert np.array_equal(d.generate(h, c0=c0)[:, 0], c0)
    g = d.generate(h, greedy=True)
    logits, logits0 = d.score(h, g)
    tol = 1e-4 * np.abs(logits).max()
    picked = np.take_along_axis(logits, g[:, 1:, None].astype(np.int64), axis=2)[..., 0]
    assert (picked >= logits.max(axis=2) - tol).all()
    assert (logits0[np.arange(n), g[:, 0]] >= logits0.max(axis=1) - 1e-4 * np.abs(logits0).max()).all()


@needs_fixtures
def test_input_conversion(models, rng):
    """float16/float64 hidden and int64 codes are converted like numpy; any layout works."""
    m = models["gpt_bf16"]
    d = depthdec.Decoder(m, backend="ref")
    h64 = rng.standard_normal((9, 96))
    h32 = h64.astype(np.float32)
    want = d.generate(h32, seed=1)
    np.testing.assert_array_equal(d.generate(h64, seed=1), want)
    np.testing.assert_array_equal(d.generate(h32.tolist(), seed=1), want)
    np.testing.assert_array_equal(d.generate(h32.astype(">f4"), seed=1), want)
    np.testing.assert_array_equal(d.generate(np.asfortranarray(h32), seed=1), want)
    wide = np.zeros((9, 192), np.float32)
    wide[:, ::2] = h32
    np.testing.assert_array_equal(d.generate(wide[:, ::2], seed=1), want)  # strided view
    h16 = h32.astype(np.float16)
    np.testing.assert_array_equal(d.generate(h16, seed=1), d.generate(h16.astype(np.float32), seed=1))
    codes = rand_codes(rng, 9, m)
    l32 = d.score(h32, codes)
    for c in (codes.astype(np.int64), codes.tolist(), np.asfortranarray(codes)):
        lg, l0 = d.score(h32, c)
        np.testing.assert_array_equal(lg, l32[0])
        np.testing.assert_array_equal(l0, l32[1])


# The inputs the CLI and this package accept or refuse, decided by one check in the C library (dd_input_check):
# (name, hidden, codes, accepted). Each case runs through Decoder.score and `depthdec score` on the same arrays.
def _input_cases(rng):
    h = rng.standard_normal((6, 96)).astype(np.float32)
    c = rng.integers(0, 64, size=(6, 8)).astype(np.int32)
    return [
        ("float32 hidden, int32 codes", h, c, True),
        ("float16 hidden", h.astype(np.float16), c, True),
        ("float64 hidden", h.astype(np.float64), c, True),
        ("int64 codes", h, c.astype(np.int64), True),
        ("empty hidden", np.zeros((0, 96), np.float32), np.zeros((0, 8), np.int32), False),
        ("int64 hidden", rng.integers(-3, 4, size=(6, 96)), c, False),
        ("int8 codes", h, c.astype(np.int8), False),
        ("uint16 codes", h, c.astype(np.uint16), False),
        ("int16 codes", h, c.astype(np.int16), False),
        ("hidden one column short", h[:, :95].copy(), c, False),
        ("1-D hidden", h[0].copy(), c[:1], False),
        ("codes one level short", h, c[:, :7].copy(), False),
        ("codes one row short", h, c[:5].copy(), False),
        ("code out of range", h, np.where(c == c[0, 0], 64, c).astype(np.int32), False),
    ]


@needs_fixtures
@needs_cli
def test_same_inputs_as_cli(models, rng, tmp_path):
    m = models["gpt_bf16"]
    d = depthdec.Decoder(m, backend="ref")
    for name, h, c, accepted in _input_cases(rng):
        try:
            d.score(h, c)
            py_ok, py_msg = True, ""
        except depthdec.ArgumentError as e:
            py_ok, py_msg = False, str(e)
        np.save(tmp_path / "h.npy", h)
        np.save(tmp_path / "c.npy", c)
        p = subprocess.run([str(CLI), "score", "--model", m.source, "--hidden", tmp_path / "h.npy", "--codes",
                            tmp_path / "c.npy", "--out", tmp_path / "o.npy", "--backend", "ref"],
                           capture_output=True, text=True, timeout=300)
        assert p.returncode in (0, 1), "%s: CLI exit %d: %s" % (name, p.returncode, p.stderr)
        cli_ok = p.returncode == 0
        assert py_ok == accepted, "%s: Python %s (%s)" % (name, "accepted" if py_ok else "refused", py_msg)
        assert cli_ok == accepted, "%s: CLI %s (%s)" % (name, "accepted" if cli_ok else "refused", p.stderr)


# ---- errors ---------------------------------------------------------------------------------------------------


def test_model_errors(tmp_path):
    missing = tmp_path / "missing.safetensors"
    with pytest.raises(depthdec.Error) as e:
        depthdec.Model(missing)
    assert str(missing) in str(e.value) and e.value.code == depthdec.Status.EIO and e.value.status
    bad = tmp_path / "garbage.safetensors"
    bad.write_bytes(b"\xff" * 64)
    with pytest.raises(depthdec.Error) as e:
        depthdec.Model(str(bad))
    assert str(bad) in str(e.value) and e.value.code in (depthdec.Status.EFORMAT, depthdec.Status.EMODEL)
    with pytest.raises(depthdec.Error) as e:
        depthdec.Model(tmp_path)  # a directory without config.json
    assert str(tmp_path) in str(e.value)
    with pytest.raises(depthdec.ArgumentError):
        depthdec.Model(42)


def test_decoder_errors():
    m = depthdec.Model.synthetic("tiny-gpt")
    with pytest.raises(depthdec.Error, match="backend 'gpu'") as e:
        depthdec.Decoder(m, backend="gpu")
    assert e.value.code == depthdec.Status.EINVAL
    for mb in (0, 4097):
        with pytest.raises(depthdec.Error, match="max_batch"):
            depthdec.Decoder(m, max_batch=mb)
    with pytest.raises(depthdec.Error, match="threads"):
        depthdec.Decoder(m, threads=-1)
    with pytest.raises(depthdec.ArgumentError):
        depthdec.Decoder("model.safetensors")
    if not depthdec.backend_available("cuda"):
        with pytest.raises(depthdec.Error) as e:
            depthdec.Decoder(m, backend="cuda")
        assert e.value.code == depthdec.Status.EUNSUPPORTED
    d = depthdec.Decoder(m, "ref")
    d.close()
    d.close()
    with pytest.raises(depthdec.Error, match="closed"):
        d.generate(np.zeros((1, 128), np.float32))


def test_input_errors():
    m = depthdec.Model.synthetic("tiny-gpt")
    d = depthdec.Decoder(m, "ref")
    I, Q, V = 128, 8, 64
    h = np.zeros((3, I), np.float32)
    codes = np.zeros((3, Q), np.int32)

    def bad(match, fn, *a, code=depthdec.Status.EINVAL, **kw):
        with pytest.raises(depthdec.ArgumentError, match=match) as e:
            fn(*a, **kw)
        assert e.value.code == code
        assert isinstance(e.value, ValueError) and isinstance(e.value, depthdec.Error)

    # shape and dtype of hidden
    bad(r"shape \(128,\), want \[N, input_dim=128\]", d.generate, h[0])
    bad(r"shape \(3, 127\)", d.generate, h[:, 1:])
    bad(r"shape \(1, 3, 128\)", d.score, h[None], codes)
    bad("dtype complex64", d.generate, h.astype(np.complex64))
    bad("dtype bool", d.generate, h.astype(bool))
    bad("dtype <U", d.generate, [["a"] * I])
    bad("not an array", d.generate, [[1.0, 2.0], [1.0]])
    # non-finite and unrepresentable values name the row and element
    for v in (np.nan, np.inf, -np.inf):
        x = h.copy()
        x[2, 5] = v
        bad("hidden row 2, element 5: non-finite", d.generate, x, code=depthdec.Status.ENUMERIC)
        bad("hidden row 2, element 5: non-finite", d.score, x, codes, code=depthdec.Status.ENUMERIC)
    x = h.astype(np.float64)
    x[1, 7] = 1e39
    bad("hidden row 1, element 7: value 1e\\+39 does not fit float32", d.generate, x, code=depthdec.Status.ENUMERIC)
    # codes
    for v, dt in ((V, np.int32), (-1, np.int32), (2**40, np.int64)):
        c = codes.astype(dt)
        c[1, 3] = v
        bad("codes row 1, level 3: code %d outside \\[0, 64\\)" % v, d.score, h, c)
    bad("c0 row 2: code 64 outside", d.generate, h, c0=[0, 1, 64])
    bad(r"c0: shape \(2,\)", d.generate, h, c0=[0, 1])
    bad(r"codes: shape \(3, 7\)", d.score, h, codes[:, 1:])
    bad(r"codes: shape \(2, 8\)", d.score, h, codes[1:])
    bad("codes: dtype float64", d.score, h, codes.astype(np.float64))
    bad("codes: dtype uint64, want int32 or int64", d.score, h, codes.astype(np.uint64))
    bad("codes: dtype int8, want int32 or int64", d.score, h, codes.astype(np.int8))
    bad(r"hidden: no rows", d.generate, h[:0])
    bad("c0: dtype float64", d.generate, h, c0=[0.0, 1.0, 2.0])
    # sampling parameters and keys
    for t in (-1.0, float("nan"), float("inf"), 1e39):
        bad("temperature", d.generate, h, temperature=t)
    bad("temperature", d.generate, h, temperature="hot")
    bad("top_k -1: must be >= 0", d.generate, h, top_k=-1)
    bad("top_k: want an integer", d.generate, h, top_k=2.5)
    bad("greedy", d.generate, h, greedy="yes")
    bad("seed -1: outside", d.generate, h, seed=-1)
    bad("seed %d: outside" % 2**64, d.generate, h, seed=2**64)
    bad("seed: want an integer", d.generate, h, seed=1.5)
    bad(r"seed: shape \(2,\)", d.generate, h, seed=[1, 2])
    bad("frame row 1: -5 is negative", d.generate, h, frame=[0, -5, 3])
    bad("frame: dtype float64", d.generate, h, frame=[0.0, 1.0, 2.0])
    # nothing was harmed: the decoder still works
    assert d.generate(h).shape == (3, Q)


def without_head0(src, dst):
    """Rewrite a native safetensors file without its head0.weight tensor."""
    b = Path(src).read_bytes()
    n = struct.unpack("<Q", b[:8])[0]
    header = json.loads(b[8:8 + n])
    data = b[8 + n:]
    out, chunks, off = {"__metadata__": header.pop("__metadata__")}, [], 0
    for k, v in header.items():
        if k == "head0.weight":
            continue
        s, e = v["data_offsets"]
        chunks.append(data[s:e])
        out[k] = dict(v, data_offsets=[off, off + e - s])
        off += e - s
    h = json.dumps(out).encode()
    Path(dst).write_bytes(struct.pack("<Q", len(h)) + h + b"".join(chunks))


@needs_fixtures
def test_no_head0(models, tmp_path):
    p = tmp_path / "nohead0.safetensors"
    without_head0(model_path("gpt_f16"), p)
    m = depthdec.Model(p)
    assert m.config["has_head0"] is False
    d = depthdec.Decoder(m, "ref")
    h, codes, greedy = fixture("gpt_f16", "hidden"), fixture("gpt_f16", "codes"), fixture("gpt_f16", "greedy")
    with pytest.raises(depthdec.Error, match="no head0") as e:
        d.generate(h)
    assert e.value.code == depthdec.Status.EUNSUPPORTED
    np.testing.assert_array_equal(d.generate(h, c0=greedy[:, 0], greedy=True), greedy)
    logits, logits0 = d.score(h, codes)
    assert logits0 is None
    np.testing.assert_array_equal(logits, depthdec.Decoder(models["gpt_f16"], "ref").score(h, codes)[0])


# ---- threads ---------------------------------------------------------------------------------------------------


@needs_fixtures
@pytest.mark.parametrize("backend", ["ref", "auto"])
def test_threads_share_a_model(models, backend, rng):
    """4 threads, each with its own Decoder on one shared Model, get what one thread gets."""
    m = models["csm_tiny"]
    jobs = [(rand_hidden(rng, 50, m), int(rng.integers(0, 2**63)), int(rng.integers(0, 2**32))) for _ in range(8)]
    single = depthdec.Decoder(m, backend=backend, max_batch=16)
    want = [(single.generate(h, seed=s, frame=f), single.score(h, single.generate(h, greedy=True))) for h, s, f in jobs]
    got = [None] * len(jobs)
    errors = []

    def work(t):
        try:
            d = depthdec.Decoder(m, backend=backend, max_batch=16, threads=1)
            for rep in range(3):
                for j in range(t, len(jobs), 4):
                    h, s, f = jobs[j]
                    got[j] = (d.generate(h, seed=s, frame=f), d.score(h, d.generate(h, greedy=True)))
        except Exception as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    for (wc, (wl, wl0)), (gc, (gl, gl0)) in zip(want, got):
        np.testing.assert_array_equal(gc, wc)
        np.testing.assert_array_equal(gl, wl)
        np.testing.assert_array_equal(gl0, wl0)


def heavy_job():
    """A single generate() call of a few tenths of a second on the ref backend."""
    m = depthdec.Model.synthetic("tiny-llama")
    h = np.random.default_rng(0).standard_normal((64, m.config["input_dim"])).astype(np.float32)
    d = depthdec.Decoder(m, "ref")
    t = time.perf_counter()
    d.generate(h)
    per_call = time.perf_counter() - t
    reps = max(1, int(0.4 / per_call))
    return m, np.concatenate([h] * reps), per_call * reps


def test_gil_released():
    """While one thread is inside generate(), another thread keeps running Python code: the longest pause the
    main thread sees is far shorter than the call (it would be the whole call if the GIL were held).

    This is checked instead of a speed-up of two decoding threads over one: on a 2-core machine that also runs
    other work, wall-time ratios were measured anywhere from 0.5 to 1.6, while this pause test does not depend on
    free cores (one core suffices: the OS time-slices the two threads in milliseconds)."""
    m, h, expect = heavy_job()
    d = depthdec.Decoder(m, "ref")
    done = threading.Event()
    t = threading.Thread(target=lambda: (d.generate(h), done.set()))
    gaps, last = [], time.perf_counter()
    t0 = last
    t.start()
    while not done.is_set():
        now = time.perf_counter()
        gaps.append(now - last)
        last = now
    t.join()
    wall = time.perf_counter() - t0
    print("call %.3f s, %d main-thread iterations meanwhile, longest pause %.4f s" % (wall, len(gaps), max(gaps)))
    assert wall > 0.1, "the job was too short to tell"
    assert max(gaps) < 0.5 * wall


def test_decoder_refuses_a_second_thread():
    m, h, _ = heavy_job()
    d = depthdec.Decoder(m, "ref")
    t = threading.Thread(target=d.generate, args=(h,))
    t.start()
    while not d._lock.locked() and t.is_alive():
        time.sleep(0.001)
    if t.is_alive():
        with pytest.raises(depthdec.Error, match="in use by another thread"):
            d.generate(h[:1])
    t.join()
    assert d.generate(h[:1]).shape == (1, 8)


@needs_fixtures
@pytest.mark.parametrize("path, name", [("qwen3omni_tiny", "qwen3omni_tiny"), ("qwen3tts_tiny", "qwen3tts_tiny"),
                                        ("qwen3omni_full", "qwen3omni_tiny"),
                                        ("qwen3omni_mlx_q8", "qwen3omni_mlx_q8"),
                                        ("qwen3omni_mlx_q4", "qwen3omni_mlx_q4")])
def test_qwen3_predictors(path, name):
    """Qwen3 code predictors as their reference code saves them (the predictor alone, the whole sharded Qwen3-Omni
    holding qwen3omni_tiny's predictor, MLX-quantized directories, Qwen3-TTS): teacher-forced logits and greedy codes
    (c0 given) against the float64 fixtures on every backend that runs them, and the talker's next input embedding."""
    m = depthdec.Model(FIXTURES / path)
    c = m.config
    assert c["has_qk_norm"] is True and c["has_head0"] is False
    h, codes, greedy = fixture(name, "hidden"), fixture(name, "codes"), fixture(name, "greedy")
    ref = fixture(name, "logits")
    for b in ["ref", "auto"] + [x for x in depthdec.available_backends() if x != "ref"]:
        d = depthdec.Decoder(m, backend=b)
        logits, logits0 = d.score(h, codes)
        assert logits0 is None
        assert np.max(np.abs(logits - ref)) <= 1e-4 * np.max(np.abs(ref))
        got = d.generate(h, c0=greedy[:, 0], greedy=True)
        assert np.array_equal(got, greedy)
    ne = m.next_embedding(greedy)
    want = fixture(name, "next_embed")
    assert ne.shape == want.shape and np.max(np.abs(ne - want)) <= 1e-6 * np.max(np.abs(want))
    bad = greedy.copy()
    bad[1, 2] = c["codebook_size"]
    with pytest.raises(depthdec.ArgumentError, match="row 1, level 2"):
        m.next_embedding(bad)
    with pytest.raises(depthdec.Error, match="talker-space"):
        depthdec.Model.synthetic("tiny-qwen3").next_embedding(greedy)


@needs_fixtures
@pytest.mark.parametrize("name", ["moshi_tiny", "moshi_tiny_depth", "moshi_q12"])
def test_moshi_depformer(name):
    """Kyutai Moshi's depformer as transformers saves it (the whole model, the module alone; Q 12 > transformers'
    sliding window): logits of all Q levels (level 0 = logits0, from position 0) and greedy codes against the
    float64 fixtures, with the text keyword; text required, range-checked, and refused by models without text."""
    fx = "moshi_tiny" if name == "moshi_tiny_depth" else name
    m = depthdec.Model(FIXTURES / name)
    c = m.config
    assert c["per_position"] is True and c["text_vocab"] == 40 and c["has_head0"] is True
    h, codes, greedy, text = (fixture(fx, k) for k in ("hidden", "codes", "greedy", "text"))
    ref = fixture(fx, "logits")
    Q = c["levels"]
    for b in ["ref", "auto"] + [x for x in depthdec.available_backends() if x != "ref"]:  # cuda too (issue 17)
        d = depthdec.Decoder(m, backend=b)
        logits, logits0 = d.score(h, codes, text=text.astype(np.int64))
        assert np.max(np.abs(logits - ref[:, 1:])) <= 1e-4 * np.max(np.abs(ref))
        assert np.max(np.abs(logits0 - ref[:, 0])) <= 1e-4 * np.max(np.abs(ref[:, 0]))
        assert np.array_equal(d.generate(h, text=text, greedy=True), greedy)
        assert np.array_equal(d.generate(h, text=text, c0=greedy[:, 0], greedy=True), greedy)
        # each row's own text token: a shuffled text array changes the codes of the rows it moves
        assert not np.array_equal(d.generate(h, text=np.roll(text, 1), greedy=True), greedy)
        assert d.generate(h, text=text, seed=3).shape == (6, Q)
    d = depthdec.Decoder(m)
    with pytest.raises(depthdec.ArgumentError, match="text tokens required"):
        d.generate(h)
    with pytest.raises(depthdec.ArgumentError, match="text row 2: token 41"):
        d.generate(h, text=np.array([0, 1, 41, 3, 4, 5]))
    with pytest.raises(depthdec.ArgumentError, match="text"):
        d.score(h, codes, text=text[:5])
    bad = codes.copy()
    bad[0, 1] = c["codebook_size"] + 1
    with pytest.raises(depthdec.ArgumentError, match="row 0, level 1"):
        d.score(h, bad, text=text)
    g = depthdec.Model.synthetic("tiny-llama")
    with pytest.raises(depthdec.ArgumentError, match="takes no text"):
        depthdec.Decoder(g).generate(np.zeros((2, g.config["input_dim"]), np.float32), text=[1, 2])


@needs_fixtures
def test_moshi_serve_frames():
    """The serving path's request parsing and batched decode (depthdec.serve without Ray): Moshi frames carry their
    text token; codes of a mixed batch (greedy and sampled, c0 given and not) equal the plain Decoder's."""
    from depthdec import serve

    m = depthdec.Model(FIXTURES / "moshi_tiny")
    cfg, d = m.config, depthdec.Decoder(m, backend="cpu")
    h, text, greedy = fixture("moshi_tiny", "hidden"), fixture("moshi_tiny", "text"), fixture("moshi_tiny", "greedy")
    reqs = [{"hidden": h[i].tolist(), "text": int(text[i]), "greedy": i % 2 == 0, "seed": 11 + i, "frame": 3,
             "c0": int(greedy[i, 0]) if i == 5 else None} for i in range(6)]
    got = serve.decode_frames(d, [serve.parse_frame(cfg, r) for r in reqs])
    for i in range(6):
        want = d.generate(h[i:i + 1], text=text[i:i + 1], greedy=i % 2 == 0, seed=11 + i, frame=3,
                          c0=greedy[i:i + 1, 0] if i == 5 else None)[0]
        assert got[i] == want.tolist()
    assert got[0] == greedy[0].tolist()
    for bad, msg in (({}, "text"), ({"text": 41}, "text"), ({"text": 1, "c0": 65}, "c0")):
        with pytest.raises(ValueError, match=msg):
            serve.parse_frame(cfg, dict({"hidden": h[0].tolist()}, **bad))
    g = depthdec.Model.synthetic("tiny-llama")
    with pytest.raises(ValueError, match="takes no text"):
        serve.parse_frame(g.config, {"hidden": [0.0] * g.config["input_dim"], "text": 3})
