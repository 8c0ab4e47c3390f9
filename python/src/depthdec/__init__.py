"""depthdec — exact, fast inference for the depth decoder of RVQ speech LMs (numpy or torch tensors in, the same
library out; any host array with __dlpack__ is read; CUDA torch tensors and CuPy arrays stay on the device, on the
caller's stream).

A thin layer over the C library (include/depthdec.h), with the CLI's semantics::

    import numpy as np, depthdec
    model = depthdec.Model("model.safetensors")        # a native .safetensors file or an HF CSM directory
    dec = depthdec.Decoder(model, backend="auto")       # one per thread
    hidden = np.zeros((10, model.config["input_dim"]), np.float32)
    codes = dec.generate(hidden, seed=7, frame=0)       # int32 [10, Q]; row n is frame 0 + n of stream seed 7
    logits, logits0 = dec.score(hidden, codes)          # float32 [10, Q-1, V], [10, V] (None without head0)

Threads: a Model is immutable and may be shared by any number of threads and decoders. A Decoder holds per-call
state (KV cache, scratch) and must be used by one thread at a time — give each thread its own; a Decoder that is
entered from a second thread while busy raises Error instead of corrupting its state. The GIL is released while the
library decodes, loads or builds a model, so threads with their own decoders decode in parallel.

Errors: everything the library reports, and every input this layer refuses, is raised as depthdec.Error (a
RuntimeError) carrying the message and the library's status code (.code, a Status; .status, its name). Input
errors are ArgumentError, which is also a ValueError.
"""

import enum
import math
import operator
import os
import threading

import numpy as np

from . import _ext

__all__ = ["Model", "Decoder", "Error", "ArgumentError", "Status", "backend_available", "available_backends",
           "__version__"]

__version__ = _ext.VERSION


class Status(enum.IntEnum):
    """dd_status codes of include/depthdec.h."""

    OK = _ext.OK
    EINVAL = _ext.EINVAL  # a bad argument
    EIO = _ext.EIO  # a file could not be opened, mapped or read
    EFORMAT = _ext.EFORMAT  # a malformed file
    EMODEL = _ext.EMODEL  # a well-formed file that is not a usable model
    ENOMEM = _ext.ENOMEM  # an allocation failed
    ENUMERIC = _ext.ENUMERIC  # non-finite input, or a level whose logits have no finite value
    EUNSUPPORTED = _ext.EUNSUPPORTED  # a valid request this build cannot serve (backend not built, no head0)


class Error(RuntimeError):
    """A depthdec error: str(e) is the library's one-line message (naming the file, tensor, argument or row),
    e.code the Status, e.status its name ("invalid argument", ...)."""

    def __init__(self, message, code=Status.EINVAL):
        super().__init__(message)
        self.message = message
        try:
            self.code = Status(code)
        except ValueError:
            self.code = int(code)

    @property
    def status(self):
        return _ext.status_name(int(self.code))

    def __str__(self):
        return self.message


class ArgumentError(Error, ValueError):
    """An input refused before any work: wrong shape or dtype, a non-finite value, a code out of range, a bad
    sampling parameter."""


_ext.set_error_type(Error)

# "auto", then every backend the library knows (its table, slowest first), built in or not.
_BACKENDS = ("auto",) + _ext.backends()


def backend_available(name):
    """True when this build has backend `name` (one of _BACKENDS: "ref", "cpu", "cuda"; "auto" always) and it can run
    here."""
    return _ext.backend_available(name)


def available_backends():
    """The concrete backends ("ref", "cpu", "cuda") that this build can run on this machine."""
    return [b for b in _BACKENDS[1:] if _ext.backend_available(b)]


# ---- models ------------------------------------------------------------------------------------------------------


class Model:
    """Weights and config, loaded once; immutable, shareable between threads and decoders.

    Model(path): a native .safetensors file (config in its metadata or a config.json beside it) or an HF CSM
    directory (config.json + model.safetensors or a sharded index). Either the whole model loads or Error is
    raised (the message names the file and the problem).
    """

    def __init__(self, path):
        if not isinstance(path, (str, bytes, os.PathLike)):
            raise ArgumentError("Model: path must be str, bytes or os.PathLike, not %s" % type(path).__name__)
        self._init(_ext.model_load(path))

    @classmethod
    def synthetic(cls, kind, weights="bf16", seed=0):
        """One of the embedded synthetic models: kind "gpt" (the seed's dims), "csm" (CSM-1B depth dims),
        "qwen3tts" (Qwen3-TTS's code predictor dims, no head0), "moshi" (Kyutai Moshi's depformer dims: per-position
        weights, needs text=), "tiny-gpt", "tiny-wide", "tiny-llama", "tiny-qwen3" or "tiny-moshi" (small models for
        tests); weights "f32", "f16", "bf16", "q8" or "q4" (group 64). Deterministic in `seed`; the weights are
        synthetic (not a trained model)."""
        if not isinstance(kind, str) or not isinstance(weights, str):
            raise ArgumentError("Model.synthetic: kind and weights must be str")
        seed = _u64_scalar(seed, "seed")
        m = cls.__new__(cls)
        m._init(_ext.model_synthetic(kind, weights, seed))
        return m

    @classmethod
    def from_tensors(cls, config, tensors):
        """A model from named tensors in memory, with no file (dd_model_from_tensors).

        config: the model's config as a dict or JSON text — an HF CSM config (``model.config.to_dict()`` of a
          transformers CsmForConditionalGeneration: "model_type": "csm") with HF CSM tensor names, or a native
          depthdec config ("format": "depthdec") with native names.
        tensors: a mapping name -> array (a ``state_dict()`` works: tensors the model does not use, such as the
          backbone's, are ignored) or an iterable of (name, array) pairs. Arrays: torch tensors (float32, float16,
          bfloat16; any device: copied to the host), numpy arrays or objects with ``__dlpack__`` (float32,
          float16; float64 is rounded to float32), contiguous or not.
        The values are copied into the model: the arrays may be changed or freed afterwards. Errors name the
        tensor (a missing one, a wrong shape or dtype)."""
        import json

        if isinstance(config, dict):
            config = json.dumps(config)
        if not isinstance(config, str):
            raise ArgumentError("Model.from_tensors: config must be a dict or JSON text, not %s" % type(config).__name__)
        items = tensors.items() if hasattr(tensors, "items") else tensors
        entries = []
        try:
            for name, x in items:
                if not isinstance(name, str):
                    raise ArgumentError("Model.from_tensors: tensor name %r is not a str" % (name,))
                entries.append((name,) + _weight_buffer(name, x))
        except TypeError as e:
            raise ArgumentError("Model.from_tensors: tensors must be a mapping or (name, array) pairs: %s" % e) from None
        m = cls.__new__(cls)
        m._init(_ext.model_from_tensors(config, entries))
        return m

    def _init(self, handle):
        self._h = handle
        cfg = _ext.model_config(handle)
        # norm_eps is a float32 in the library: show its shortest float32 spelling (1e-05, not 9.99999974e-06)
        cfg["norm_eps"] = float(str(np.float32(cfg["norm_eps"])))
        sc = cfg["rope"] and cfg["rope"]["scaling"]
        if sc and float(sc["original_max_position_embeddings"]).is_integer():
            sc["original_max_position_embeddings"] = int(sc["original_max_position_embeddings"])
        self._config = cfg
        self.tensor_count, self.source, self.weight_bytes_per_frame, self.weight_bytes = _ext.model_info(handle)

    @property
    def config(self):
        """The model's configuration as a dict (a copy): block ("gpt"/"llama"), levels (Q), codebook_size (V),
        input_dim, dim, layers, heads, kv_heads, head_dim, ffn_dim, norm_eps, rope (None or {"theta", "scaling":
        None or {"rope_type": "llama3", "factor", "low_freq_factor", "high_freq_factor",
        "original_max_position_embeddings"}}), quantization (None or {"bits", "group_size", "mode": "affine"}),
        weight_type ("f32", "f16", "bf16", "q8", "q4"), has_head0, has_in_proj, has_pos, embed_in_input_space,
        has_qk_norm, per_position, text_vocab (Moshi: per-position weights, text ids in [0, text_vocab]; 0 = none)."""
        import copy

        return copy.deepcopy(self._config)

    def next_embedding(self, codes):
        """Qwen3 code predictors: the talker's next input embedding for frames of codes [N, Q] (int32/int64 in
        [0, V), c0 included): the talker's codec table at c0 plus codec_embedding.{j-1} at c_j for j = 1..Q-1,
        unprojected, float32 [N, input_dim] (torch when `codes` is a torch tensor). Needs the model loaded from its
        HF directory; raises depthdec.Error (EUNSUPPORTED) for other models."""
        c = self._config
        a = _host_array(codes, "codes")
        ca = _codes(self, a, "codes", (a.shape[0] if a.ndim else 0, c["levels"]), c["codebook_size"])
        out = np.empty((ca.shape[0], c["input_dim"]), dtype=np.float32)
        _ext.next_embedding(self._h, ca.shape[0], ca, out)
        return _like(codes, out)

    def __repr__(self):
        c = self._config
        return "<depthdec.Model %r: %s, Q %d, V %d, input_dim %d, dim %d, %d layers, %s weights>" % (
            self.source, c["block"], c["levels"], c["codebook_size"], c["input_dim"], c["dim"], c["layers"],
            c["weight_type"])


def _weight_buffer(name, x):
    """(dtype name, shape, C-contiguous host buffer) of one weight for _ext.model_from_tensors."""
    if _is_torch(x):
        import torch

        t = x.detach()
        kinds = {torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16", torch.float64: "f32"}
        if t.dtype not in kinds:
            raise ArgumentError("tensors: tensor '%s': dtype %s (want float32, float16 or bfloat16)" % (name, t.dtype))
        if t.dtype == torch.float64:
            t = t.to(torch.float32)
        t = t.to("cpu").contiguous()
        if t.dtype == torch.bfloat16:  # numpy has no bfloat16: hand over the 2-byte words
            return "bf16", tuple(t.shape), t.view(torch.int16).numpy()
        return kinds[t.dtype], tuple(t.shape), t.numpy()
    a = _host_array(x, "tensor '%s'" % name)
    if a.dtype.name == "bfloat16":  # ml_dtypes' bfloat16
        return "bf16", a.shape, np.ascontiguousarray(a).view(np.uint16)
    if a.dtype == np.float64:
        a = a.astype(np.float32)
    if a.dtype not in (np.float32, np.float16):
        raise ArgumentError("tensors: tensor '%s': dtype %s (want float32, float16 or bfloat16)" % (name, a.dtype))
    return ("f32" if a.dtype == np.float32 else "f16"), a.shape, np.ascontiguousarray(a)


# ---- input validation --------------------------------------------------------------------------------------------


def _u64_scalar(v, name):
    if isinstance(v, (bool, np.bool_)):
        raise ArgumentError("%s: want an integer in [0, 2**64), got a bool" % name)
    try:
        v = operator.index(v)
    except TypeError:
        raise ArgumentError("%s: want an integer in [0, 2**64), got %s" % (name, type(v).__name__)) from None
    if not 0 <= v < 2**64:
        raise ArgumentError("%s %d: outside [0, 2**64)" % (name, v))
    return v


_DLPACK_DEVICES = {1: "cpu", 2: "cuda", 3: "cuda_host", 4: "opencl", 7: "vulkan", 8: "metal", 9: "vpi", 10: "rocm",
                   11: "rocm_host", 13: "cuda_managed", 14: "oneapi"}


def _is_torch(x):
    """x is a torch tensor (checked by its type's module: torch is not imported for anything else)."""
    return type(x).__module__.split(".")[0] == "torch" and hasattr(x, "__dlpack__")


def _host_array(x, name):
    """x as a numpy array without a copy where possible: numpy arrays as they are; torch tensors (detached;
    bfloat16 widened to float32, exactly) and other objects with __dlpack__ through DLPack; anything else through
    np.asarray. Arrays that live on a device other than the host are refused (this package takes host arrays)."""
    if isinstance(x, np.ndarray):
        return x
    dev = getattr(x, "__dlpack_device__", None)
    if dev is not None and hasattr(x, "__dlpack__"):
        try:
            kind = int(dev()[0])
        except Exception as e:  # a broken producer
            raise ArgumentError("%s: __dlpack_device__() failed: %s" % (name, e)) from None
        if kind != 1:
            raise ArgumentError("%s: the array is on device '%s' (DLPack device type %d); depthdec's Python package "
                                "reads host (CPU) arrays here: move it first (torch: .cpu()), or give generate/score all their "
                                "arrays on one CUDA device (torch tensors or CuPy arrays, cuda Decoder)"
                                % (name, _DLPACK_DEVICES.get(kind, "?"), kind))
        if _is_torch(x):
            import torch  # already imported by whoever made x

            x = x.detach()
            if x.dtype == torch.bfloat16:
                x = x.to(torch.float32)  # numpy has no bfloat16; the widening is exact
            if x.is_conj() or x.is_neg():
                x = x.resolve_conj().resolve_neg()
        try:
            return np.from_dlpack(x)
        except (BufferError, TypeError, ValueError, RuntimeError) as e:
            raise ArgumentError("%s: cannot read it through DLPack: %s" % (name, e)) from None
    try:
        return np.asarray(x)
    except (ValueError, TypeError, RuntimeError) as e:
        raise ArgumentError("%s: not an array: %s" % (name, e)) from None


def _no_device_text(model, text):
    """The device path (CUDA arrays) has no text argument (dd_decode_device): a text array is refused, for a model
    with text tokens (Moshi: pass host arrays, the cuda backend runs it from there) as for one without."""
    if text is None:
        return
    if model.config["text_vocab"]:
        raise Error("text: the device path (CUDA arrays) cannot pass text tokens: give %s host arrays"
                    % model.source, Status.EUNSUPPORTED)
    raise ArgumentError("text: %s takes no text tokens (text given)" % model.source)


def _device_of(hidden, stream):
    """The CUDA device of hidden when it is a CUDA array (the device path, _device.py), else None; `stream` is for
    that path only."""
    if isinstance(hidden, np.ndarray) or not hasattr(hidden, "__dlpack__"):
        dev = None
    else:
        from . import _device

        dev = _device.cuda_device(hidden)
    if dev is None and stream is not None:
        raise ArgumentError("stream: only for CUDA arrays (hidden is on the host)")
    return dev


def _like(ref, *outs):
    """The results in ref's library: torch tensors (sharing the numpy memory) when ref is a torch tensor, numpy
    arrays otherwise. None stays None."""
    if not _is_torch(ref):
        return outs if len(outs) > 1 else outs[0]
    import torch

    conv = tuple(None if o is None else torch.from_numpy(o) for o in outs)
    return conv if len(conv) > 1 else conv[0]


def _check(model, what, a, rows, label):
    """The library's dtype/shape rule for inputs (dd_input_check), the one the CLI applies to its .npy files."""
    try:
        _ext.input_check(model._h, what, a.dtype.kind, a.dtype.itemsize, tuple(a.shape), rows, label)
    except Error as e:
        raise ArgumentError(str(e), e.code) from None


def _hidden(model, x):
    """float32 C-contiguous [N, input_dim], N >= 1: float16/float64 are converted; a value that is not finite, or
    does not fit float32, is refused (naming row and element)."""
    a = _host_array(x, "hidden")
    _check(model, 0, a, 0, "hidden")
    if a.dtype.kind == "f":
        bad = ~np.isfinite(a)
        if bad.any():
            r, i = np.argwhere(bad)[0]
            raise ArgumentError("hidden row %d, element %d: non-finite value %r" % (r, i, float(a[r, i])),
                                Status.ENUMERIC)
    with np.errstate(over="ignore", invalid="ignore"):
        h = np.ascontiguousarray(a, dtype=np.float32)
    if a.dtype.itemsize > 4 or a.dtype.kind != "f":
        bad = ~np.isfinite(h)
        if bad.any():
            r, i = np.argwhere(bad)[0]
            raise ArgumentError("hidden row %d, element %d: value %r does not fit float32" % (r, i, a[r, i].item()),
                                Status.ENUMERIC)
    return h


def _text(model, x, n):
    """Moshi's text tokens: None for a model without text (a given array is refused), else int32 [N] (int32/int64
    given) in [0, text_vocab]; required there."""
    tv = model._config["text_vocab"]
    if x is None:
        if tv:
            raise ArgumentError("%s: text tokens required: the model (Moshi's depformer) conditions each frame on its "
                                "text token (text=[N] ints)" % model.source)
        return None
    a = _host_array(x, "text")
    _check(model, 3, a, n, "text")
    bad = (a < 0) | (a > tv)
    if bad.any():
        r = int(np.argwhere(bad)[0][0])
        raise ArgumentError("text row %d: token %d outside [0, %d]" % (r, a[r].item(), tv))
    return np.ascontiguousarray(a, dtype=np.int32)


def _codes(model, x, name, shape, V):
    """int32 C-contiguous codes of the given shape (int32 or int64 given), every value in [0, V)."""
    a = _host_array(x, name)
    _check(model, 1 if len(shape) == 1 else 2, a, shape[0], name)
    bad = (a < 0) | (a >= V)
    if bad.any():
        idx = np.argwhere(bad)[0]
        where = "row %d" % idx[0] if len(shape) == 1 else "row %d, level %d" % (idx[0], idx[1])
        raise ArgumentError("%s %s: code %d outside [0, %d)" % (name, where, a[tuple(idx)].item(), V))
    return np.ascontiguousarray(a, dtype=np.int32)


def _keys(x, name, n, consecutive):
    """uint64 [n] noise keys. A scalar is one value for every row (seed) or, for frames, the first frame F with
    row r at F + r (mod 2**64, as the CLI's uint64 arithmetic); an array gives one value per row."""
    if not isinstance(x, np.ndarray) and hasattr(x, "__dlpack__"):
        x = _host_array(x, name)
    if np.ndim(x) == 0:
        v = _u64_scalar(x, name)
        if consecutive:
            out = np.arange(n, dtype=np.uint64)
            out += np.uint64(v)  # wraps modulo 2**64
            return out
        return np.full(n, v, dtype=np.uint64)
    a = _host_array(x, name)
    if a.dtype.kind not in "iu":
        raise ArgumentError("%s: dtype %s, want integers in [0, 2**64)" % (name, a.dtype))
    if a.shape != (n,):
        raise ArgumentError("%s: shape %s, want a scalar or [N] with N = %d rows of hidden" % (name, tuple(a.shape), n))
    if a.dtype.kind == "i" and (a < 0).any():
        r = int(np.argmax(a < 0))
        raise ArgumentError("%s row %d: %d is negative" % (name, r, a[r]))
    return np.ascontiguousarray(a, dtype=np.uint64)


def _sampling(temperature, top_k, greedy):
    if not isinstance(greedy, (bool, np.bool_)):
        raise ArgumentError("greedy: want a bool, got %s" % type(greedy).__name__)
    if isinstance(temperature, (bool, np.bool_)):
        raise ArgumentError("temperature: want a number, got a bool")
    try:
        t = float(temperature)
    except (TypeError, ValueError):
        raise ArgumentError("temperature: want a number, got %s" % type(temperature).__name__) from None
    if not math.isfinite(t) or t < 0:
        raise ArgumentError("temperature %r: must be finite and >= 0" % t)
    with np.errstate(over="ignore"):
        t32 = np.float32(t)
    if not math.isfinite(t32):
        raise ArgumentError("temperature %r: does not fit float32" % t)
    if isinstance(top_k, (bool, np.bool_)):
        raise ArgumentError("top_k: want an integer, got a bool")
    try:
        k = operator.index(top_k)
    except TypeError:
        raise ArgumentError("top_k: want an integer, got %s" % type(top_k).__name__) from None
    if k < 0:
        raise ArgumentError("top_k %d: must be >= 0" % k)
    # K >= V means no top-k, so clamping to the C int range changes nothing
    return (0.0 if greedy else t), min(k, 2**31 - 1)


# ---- decoders ----------------------------------------------------------------------------------------------------


class Decoder:
    """Per-thread decoding state on a Model (which it keeps alive).

    Decoder(model, backend="auto", max_batch=64, threads=0): backend "auto" (the fastest available: cuda if built
    and a GPU is present, else cpu, else ref) or a name of the library's backend table ("ref", "cpu", "cuda"); max_batch rows per library call (1..4096; longer inputs are
    split); threads for the cpu backend (0 = one per core). `.backend` is the backend actually in use.

    Not thread-safe: use one Decoder per thread (a Model may be shared). Free it early with close() or `with`.
    """

    def __init__(self, model, backend="auto", max_batch=64, threads=0):
        if not isinstance(model, Model):
            raise ArgumentError("Decoder: model must be a depthdec.Model, not %s" % type(model).__name__)
        if not isinstance(backend, str):
            raise ArgumentError("backend: want one of %s, got %r" % (", ".join(_BACKENDS), backend))
        for name, v in (("max_batch", max_batch), ("threads", threads)):
            if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
                raise ArgumentError("%s: want an integer, got %r" % (name, v))
            if not -2**31 <= v < 2**31:
                raise ArgumentError("%s %d: out of range" % (name, v))
        self.model = model
        self._cfg = model._config
        self._h = _ext.decoder_create(model._h, backend, int(max_batch), int(threads))
        self.backend, self.max_batch = _ext.decoder_info(self._h)
        self._lock = threading.Lock()

    def _enter(self):
        if not self._lock.acquire(blocking=False):
            raise Error("Decoder is in use by another thread: give each thread its own Decoder", Status.EINVAL)

    def generate(self, hidden, c0=None, seed=0, frame=0, temperature=0.9, top_k=50, greedy=False, text=None,
                 stream=None):
        """Codes c0..c(Q-1) of N frames: int32 array [N, Q].

        Arrays: numpy arrays, torch CPU tensors, or any host array with __dlpack__ (torch is imported only when a
        torch tensor is given). The result is a torch tensor when `hidden` is one (torch in, torch out), else a
        numpy array; nothing is written anywhere on a failed call.
        CUDA torch tensors and CuPy arrays (on a cuda Decoder) stay on the device: the frame is enqueued on
        `stream` (torch: a torch.cuda.Stream; CuPy: a cupy.cuda.Stream or ExternalStream; or a cudaStream_t as an
        int; default the current stream of hidden's library) with no synchronisation, and the result is a CUDA array
        of hidden's library (torch in, torch out; CuPy in, CuPy out); c0 and per-row seed/frame must then be CUDA
        arrays of the same library and device (scalar seed/frame are made on the device). Values (finite hidden, c0
        in range) are checked on the device and a failure is raised by the next sync() (or host-array call), not by
        this call. Capturable (torch.cuda.graph, CuPy's Stream.begin_capture) after one eager call of the same batch
        size (temperature and top_k are fixed in the graph). CuPy with a `stream` other than the current one: keep
        the arrays you pass alive until that stream has run the frame (docs/device_api.md).
        hidden: [N, input_dim] float32 (float16/bfloat16/float64 converted), N >= 1; rows are consecutive frames of one
          stream, as in the CLI: row n uses `seed` and frame `frame + n`. Per-row keys: pass `seed` and/or `frame`
          as [N] integer arrays (then row n uses seed[n] / frame[n]).
        c0: None (sample c0 from the model's level-0 head; needs head0) or [N] int32/int64 codes in [0, V)
          (Moshi: [0, V], V being its pad/initial id).
        temperature, top_k: sampling (SPEC §3; defaults 0.9 and 50, CSM's); temperature 0 or greedy=True = argmax.
        text: Moshi's depformer only (required there): [N] int32/int64, the frame's text token per row in
          [0, text_vocab]. Moshi samples c0 itself, from position 0.
        A frame's codes depend only on (model, hidden row, text, c0, seed, frame, temperature, top_k).
        """
        c = self._cfg
        dev = _device_of(hidden, stream)
        if dev is not None:
            from . import _device

            _no_device_text(self.model, text)
            t, k = _sampling(temperature, top_k, greedy)
            return _device.generate(self, hidden, dev, c0, seed, frame, t, k, stream)
        h = _hidden(self.model, hidden)
        n = h.shape[0]
        ta = _text(self.model, text, n)
        c0a = None if c0 is None else _codes(self.model, c0, "c0", (n,), c["codebook_size"] + int(c["per_position"]))
        if c0a is None and not c["has_head0"]:
            raise Error("%s: the model has no head0, so c0 is required" % self.model.source, Status.EUNSUPPORTED)
        seeds = _keys(seed, "seed", n, consecutive=False)
        frames = _keys(frame, "frame", n, consecutive=True)
        t, k = _sampling(temperature, top_k, greedy)
        out = np.empty((n, c["levels"]), dtype=np.int32)
        self._enter()
        try:
            _ext.decode(self._h, n, h, c0a, seeds, frames, t, k, out, ta)
        finally:
            self._lock.release()
        return _like(hidden, out)

    def score(self, hidden, codes, text=None, stream=None):
        """Teacher-forced logits: (logits float32 [N, Q-1, V] of levels 1..Q-1 given codes 0..Q-2,
        logits0 float32 [N, V] = head0 · hidden, or None when the model has no head0); torch tensors when
        `hidden` is a torch tensor, CuPy arrays when it is a CuPy array, numpy arrays otherwise (see generate for
        the arrays accepted, CUDA arrays and `stream` included).

        hidden: [N, input_dim] as for generate; codes: [N, Q] int32/int64 in [0, V) (level Q-1 is not read but must
        be in range; Moshi: [0, V]); text: Moshi's text tokens as for generate. Moshi's logits0 are the logits of c0
        at position 0."""
        dev = _device_of(hidden, stream)
        if dev is not None:
            from . import _device

            _no_device_text(self.model, text)
            return _device.score(self, hidden, dev, codes, stream)
        c = self._cfg
        Q, V = c["levels"], c["codebook_size"]
        h = _hidden(self.model, hidden)
        n = h.shape[0]
        ta = _text(self.model, text, n)
        ca = _codes(self.model, codes, "codes", (n, Q), V + int(c["per_position"]))
        logits = np.empty((n, Q - 1, V), dtype=np.float32)
        logits0 = np.empty((n, V), dtype=np.float32) if c["has_head0"] else None
        self._enter()
        try:
            _ext.score(self._h, n, h, ca, logits, logits0, ta)
        finally:
            self._lock.release()
        return _like(hidden, logits, logits0)

    def sync(self):
        """Wait for this decoder's device work (CUDA arrays; graph replays included: cudaDeviceSynchronize) and raise
        the first error a frame found on the device since the last sync (then cleared). A no-op on ref/cpu decoders
        and on a cuda decoder that never took CUDA arrays."""
        self._enter()
        try:
            _ext.decoder_sync(self._h)
        finally:
            self._lock.release()

    def close(self):
        """Free the decoder's memory now (it is freed anyway when garbage-collected). Idempotent."""
        self._enter()
        try:
            _ext.decoder_close(self._h)
        finally:
            self._lock.release()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        return "<depthdec.Decoder backend %s, max_batch %d, on %r>" % (self.backend, self.max_batch,
                                                                       self.model.source)
