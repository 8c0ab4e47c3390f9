"""CuPy arrays in Decoder.generate / score (issue 15 point 2, device side; docs/device_api.md): the CuPy side of
test_cuda_interop.py (torch). GPU only: skipped, saying why, when cupy is not importable (pip install cupy-cuda13x),
without a CUDA device, or when the package was built without the cuda backend (DEPTHDEC_CUDA=1 at install).

- CuPy arrays in -> CuPy arrays out (codes int32 [N, Q]; logits/logits0 float32), equal to the numpy (host path) call
  bit for bit: greedy and sampled, c0 given and sampled, per-row seed/frame arrays (int64, uint64, int32), scalar keys
  at the top of the uint64 range, score with level-0 logits and int64 codes, a caller's stream (a cupy.cuda.Stream,
  its raw handle, or made current with `with`), float16/float64/strided hidden, batches split over max_batch, both
  executors (n <= 48: the latency executor, launches of at most 8 streams; n = 60 on one call: the frame kernel).
- a frame loop (depthdec + CuPy ops) captured with cupy.cuda.Stream.begin_capture / end_capture; each
  Graph.launch on fresh inputs written into the captured arrays equals eager host-path calls.
- errors: wrong device, shape, dtype, host arrays beside CUDA hidden states, a bad stream, a CUDA array of another
  library (torch beside CuPy, either way round; a DLPack producer that is neither) are refused at the call; a NaN
  hidden or a c0 out of range is raised by Decoder.sync() with the host path's message.
- giving CuPy arrays does not import torch (a fresh interpreter checks sys.modules).
"""

import subprocess
import sys

import numpy as np
import pytest

import depthdec
from test_interop import inputs, same_bits  # the same random hidden states and codes; bit equality

try:
    import cupy
except Exception as e:  # ImportError, or a CUDA library that cupy cannot load
    cupy, _why = None, "cupy is not importable (%s: %s); pip install cupy-cuda13x" % (type(e).__name__, e)


def _devices():
    try:
        return cupy.cuda.runtime.getDeviceCount()
    except Exception:  # no driver, no device
        return 0


if cupy is None:
    pytestmark = pytest.mark.skip(reason=_why)
elif _devices() == 0:
    pytestmark = pytest.mark.skip(reason="no CUDA device (cupy.cuda.runtime.getDeviceCount() is 0 or failed)")
elif not depthdec.backend_available("cuda"):
    pytestmark = pytest.mark.skip(reason="depthdec was built without the cuda backend (install with DEPTHDEC_CUDA=1)")


@pytest.fixture(scope="module", params=["tiny-gpt", "tiny-llama"])
def model(request):
    return depthdec.Model.synthetic(request.param, "bf16", seed=11)


def dev_kw(kw):
    """numpy arrays of a call's keywords as CuPy arrays on the current device (scalars as they are)"""
    return {k: (cupy.asarray(v) if isinstance(v, np.ndarray) else v) for k, v in kw.items()}


@pytest.mark.parametrize("n,max_batch", [(1, 8), (3, 8), (8, 8), (20, 32), (20, 8), (60, 64)])
def test_cupy_equal_numpy(model, rng, n, max_batch):
    dec = depthdec.Decoder(model, backend="cuda", max_batch=max_batch)
    c = model.config
    h, codes = inputs(rng, model, n)
    hd = cupy.asarray(h)
    c0 = codes[:, 0]
    seeds = rng.integers(0, 2**63, size=n, dtype=np.int64)
    frames = rng.integers(0, 2**40, size=n, dtype=np.int64)
    cases = [dict(c0=c0, seed=3, frame=7), dict(c0=c0, seed=seeds, frame=frames, temperature=1.3, top_k=5),
             dict(c0=c0, greedy=True),
             # uint64 seeds above 2**63, int32 frames (widened); scalar keys whose frames wrap past 2**64
             dict(c0=c0, seed=seeds.astype(np.uint64) + np.uint64(2**63), frame=np.arange(n, dtype=np.int32) * 3),
             dict(c0=c0.astype(np.int64), seed=2**64 - 1, frame=2**64 - 2, temperature=1.1, top_k=9)]
    if c["has_head0"]:
        cases += [dict(seed=9, frame=2), dict(seed=seeds, frame=frames, greedy=True)]
    for kw in cases:
        want = dec.generate(h, **kw)
        got = dec.generate(hd, **dev_kw(kw))
        assert isinstance(got, cupy.ndarray) and got.dtype == np.int32 and got.shape == want.shape, kw
        assert got.device.id == hd.device.id
        dec.sync()
        assert np.array_equal(cupy.asnumpy(got), want), kw
    l, l0 = dec.score(h, codes)
    cl, cl0 = dec.score(hd, cupy.asarray(codes.astype(np.int64)))
    dec.sync()
    assert isinstance(cl, cupy.ndarray) and cl.dtype == np.float32 and cl.shape == l.shape
    assert same_bits(cupy.asnumpy(cl), l)
    assert (cl0 is None) == (l0 is None)
    if l0 is not None:
        assert isinstance(cl0, cupy.ndarray) and cl0.dtype == np.float32 and same_bits(cupy.asnumpy(cl0), l0)
    # a caller's stream: inputs made on the current stream, the frame on another (depthdec makes it wait for the
    # current one); the inputs stay referenced here until the stream is synchronised (CuPy has no record_stream)
    want = dec.generate(h, c0=c0, seed=3, frame=7)
    s = cupy.cuda.Stream(non_blocking=True)
    h2 = hd * 1.0
    c0d = cupy.asarray(c0)
    for st in (s, s.ptr):
        got = dec.generate(h2, c0=c0d, seed=3, frame=7, stream=st)
        s.synchronize()
        dec.sync()
        assert np.array_equal(cupy.asnumpy(got), want), st
    with s:  # the default: CuPy's current stream
        h3 = hd * 1.0
        got = dec.generate(h3, c0=cupy.asarray(c0), seed=3, frame=7)
        sl, sl0 = dec.score(h3, cupy.asarray(codes))
    s.synchronize()
    dec.sync()
    assert np.array_equal(cupy.asnumpy(got), want)
    assert same_bits(cupy.asnumpy(sl), l)
    if l0 is not None:
        assert same_bits(cupy.asnumpy(sl0), l0)
    # float16 / float64 / strided hidden converted on the device as the host path converts them
    wide = cupy.stack([hd, -hd], axis=2)[:, :, 0]  # hd's values at stride 2
    assert not wide.flags.c_contiguous and bool((wide == hd).all())
    for hx in (hd.astype(cupy.float16), hd.astype(cupy.float64), wide):
        want = dec.generate(cupy.asnumpy(hx), c0=c0, greedy=True)
        got = dec.generate(hx, c0=cupy.asarray(c0), greedy=True)
        dec.sync()
        assert np.array_equal(cupy.asnumpy(got), want), hx.dtype


@pytest.mark.parametrize("n", [2, 12])
def test_cupy_graph_capture(model, rng, n):
    """A frame loop (depthdec + CuPy ops) captured on a CuPy stream; 3 Graph.launch replays on fresh inputs == eager."""
    if not hasattr(cupy.cuda.Stream, "begin_capture"):
        pytest.skip("this CuPy (%s) has no Stream.begin_capture" % cupy.__version__)
    F = 4
    c = model.config
    dec = depthdec.Decoder(model, backend="cuda", max_batch=n)
    need_c0 = not c["has_head0"]
    s = cupy.cuda.Stream(non_blocking=True)
    with s:
        h_st = cupy.zeros((F, n, c["input_dim"]), dtype=cupy.float32)
        c0_st = cupy.zeros(n, dtype=cupy.int64)
        seeds_st = cupy.zeros(n, dtype=cupy.int64)
        frame_st = cupy.zeros(n, dtype=cupy.int64)

    def loop():
        outs = []
        for f in range(F):
            x = h_st[f] * 1.0  # a CuPy op between depthdec calls, inside the graph
            outs.append(dec.generate(x, c0=c0_st if need_c0 else None, seed=seeds_st, frame=frame_st + f,
                                     temperature=0.8, top_k=20))
        return outs

    with s:  # warm-up on the capture stream: builds the executor's plans, compiles CuPy's kernels, fills its pool
        loop()
    s.synchronize()
    dec.sync()
    with s:  # the capture stream current: depthdec's default stream, and where CuPy enqueues
        s.begin_capture()
        try:
            outs = loop()
        except BaseException:
            try:
                s.end_capture()
            except Exception:
                pass
            raise
        g = s.end_capture()
    for rep in range(3):
        h = rng.standard_normal((F, n, c["input_dim"])).astype(np.float32)
        c0 = rng.integers(0, c["codebook_size"], size=n, dtype=np.int64)
        seeds = rng.integers(0, 2**62, size=n, dtype=np.int64)
        base = rng.integers(0, 2**40, size=n, dtype=np.int64)
        h_st.set(h, stream=s)
        c0_st.set(c0, stream=s)
        seeds_st.set(seeds, stream=s)
        frame_st.set(base, stream=s)
        with s:
            for o in outs:
                o.fill(-5)
        g.launch(stream=s)
        s.synchronize()
        dec.sync()
        for f in range(F):
            want = dec.generate(h[f], c0=c0 if need_c0 else None, seed=seeds, frame=base + f, temperature=0.8,
                                top_k=20)
            assert np.array_equal(cupy.asnumpy(outs[f]), want), (rep, f)


class OtherCuda:
    """A CUDA array of a library that is neither torch nor CuPy (only the DLPack protocol)."""

    def __init__(self, a):
        self._a = a

    def __dlpack__(self, **kw):
        return self._a.__dlpack__(**kw)

    def __dlpack_device__(self):
        return self._a.__dlpack_device__()


def test_cupy_errors(rng):
    model = depthdec.Model.synthetic("tiny-gpt", "bf16", seed=5)
    c = model.config
    V, I = c["codebook_size"], c["input_dim"]
    dec = depthdec.Decoder(model, backend="cuda", max_batch=4)
    h, codes = inputs(rng, model, 3)
    hd = cupy.asarray(h)
    with pytest.raises(depthdec.ArgumentError, match=r"c0: with CUDA hidden states, want a cupy.ndarray or None, "
                                                     r"got ndarray"):
        dec.generate(hd, c0=codes[:, 0])
    with pytest.raises(depthdec.ArgumentError, match=r"seed: a host array with CUDA hidden states: give a "
                                                     r"cupy.ndarray \[N\] or a scalar"):
        dec.generate(hd, seed=np.arange(3))
    with pytest.raises(depthdec.ArgumentError, match=r"seed: dtype float32, want integers"):
        dec.generate(hd, seed=cupy.zeros(3, dtype=cupy.float32))
    with pytest.raises(depthdec.ArgumentError, match=r"seed 18446744073709551616: outside"):
        dec.generate(hd, seed=2**64)
    with pytest.raises(depthdec.ArgumentError, match=r"hidden: shape \(3, %d\)" % (I - 1)):
        dec.generate(hd[:, 1:])
    with pytest.raises(depthdec.ArgumentError, match=r"hidden: dtype"):
        dec.generate(hd.astype(cupy.int32))
    with pytest.raises(depthdec.ArgumentError, match=r"codes: shape"):
        dec.score(hd, cupy.asarray(codes[:, 1:]))
    with pytest.raises(depthdec.ArgumentError, match=r"c0: dtype"):
        dec.generate(hd, c0=cupy.asarray(codes[:, 0]).astype(cupy.float32))
    with pytest.raises(depthdec.ArgumentError, match=r"frame: shape \(2,\)"):
        dec.generate(hd, frame=cupy.zeros(2, dtype=cupy.int64))
    with pytest.raises(depthdec.ArgumentError, match=r"stream: want a cupy.cuda.Stream \(or ExternalStream\) or a "
                                                     r"cudaStream_t as an int, got builtins.str"):
        dec.generate(hd, stream="s")
    with pytest.raises(depthdec.ArgumentError, match=r"hidden: the array is on device 'cuda' \(DLPack device type 2\), "
                                                     r"from test_cupy_interop: depthdec's device path takes torch "
                                                     r"tensors and CuPy arrays"):
        dec.generate(OtherCuda(hd))
    with pytest.raises(depthdec.ArgumentError, match=r"c0: a CUDA array from test_cupy_interop with cupy hidden "
                                                     r"states: give every CUDA array of a call from one library"):
        dec.generate(hd, c0=OtherCuda(cupy.asarray(codes[:, 0])))
    with pytest.raises(depthdec.ArgumentError, match=r"text: .* takes no text tokens"):
        dec.generate(hd, text=np.zeros(3, np.int32))
    if cupy.cuda.runtime.getDeviceCount() > 1:
        with cupy.cuda.Device(1):
            c0_1 = cupy.asarray(codes[:, 0])
            s1 = cupy.cuda.Stream()
        with pytest.raises(depthdec.ArgumentError, match=r"c0: on cuda:1, want cuda:0"):
            dec.generate(hd, c0=c0_1)
        with pytest.raises(depthdec.ArgumentError, match=r"stream: on cuda:1, the arrays are on cuda:0"):
            dec.generate(hd, stream=s1)
    cpu = depthdec.Decoder(model, backend="cpu")
    with pytest.raises(depthdec.ArgumentError, match=r"hidden: the array is on device 'cuda' \(DLPack device type 2\) "
                                                     r"and this decoder's backend is cpu: move it to the host first "
                                                     r"\(cupy: .get\(\)\)"):
        cpu.generate(hd)
    with pytest.raises(depthdec.ArgumentError, match=r"codes: the array is on device 'cuda'.*torch tensors or CuPy "
                                                     r"arrays, cuda Decoder"):
        cpu.score(h, cupy.asarray(codes))
    with pytest.raises(depthdec.ArgumentError, match=r"stream: only for CUDA arrays"):
        dec.generate(h, stream=cupy.cuda.Stream.null)
    dec.sync()
    # values: checked on the device, raised by sync() with the host path's message
    bad = h.copy()
    bad[1, 2] = np.nan
    with pytest.raises(depthdec.Error) as host:
        dec.generate(bad)
    dec.generate(cupy.asarray(bad))
    with pytest.raises(depthdec.Error) as dev:
        dec.sync()
    assert str(dev.value) == str(host.value) == "hidden row 1, element 2: non-finite value nan"
    assert dev.value.code == depthdec.Status.ENUMERIC
    dec.sync()  # cleared
    c0 = codes[:, 0].copy()
    c0[0] = V + 3
    with pytest.raises(depthdec.ArgumentError) as host:
        dec.generate(h, c0=c0)
    dec.generate(hd, c0=cupy.asarray(c0))
    with pytest.raises(depthdec.Error) as dev:
        dec.sync()
    assert str(dev.value) == str(host.value) == "c0 row 0: code %d outside [0, %d)" % (V + 3, V)
    # int64 codes are clamped to [-1, V] before int32 on the device: a huge one is reported as V
    big = codes[:, 0].astype(np.int64)
    big[2] = 2**40
    dec.generate(hd, c0=cupy.asarray(big))
    with pytest.raises(depthdec.Error, match=r"^c0 row 2: code %d outside \[0, %d\)$" % (V, V)):
        dec.sync()
    # the next host-array call reports a pending device error too
    dec.generate(cupy.asarray(bad))
    with pytest.raises(depthdec.Error, match=r"hidden row 1, element 2"):
        dec.generate(h)
    assert dec.generate(h).shape == (3, c["levels"])


