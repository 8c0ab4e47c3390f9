"""CUDA tensors in Decoder.generate / score (issue 15 point 2, device side; docs/device_api.md). GPU only: skipped,
saying why, without torch, without a CUDA device or when the package was built without the cuda backend
(DEPTHDEC_CUDA=1 at install).

- CUDA torch tensors in -> CUDA torch tensors out, equal to the numpy (host path) call bit for bit: greedy and
  sampled, c0 given and sampled, per-row seed/frame tensors, score with level-0 logits, a caller's stream, batches
  split over max_batch, both executors (n <= 48: the latency executor, launches of at most 8 streams; n = 60 on one
  call: the frame kernel).
- torch.cuda.graph capture of a loop of frames calling depthdec (and torch ops between them); each replay on fresh
  inputs written into the captured tensors equals eager host-path calls.
- errors: wrong device, shape, dtype, host arrays beside CUDA hidden states are refused at the call; a NaN hidden
  or a c0 out of range is raised by Decoder.sync() with the host path's message.
- giving torch tensors does not import cupy (a fresh interpreter checks sys.modules). CuPy: test_cupy_interop.py.
"""

import subprocess
import sys

import numpy as np
import pytest

import depthdec
from test_interop import inputs, same_bits  # the same random hidden states and codes; bit equality

try:
    import torch
except ImportError:
    torch = None

if torch is None:
    pytestmark = pytest.mark.skip(reason="torch is not installed")
elif not torch.cuda.is_available():
    pytestmark = pytest.mark.skip(reason="no CUDA device (torch.cuda.is_available() is False)")
elif not depthdec.backend_available("cuda"):
    pytestmark = pytest.mark.skip(reason="depthdec was built without the cuda backend (install with DEPTHDEC_CUDA=1)")


@pytest.fixture(scope="module", params=["tiny-gpt", "tiny-llama"])
def model(request):
    return depthdec.Model.synthetic(request.param, "bf16", seed=11)


@pytest.mark.parametrize("n,max_batch", [(1, 8), (3, 8), (8, 8), (20, 32), (20, 8), (60, 64)])
def test_cuda_tensors_equal_numpy(model, rng, n, max_batch):
    dec = depthdec.Decoder(model, backend="cuda", max_batch=max_batch)
    c = model.config
    h, codes = inputs(rng, model, n)
    hd = torch.from_numpy(h).cuda()
    c0 = codes[:, 0]
    seeds = rng.integers(0, 2**63, size=n, dtype=np.int64)
    frames = rng.integers(0, 2**40, size=n, dtype=np.int64)
    cases = [dict(c0=c0, seed=3, frame=7), dict(c0=c0, seed=seeds, frame=frames, temperature=1.3, top_k=5),
             dict(c0=c0, greedy=True)]
    if c["has_head0"]:
        cases += [dict(seed=9, frame=2), dict(seed=seeds, frame=frames, greedy=True)]
    for kw in cases:
        want = dec.generate(h, **kw)
        dkw = {k: (torch.from_numpy(np.asarray(v)).cuda() if isinstance(v, np.ndarray) else v) for k, v in kw.items()}
        got = dec.generate(hd, **dkw)
        assert isinstance(got, torch.Tensor) and got.is_cuda and got.dtype == torch.int32 and got.shape == want.shape
        dec.sync()
        assert np.array_equal(got.cpu().numpy(), want), kw
    l, l0 = dec.score(h, codes)
    tl, tl0 = dec.score(hd, torch.from_numpy(codes.astype(np.int64)).cuda())
    dec.sync()
    assert tl.is_cuda and same_bits(tl.cpu().numpy(), l)
    assert (tl0 is None) == (l0 is None)
    if l0 is not None:
        assert tl0.is_cuda and same_bits(tl0.cpu().numpy(), l0)
    # a caller's stream: inputs made on the current stream, the frame on another (DLPack orders them)
    s = torch.cuda.Stream()
    h2 = torch.from_numpy(h).cuda() * 1.0
    got = dec.generate(h2, c0=torch.from_numpy(c0).cuda(), seed=3, frame=7, stream=s)
    s.synchronize()
    dec.sync()
    assert np.array_equal(got.cpu().numpy(), dec.generate(h, c0=c0, seed=3, frame=7))
    # bfloat16 / float64 / strided hidden converted on the device like the host path converts them
    hb = hd.to(torch.bfloat16)
    want = dec.generate(hb.cpu(), c0=c0, greedy=True).numpy()
    assert np.array_equal(dec.generate(hb, c0=torch.from_numpy(c0).cuda(), greedy=True).cpu().numpy(), want)
    wide = torch.stack([hd, -hd], dim=2)[:, :, 0]  # hd's values at stride 2
    assert not wide.is_contiguous() and torch.equal(wide, hd)
    assert np.array_equal(dec.generate(wide, c0=torch.from_numpy(c0).cuda(), greedy=True).cpu().numpy(),
                          dec.generate(h, c0=c0, greedy=True))


