"""CUDA arrays in Decoder.generate / score (issue 15 point 2, device side; docs/device_api.md).

Inputs that live on a CUDA device (DLPack device type 2, or 13 managed) are used where they are: their pointers come
from __dlpack__(stream=...) — the DLPack stream protocol, so the producer orders its pending work before the
consumer's stream — and the library's dd_decode_device / dd_score_device enqueue the frame on that stream with the
GIL released. Outputs are made with torch on the input's device (torch in, torch out); nothing is synchronised and
nothing goes through the host, so a loop of frames can be captured with torch.cuda.graph.

What the host path checks on the values (finite hidden, codes in [0, V)) is checked on the device here, and a
failure is reported by the next synchronising call: Decoder.sync(), or the next generate/score with host arrays. The
outputs of a failed frame are left as torch.empty made them. Module imported only when a CUDA array is given; torch
is imported only then (whoever made the tensor has imported it already).
"""

import numpy as np

from . import ArgumentError, Error, Status, _ext, _u64_scalar

_CUDA = (2, 13)  # kDLCUDA, kDLCUDAManaged


def cuda_device(x):
    """The CUDA device index of x when it is a CUDA array through DLPack, else None (x is read on the host)."""
    if isinstance(x, np.ndarray) or not hasattr(x, "__dlpack__"):
        return None
    dev = getattr(x, "__dlpack_device__", None)
    if dev is None:
        return None
    try:
        kind, idx = dev()
    except Exception:  # a broken producer: the host path names the error
        return None
    return int(idx) if int(kind) in _CUDA else None


def _torch_of(x, name, backend):
    """torch, for a CUDA tensor x (the only library depthdec makes CUDA outputs with)."""
    kind = int(x.__dlpack_device__()[0])
    where = "the array is on device 'cuda%s' (DLPack device type %d)" % ("_managed" if kind == 13 else "", kind)
    if backend != "cuda":
        raise ArgumentError("%s: %s and this decoder's backend is %s: move it to the host first (torch: .cpu()) "
                            "or use Decoder(model, backend='cuda')" % (name, where, backend))
    if type(x).__module__.split(".")[0] != "torch":
        raise ArgumentError("%s: %s, from %s: depthdec makes its CUDA outputs with torch: give torch tensors "
                            "(torch.from_dlpack(x))" % (name, where, type(x).__module__.split(".")[0]))
    import torch  # already imported by whoever made x

    return torch


def _kind(torch, dt):
    """numpy's dtype.kind of a torch dtype (for the library's dtype/shape rule, dd_input_check)."""
    if dt == torch.bool:
        return "b"
    if dt.is_complex:
        return "c"
    if dt.is_floating_point:
        return "f"
    return "u" if dt in (torch.uint8, getattr(torch, "uint16", None), getattr(torch, "uint32", None),
                         getattr(torch, "uint64", None)) else "i"


def _checked(model, torch, what, t, rows, label):
    """The library's dtype/shape rule (dd_input_check) on a tensor's dtype and shape (no values are read)."""
    try:
        _ext.input_check(model._h, what, _kind(torch, t.dtype), t.dtype.itemsize, tuple(t.shape), rows, label)
    except Error as e:
        raise ArgumentError(str(e), e.code) from None


def _on(torch, x, name, dev):
    if not torch.is_tensor(x):
        raise ArgumentError("%s: with CUDA hidden states, want a CUDA torch tensor or None, got %s" %
                            (name, type(x).__name__))
    if x.device.type != "cuda" or x.device.index != dev:
        raise ArgumentError("%s: on %s, want cuda:%d (the device of hidden)" % (name, x.device, dev))
    return x.detach()


def _hidden(model, torch, x, dev):
    t = _on(torch, x, "hidden", dev)
    _checked(model, torch, 0, t, 0, "hidden")
    return t.to(torch.float32).contiguous()  # finiteness: checked on the device


def _codes(model, torch, x, name, shape, dev, V):
    t = _on(torch, x, name, dev)
    _checked(model, torch, 1 if len(shape) == 1 else 2, t, shape[0], name)
    if t.dtype != torch.int32:  # int64: out-of-range values stay out of range (reported as -1 or V)
        t = t.clamp(-1, V).to(torch.int32)
    return t.contiguous()


def _keys(torch, x, name, n, dev, consecutive):
    """int64 [n] on the device holding the uint64 keys' bits: a scalar (seed: every row; frame: row r at frame + r,
    made on the device, hence fixed in a captured graph) or a CUDA integer tensor [n] (int64/uint64 bits as they
    are, narrower integers widened)."""
    device = torch.device("cuda", dev)
    if torch.is_tensor(x):
        t = _on(torch, x, name, dev)
        if t.dtype.is_floating_point or t.dtype.is_complex or t.dtype == torch.bool:
            raise ArgumentError("%s: dtype %s, want integers in [0, 2**64)" % (name, t.dtype))
        if tuple(t.shape) != (n,):
            raise ArgumentError("%s: shape %s, want a scalar or [N] with N = %d rows of hidden" %
                                (name, tuple(t.shape), n))
        if t.dtype.itemsize != 8:
            t = t.to(torch.int64)
        return t.contiguous()
    if hasattr(x, "__dlpack__") or isinstance(x, (np.ndarray, list, tuple)):
        raise ArgumentError("%s: a host array with CUDA hidden states: give a CUDA tensor [N] or a scalar" % name)
    v = _u64_scalar(x, name)
    v = v - 2**64 if v >= 2**63 else v  # the same 64 bits as int64
    if consecutive:
        return torch.arange(n, dtype=torch.int64, device=device).add_(v)  # wraps modulo 2**64
    return torch.full((n,), v, dtype=torch.int64, device=device)


class _Stream:
    """The stream the call runs on (the caller's `stream`, else torch's current stream of the device), made current
    for the torch ops of the call; .handle is the cudaStream_t, .dlpack the value __dlpack__(stream=) takes.

    A `stream` other than the current one first waits for the current one: what the DLPack protocol has a producer do
    for its consumer (the caller's tensors are torch's current stream's work), done once here because the call's
    own torch ops (conversions, outputs) then run on `stream` and its __dlpack__ calls see it current. The caller's
    tensors are then marked used on `stream` (record_stream), so that torch does not reuse their memory early."""

    def __init__(self, torch, dev, stream):
        device = torch.device("cuda", dev)
        cur = torch.cuda.current_stream(device)
        if stream is None:
            s = cur
        elif isinstance(stream, torch.cuda.Stream):
            s = stream
        elif isinstance(stream, int) and not isinstance(stream, bool):
            s = torch.cuda.ExternalStream(stream, device=device)
        else:
            raise ArgumentError("stream: want a torch.cuda.Stream or a cudaStream_t as an int, got %s" %
                                type(stream).__name__)
        if s.device != device:
            raise ArgumentError("stream: on %s, the arrays are on cuda:%d" % (s.device, dev))
        self._other = s.cuda_stream != cur.cuda_stream
        if self._other:
            s.wait_stream(cur)
        self._s = s
        self._ctx = (torch.cuda.device(device), torch.cuda.stream(s))
        self.handle = s.cuda_stream
        self.dlpack = self.handle if self.handle else 1  # DLPack: 1 = the legacy default stream (0 is not allowed)

    def __enter__(self):
        for c in self._ctx:
            c.__enter__()
        return self

    def __exit__(self, *exc):
        for c in reversed(self._ctx):
            c.__exit__(*exc)

    def keep(self, torch, *xs):
        """the caller's tensors xs (None and non-tensors skipped) stay allocated until `stream` has read them"""
        if self._other:
            for x in xs:
                if torch.is_tensor(x):
                    x.record_stream(self._s)


def generate(dec, hidden, dev, c0, seed, frame, t, k, stream):
    torch = _torch_of(hidden, "hidden", dec.backend)
    c = dec._cfg
    with _Stream(torch, dev, stream) as s:
        h = _hidden(dec.model, torch, hidden, dev)
        n = h.shape[0]
        c0t = None if c0 is None else _codes(dec.model, torch, c0, "c0", (n,), dev, c["codebook_size"])
        if c0t is None and not c["has_head0"]:
            raise Error("%s: the model has no head0, so c0 is required" % dec.model.source, Status.EUNSUPPORTED)
        seeds = _keys(torch, seed, "seed", n, dev, consecutive=False)
        frames = _keys(torch, frame, "frame", n, dev, consecutive=True)
        out = torch.empty((n, c["levels"]), dtype=torch.int32, device=h.device)
        caps = [x.__dlpack__(stream=s.dlpack) for x in (h, seeds, frames, out)]
        c0cap = None if c0t is None else c0t.__dlpack__(stream=s.dlpack)
        dec._enter()
        try:
            _ext.decode_device(dec._h, n, dev, caps[0], c0cap, caps[1], caps[2], t, k, caps[3], s.handle)
        finally:
            dec._lock.release()
        s.keep(torch, hidden, c0, seed, frame)
    return out


def score(dec, hidden, dev, codes, stream):
    torch = _torch_of(hidden, "hidden", dec.backend)
    c = dec._cfg
    Q, V = c["levels"], c["codebook_size"]
    with _Stream(torch, dev, stream) as s:
        h = _hidden(dec.model, torch, hidden, dev)
        n = h.shape[0]
        ct = _codes(dec.model, torch, codes, "codes", (n, Q), dev, V)
        logits = torch.empty((n, Q - 1, V), dtype=torch.float32, device=h.device)
        logits0 = torch.empty((n, V), dtype=torch.float32, device=h.device) if c["has_head0"] else None
        caps = [x.__dlpack__(stream=s.dlpack) for x in (h, ct, logits)]
        l0cap = None if logits0 is None else logits0.__dlpack__(stream=s.dlpack)
        dec._enter()
        try:
            _ext.score_device(dec._h, n, dev, caps[0], caps[1], caps[2], l0cap, s.handle)
        finally:
            dec._lock.release()
        s.keep(torch, hidden, codes)
    return logits, logits0