def test_mixed_libraries_refused(rng):
    """torch and CuPy arrays in one call are refused, naming both and the conversion; converted, they work."""
    try:
        import torch
    except ImportError:
        pytest.skip("torch is not installed")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA device")
    model = depthdec.Model.synthetic("tiny-gpt", "bf16", seed=5)
    dec = depthdec.Decoder(model, backend="cuda", max_batch=4)
    h, codes = inputs(rng, model, 3)
    hd, ht = cupy.asarray(h), torch.from_numpy(h).cuda()
    c0d, c0t = cupy.asarray(codes[:, 0]), torch.from_numpy(codes[:, 0]).cuda()
    cases = [(lambda: dec.generate(hd, c0=c0t), "c0", "torch", "cupy"),
             (lambda: dec.generate(hd, seed=torch.arange(3, device="cuda")), "seed", "torch", "cupy"),
             (lambda: dec.score(hd, torch.from_numpy(codes).cuda()), "codes", "torch", "cupy"),
             (lambda: dec.generate(ht, c0=c0d), "c0", "cupy", "torch"),
             (lambda: dec.generate(ht, frame=cupy.arange(3)), "frame", "cupy", "torch"),
             (lambda: dec.score(ht, cupy.asarray(codes)), "codes", "cupy", "torch")]
    for call, name, lib, hlib in cases:
        with pytest.raises(depthdec.ArgumentError,
                           match=r"^%s: a CUDA array from %s with %s hidden states: give every CUDA array of a call "
                                 r"from one library \(%s.from_dlpack\(x\) converts it without a copy\)$"
                                 % (name, lib, hlib, hlib)):
            call()
    with pytest.raises(depthdec.ArgumentError, match=r"stream: want a cupy.cuda.Stream .* got torch\."):
        dec.generate(hd, stream=torch.cuda.Stream())
    with pytest.raises(depthdec.ArgumentError, match=r"stream: want a torch.cuda.Stream"):
        dec.generate(ht, stream=cupy.cuda.Stream())
    dec.sync()
    want = dec.generate(h, c0=codes[:, 0], greedy=True)
    got = dec.generate(hd, c0=cupy.from_dlpack(c0t), greedy=True)
    got_t = dec.generate(ht, c0=torch.from_dlpack(c0d), greedy=True)
    torch.cuda.synchronize()
    dec.sync()
    assert isinstance(got, cupy.ndarray) and np.array_equal(cupy.asnumpy(got), want)
    assert isinstance(got_t, torch.Tensor) and np.array_equal(got_t.cpu().numpy(), want)


def test_cupy_does_not_import_torch():
    code = ("import sys, numpy as np, cupy, depthdec\n"
            "assert 'torch' not in sys.modules, 'torch imported before the call'\n"
            "m = depthdec.Model.synthetic('tiny-gpt', 'f32')\n"
            "d = depthdec.Decoder(m, backend='cuda')\n"
            "h = np.random.default_rng(0).standard_normal((3, m.config['input_dim'])).astype(np.float32)\n"
            "hd = cupy.asarray(h)\n"
            "out = d.generate(hd, seed=1, frame=2)\n"
            "lg, lg0 = d.score(hd, out)\n"
            "d.sync()\n"
            "assert type(out).__module__ == 'cupy' and type(lg).__module__ == 'cupy', (type(out), type(lg))\n"
            "assert np.array_equal(cupy.asnumpy(out), d.generate(h, seed=1, frame=2))\n"
            "assert 'torch' not in sys.modules, 'torch was imported'\n"
            "print('ok')\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr
