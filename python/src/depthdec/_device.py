"""CUDA arrays in Decoder.generate / score (issue 15 point 2, device side; docs/device_api.md).

Inputs that live on a CUDA device (DLPack device type 2, or 13 managed) are used where they are: their pointers come
from __dlpack__(stream=...) — the DLPack stream protocol, so the producer orders its pending work before the
consumer's stream — and the library's dd_decode_device / dd_score_device enqueue the frame on that stream with the
GIL released. Nothing is synchronised and nothing goes through the host, so a loop of frames can be captured
(torch.cuda.graph, or CuPy's Stream.begin_capture / end_capture).

Two array libraries are supported, each through a small adapter (_Torch, _CuPy) that knows how to check where an
array lives, convert dtypes on the device, make key arrays and outputs, and pick and enter the stream; generate and
score below are written once against that interface. The library is that of `hidden` (told by the module of its
type, so neither library is imported for the other's arrays); torch in -> torch out, CuPy in -> CuPy out. Every other
CUDA array of the call (c0, codes, per-row seed/frame) must come from the same library: a CUDA array of the other
library is refused naming both (converting it is one zero-copy call, torch.from_dlpack / cupy.from_dlpack, and the
caller then decides which stream and which allocator own it). CUDA arrays of other libraries (JAX ...) are refused
naming the supported ones.

What the host path checks on the values (finite hidden, codes in [0, V)) is checked on the device here, and a
failure is reported by the next synchronising call: Decoder.sync(), or the next generate/score with host arrays. The
outputs of a failed frame are left as the library's empty() made them. Module imported only when a CUDA array is
given; torch or cupy is imported only then, and only the one of `hidden` (whoever made the array has imported it).
"""

import numpy as np

from . import ArgumentError, Error, Status, _ext, _u64_scalar

_CUDA = (2, 13)  # kDLCUDA, kDLCUDAManaged
_TO_HOST = {"torch": "torch: .cpu()", "cupy": "cupy: .get()"}


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


def _lib(x):
    """The top-level module of x's type ("torch", "cupy", "jaxlib" ...): no import needed to tell."""
    return type(x).__module__.split(".")[0]


def _adapter(x, name, backend):
    """The adapter of hidden's library (a CUDA array), after the decoder's backend is checked."""
    kind = int(x.__dlpack_device__()[0])
    where = "the array is on device 'cuda%s' (DLPack device type %d)" % ("_managed" if kind == 13 else "", kind)
    lib = _lib(x)
    if backend != "cuda":
        raise ArgumentError("%s: %s and this decoder's backend is %s: move it to the host first (%s) "
                            "or use Decoder(model, backend='cuda')" % (name, where, backend,
                                                                        _TO_HOST.get(lib, "torch: .cpu()")))
    if lib == "torch":
        return _Torch()
    if lib == "cupy":
        return _CuPy()
    raise ArgumentError("%s: %s, from %s: depthdec's device path takes torch tensors and CuPy arrays (and makes its "
                        "CUDA outputs with them): convert it without a copy (torch.from_dlpack(x) or "
                        "cupy.from_dlpack(x))" % (name, where, lib))


# ---- the adapters: what differs between array libraries ---------------------------------------------------------


class _Torch:
    """torch tensors. The behaviour is that of the torch-only device path before CuPy was added, unchanged."""

    lib = "torch"
    noun = "CUDA torch tensor"  # "want a CUDA torch tensor or None"
    keys_noun = "CUDA tensor"  # "give a CUDA tensor [N] or a scalar"

    def __init__(self):
        import torch  # already imported by whoever made hidden

        self.t = torch

    def owns(self, x):
        return self.t.is_tensor(x)

    def where(self, x):
        return str(x.device)

    def on(self, x, dev):
        return x.device.type == "cuda" and x.device.index == dev

    def detach(self, x):
        return x.detach()

    def kind(self, dt):
        """numpy's dtype.kind of a torch dtype (for the library's dtype/shape rule, dd_input_check)."""
        torch = self.t
        if dt == torch.bool:
            return "b"
        if dt.is_complex:
            return "c"
        if dt.is_floating_point:
            return "f"
        return "u" if dt in (torch.uint8, getattr(torch, "uint16", None), getattr(torch, "uint32", None),
                             getattr(torch, "uint64", None)) else "i"

    def float32(self, t):
        return t.to(self.t.float32).contiguous()  # finiteness: checked on the device

    def int32(self, t, V):
        if t.dtype != self.t.int32:  # int64: out-of-range values stay out of range (reported as -1 or V)
            t = t.clamp(-1, V).to(self.t.int32)
        return t.contiguous()

    def keys(self, t):
        """an integer tensor [n] as 64-bit keys: int64/uint64 bits as they are, narrower integers widened"""
        if t.dtype.itemsize != 8:
            t = t.to(self.t.int64)
        return t.contiguous()

    def scalar_keys(self, v, n, dev, consecutive):
        """int64 [n] holding the bits of the uint64 key v (seed: every row) or v + r (frame: row r), made on the
        device (hence fixed in a captured graph)"""
        torch = self.t
        device = torch.device("cuda", dev)
        v = v - 2**64 if v >= 2**63 else v  # the same 64 bits as int64
        if consecutive:
            return torch.arange(n, dtype=torch.int64, device=device).add_(v)  # wraps modulo 2**64
        return torch.full((n,), v, dtype=torch.int64, device=device)

    def empty(self, shape, dtype, dev):
        return self.t.empty(shape, dtype=getattr(self.t, dtype), device=self.t.device("cuda", dev))

    def stream(self, dev, stream):
        return _TorchStream(self.t, dev, stream)


class _CallStream:
    """A call's stream: entering it enters self._ctx (the device, then the stream) in order, leaving leaves them in
    reverse; .handle is the cudaStream_t and .dlpack the value __dlpack__(stream=) takes."""

    def __enter__(self):
        for c in self._ctx:
            c.__enter__()
        return self

    def __exit__(self, *exc):
        for c in reversed(self._ctx):
            c.__exit__(*exc)


class _TorchStream(_CallStream):
    """The stream the call runs on (the caller's `stream`, else torch's current stream of the device), made current
    for the torch ops of the call; .handle is the cudaStream_t, .dlpack the value __dlpack__(stream=) takes.

    A `stream` other than the current one first waits for the current one: what the DLPack protocol has a producer do
    for its consumer (the caller's tensors are torch's current stream's work), done once here because the call's
    own torch ops (conversions, outputs) then run on `stream` and its __dlpack__ calls see it current. The caller's
    tensors are then marked used on `stream` (record_stream), so that torch does not reuse their memory early."""

    def __init__(self, torch, dev, stream):
        self._torch = torch
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

    def keep(self, *xs):
        """the caller's tensors xs (None and non-tensors skipped) stay allocated until `stream` has read them"""
        if self._other:
            for x in xs:
                if self._torch.is_tensor(x):
                    x.record_stream(self._s)


class _CuPy:
    """cupy.ndarray. dtypes are numpy dtypes; the ops run on the stream made current by _CuPyStream, so CuPy's memory
    pool (which keeps one free list per stream) only hands the call's temporaries and outputs to later work of that
    stream."""

    lib = "cupy"
    noun = "cupy.ndarray"
    keys_noun = "cupy.ndarray"

    def __init__(self):
        import cupy  # already imported by whoever made hidden

        self.cp = cupy

    def owns(self, x):
        return isinstance(x, self.cp.ndarray)

    def where(self, x):
        return "cuda:%d" % x.device.id

    def on(self, x, dev):
        return x.device.id == dev

    def detach(self, x):
        return x

    def kind(self, dt):
        return dt.kind

    def float32(self, t):
        return self.cp.ascontiguousarray(t, dtype=self.cp.float32)  # finiteness: checked on the device

    def int32(self, t, V):
        if t.dtype != self.cp.int32:  # int64: out-of-range values stay out of range (reported as -1 or V)
            t = self.cp.clip(t, -1, V).astype(self.cp.int32)
        return self.cp.ascontiguousarray(t)

    def keys(self, t):
        """an integer array [n] as 64-bit keys: int64/uint64 bits as they are, narrower integers widened (signed to
        int64, unsigned to uint64: values kept)"""
        if t.dtype.itemsize != 8:
            t = t.astype(self.cp.int64 if t.dtype.kind == "i" else self.cp.uint64)
        return self.cp.ascontiguousarray(t)

    def scalar_keys(self, v, n, dev, consecutive):
        """uint64 [n]: v on every row (seed) or v + r (frame: row r, modulo 2**64), made on the device (hence fixed
        in a captured graph)"""
        cp = self.cp
        if consecutive:
            out = cp.arange(n, dtype=cp.uint64)
            out += np.uint64(v)  # unsigned: wraps modulo 2**64
            return out
        return cp.full((n,), np.uint64(v), dtype=cp.uint64)

    def empty(self, shape, dtype, dev):
        return self.cp.empty(shape, dtype=dtype)  # on the current device, dev (_CuPyStream entered it)

    def stream(self, dev, stream):
        return _CuPyStream(self.cp, dev, stream)


class _StreamHandle:
    """A raw cudaStream_t through the CUDA stream protocol (for cupy.cuda.Stream.from_external)."""

    def __init__(self, ptr):
        self.ptr = ptr

    def __cuda_stream__(self):
        return (0, self.ptr)


class _CuPyStream(_CallStream):
    """The stream the call runs on: the caller's `stream` (a cupy.cuda.Stream or ExternalStream, or a cudaStream_t as
    an int), else CuPy's current stream of the device; the device and the stream are made current for the CuPy ops of
    the call. As for torch, a `stream` other than the current one first waits for the current one (an event), so
    the caller's arrays (the current stream's work) are ready on it, and __dlpack__ then sees it current.

    CuPy has no record_stream: the caller's arrays must stay alive until `stream` has run the frame when `stream` is
    not the stream they were allocated on (docs/device_api.md). keep() has nothing to do."""

    def __init__(self, cupy, dev, stream):
        with cupy.cuda.Device(dev):
            cur = cupy.cuda.get_current_stream(dev)
            if stream is None:
                s = cur
            elif isinstance(stream, (cupy.cuda.Stream, cupy.cuda.ExternalStream)):
                s = stream
            elif isinstance(stream, int) and not isinstance(stream, bool):
                if hasattr(cupy.cuda.Stream, "from_external"):  # CuPy >= 14: on the current device, dev
                    s = cupy.cuda.Stream.from_external(_StreamHandle(stream))
                else:
                    s = cupy.cuda.ExternalStream(stream, dev)
            else:
                raise ArgumentError("stream: want a cupy.cuda.Stream (or ExternalStream) or a cudaStream_t as an "
                                    "int, got %s.%s" % (type(stream).__module__, type(stream).__qualname__))
        if s.device_id not in (-1, dev):  # -1: Stream.null / Stream.ptds, on whichever device is current
            raise ArgumentError("stream: on cuda:%d, the arrays are on cuda:%d" % (s.device_id, dev))
        self._other = s.ptr != cur.ptr
        if self._other:
            s.wait_event(cur.record())
        self._ctx = (cupy.cuda.Device(dev), s)
        self.handle = s.ptr
        self.dlpack = self.handle if self.handle else 1  # DLPack: 1 = the legacy default stream (0 is not allowed)

    def keep(self, *xs):
        pass


# ---- generate / score, once for every adapter --------------------------------------------------------------------


def _foreign(L, x, name):
    """An ArgumentError for x, an array of the call that hidden's library L does not own, or None when x is not a CUDA
    array of another library."""
    if cuda_device(x) is None:
        return None
    return ArgumentError("%s: a CUDA array from %s with %s hidden states: give every CUDA array of a call from one "
                         "library (%s.from_dlpack(x) converts it without a copy)" % (name, _lib(x), L.lib, L.lib))


def _on(L, x, name, dev):
    if not L.owns(x):
        e = _foreign(L, x, name)
        if e is not None:
            raise e
        raise ArgumentError("%s: with CUDA hidden states, want a %s or None, got %s" % (name, L.noun,
                                                                                       type(x).__name__))
    if not L.on(x, dev):
        raise ArgumentError("%s: on %s, want cuda:%d (the device of hidden)" % (name, L.where(x), dev))
    return L.detach(x)


def _checked(model, L, what, t, rows, label):
    """The library's dtype/shape rule (dd_input_check) on an array's dtype and shape (no values are read)."""
    try:
        _ext.input_check(model._h, what, L.kind(t.dtype), t.dtype.itemsize, tuple(t.shape), rows, label)
    except Error as e:
        raise ArgumentError(str(e), e.code) from None


def _hidden(model, L, x, dev):
    t = _on(L, x, "hidden", dev)
    _checked(model, L, 0, t, 0, "hidden")
    return L.float32(t)


def _codes(model, L, x, name, shape, dev, V):
    t = _on(L, x, name, dev)
    _checked(model, L, 1 if len(shape) == 1 else 2, t, shape[0], name)
    return L.int32(t, V)


def _keys(L, x, name, n, dev, consecutive):
    """[n] 64-bit keys on the device: a scalar (seed: every row; frame: row r at frame + r, made on the device, hence
    fixed in a captured graph) or a CUDA integer array [n] of hidden's library (int64/uint64 bits as they are,
    narrower integers widened)."""
    if L.owns(x):
        t = _on(L, x, name, dev)
        if L.kind(t.dtype) not in "iu":
            raise ArgumentError("%s: dtype %s, want integers in [0, 2**64)" % (name, t.dtype))
        if tuple(t.shape) != (n,):
            raise ArgumentError("%s: shape %s, want a scalar or [N] with N = %d rows of hidden" %
                                (name, tuple(t.shape), n))
        return L.keys(t)
    e = _foreign(L, x, name)
    if e is not None:
        raise e
    if hasattr(x, "__dlpack__") or isinstance(x, (np.ndarray, list, tuple)):
        raise ArgumentError("%s: a host array with CUDA hidden states: give a %s [N] or a scalar" %
                            (name, L.keys_noun))
    return L.scalar_keys(_u64_scalar(x, name), n, dev, consecutive)


def generate(dec, hidden, dev, c0, seed, frame, t, k, stream):
    L = _adapter(hidden, "hidden", dec.backend)
    c = dec._cfg
    with L.stream(dev, stream) as s:
        h = _hidden(dec.model, L, hidden, dev)
        n = h.shape[0]
        c0t = None if c0 is None else _codes(dec.model, L, c0, "c0", (n,), dev, c["codebook_size"])
        if c0t is None and not c["has_head0"]:
            raise Error("%s: the model has no head0, so c0 is required" % dec.model.source, Status.EUNSUPPORTED)
        seeds = _keys(L, seed, "seed", n, dev, consecutive=False)
        frames = _keys(L, frame, "frame", n, dev, consecutive=True)
        out = L.empty((n, c["levels"]), "int32", dev)
        caps = [x.__dlpack__(stream=s.dlpack) for x in (h, seeds, frames, out)]
        c0cap = None if c0t is None else c0t.__dlpack__(stream=s.dlpack)
        dec._enter()
        try:
            _ext.decode_device(dec._h, n, dev, caps[0], c0cap, caps[1], caps[2], t, k, caps[3], s.handle)
        finally:
            dec._lock.release()
        s.keep(hidden, c0, seed, frame)
    return out


def score(dec, hidden, dev, codes, stream):
    L = _adapter(hidden, "hidden", dec.backend)
    c = dec._cfg
    Q, V = c["levels"], c["codebook_size"]
    with L.stream(dev, stream) as s:
        h = _hidden(dec.model, L, hidden, dev)
        n = h.shape[0]
        ct = _codes(dec.model, L, codes, "codes", (n, Q), dev, V)
        logits = L.empty((n, Q - 1, V), "float32", dev)
        logits0 = L.empty((n, V), "float32", dev) if c["has_head0"] else None
        caps = [x.__dlpack__(stream=s.dlpack) for x in (h, ct, logits)]
        l0cap = None if logits0 is None else logits0.__dlpack__(stream=s.dlpack)
        dec._enter()
        try:
            _ext.score_device(dec._h, n, dev, caps[0], caps[1], caps[2], l0cap, s.handle)
        finally:
            dec._lock.release()
        s.keep(hidden, codes)
    return logits, logits0