@pytest.mark.parametrize("n", [2, 12])
def test_cuda_graph_capture(model, rng, n):
    """A frame loop (depthdec + torch ops) captured with torch.cuda.graph; 3 replays on fresh inputs == eager."""
    F = 4
    c = model.config
    dec = depthdec.Decoder(model, backend="cuda", max_batch=n)
    need_c0 = not c["has_head0"]
    h_st = torch.zeros((F, n, c["input_dim"]), device="cuda")
    c0_st = torch.zeros(n, dtype=torch.int64, device="cuda")
    seeds_st = torch.zeros(n, dtype=torch.int64, device="cuda")
    frame_st = torch.zeros(n, dtype=torch.int64, device="cuda")

    def loop():
        outs = []
        for f in range(F):
            x = h_st[f] * 1.0  # a torch op between depthdec calls, inside the graph
            outs.append(dec.generate(x, c0=c0_st if need_c0 else None, seed=seeds_st, frame=frame_st + f,
                                     temperature=0.8, top_k=20))
        return outs

    side = torch.cuda.Stream()  # warm-up (builds the executor's plan) on a side stream, as torch recommends
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        loop()
    torch.cuda.current_stream().wait_stream(side)
    dec.sync()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        outs = loop()
    for rep in range(3):
        h = rng.standard_normal((F, n, c["input_dim"])).astype(np.float32)
        c0 = rng.integers(0, c["codebook_size"], size=n)
        seeds = rng.integers(0, 2**62, size=n)
        base = rng.integers(0, 2**40, size=n)
        h_st.copy_(torch.from_numpy(h))
        c0_st.copy_(torch.from_numpy(c0))
        seeds_st.copy_(torch.from_numpy(seeds))
        frame_st.copy_(torch.from_numpy(base))
        for o in outs:
            o.fill_(-5)
        g.replay()
        torch.cuda.synchronize()
        dec.sync()
        for f in range(F):
            want = dec.generate(h[f], c0=c0 if need_c0 else None, seed=seeds, frame=base + f, temperature=0.8,
                                top_k=20)
            assert np.array_equal(outs[f].cpu().numpy(), want), (rep, f)


def test_cuda_errors(rng):
    model = depthdec.Model.synthetic("tiny-gpt", "bf16", seed=5)
    c = model.config
    V, I = c["codebook_size"], c["input_dim"]
    dec = depthdec.Decoder(model, backend="cuda", max_batch=4)
    h, codes = inputs(rng, model, 3)
    hd = torch.from_numpy(h).cuda()
    with pytest.raises(depthdec.ArgumentError, match=r"c0: on cpu, want cuda:0"):
        dec.generate(hd, c0=torch.from_numpy(codes[:, 0]))
    with pytest.raises(depthdec.ArgumentError, match=r"c0: with CUDA hidden states, want a CUDA torch tensor"):
        dec.generate(hd, c0=codes[:, 0])
    with pytest.raises(depthdec.ArgumentError, match=r"seed: a host array with CUDA hidden states"):
        dec.generate(hd, seed=np.arange(3))
    with pytest.raises(depthdec.ArgumentError, match=r"hidden: shape \(3, %d\)" % (I - 1)):
        dec.generate(hd[:, 1:])
    with pytest.raises(depthdec.ArgumentError, match=r"hidden: dtype"):
        dec.generate(hd.to(torch.int32))
    with pytest.raises(depthdec.ArgumentError, match=r"codes: shape"):
        dec.score(hd, torch.from_numpy(codes[:, 1:]).cuda())
    with pytest.raises(depthdec.ArgumentError, match=r"frame: shape \(2,\)"):
        dec.generate(hd, frame=torch.zeros(2, dtype=torch.int64, device="cuda"))
    with pytest.raises(depthdec.ArgumentError, match=r"stream: want a torch.cuda.Stream"):
        dec.generate(hd, stream="s")
    if torch.cuda.device_count() > 1:
        with pytest.raises(depthdec.ArgumentError, match=r"c0: on cuda:1, want cuda:0"):
            dec.generate(hd, c0=torch.from_numpy(codes[:, 0]).to("cuda:1"))
    cpu = depthdec.Decoder(model, backend="cpu")
    with pytest.raises(depthdec.ArgumentError, match=r"backend is cpu"):
        cpu.generate(hd)
    dec.sync()
    # values: checked on the device, raised by sync() with the host path's message
    bad = h.copy()
    bad[1, 2] = np.nan
    with pytest.raises(depthdec.Error) as host:
        dec.generate(bad)
    dec.generate(torch.from_numpy(bad).cuda())
    with pytest.raises(depthdec.Error) as dev:
        dec.sync()
    assert str(dev.value) == str(host.value) == "hidden row 1, element 2: non-finite value nan"
    assert dev.value.code == depthdec.Status.ENUMERIC
    dec.sync()  # cleared
    c0 = codes[:, 0].copy()
    c0[0] = V + 3
    with pytest.raises(depthdec.ArgumentError) as host:
        dec.generate(h, c0=c0)
    dec.generate(hd, c0=torch.from_numpy(c0).cuda())
    with pytest.raises(depthdec.Error) as dev:
        dec.sync()
    assert str(dev.value) == str(host.value) == "c0 row 0: code %d outside [0, %d)" % (V + 3, V)
    # the next host-array call reports a pending device error too
    dec.generate(torch.from_numpy(bad).cuda())
    with pytest.raises(depthdec.Error, match=r"hidden row 1, element 2"):
        dec.generate(h)
    assert dec.generate(h).shape == (3, c["levels"])


def test_torch_does_not_import_cupy():
    code = ("import sys, numpy as np, torch, depthdec\n"
            "m = depthdec.Model.synthetic('tiny-gpt', 'f32')\n"
            "d = depthdec.Decoder(m, backend='cuda')\n"
            "h = np.random.default_rng(0).standard_normal((3, m.config['input_dim'])).astype(np.float32)\n"
            "out = d.generate(torch.from_numpy(h).cuda(), seed=1, frame=2)\n"
            "d.sync()\n"
            "assert isinstance(out, torch.Tensor) and out.is_cuda\n"
            "assert np.array_equal(out.cpu().numpy(), d.generate(h, seed=1, frame=2))\n"
            "assert 'cupy' not in sys.modules, 'cupy was imported'\n"
            "print('ok')\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr
