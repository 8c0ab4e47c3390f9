"""depthdec.hf — depthdec as the depth decoder of a transformers ``CsmForConditionalGeneration`` (transformers >= 5).

The three lines a user adds::

    import depthdec.hf
    depthdec.hf.accelerate(model)         # model: a CsmForConditionalGeneration, loaded however you load it
    codes = model.generate(...)           # the model's own generate; its depth decoder now runs on depthdec

``depthdec.hf.restore(model)`` (or ``handle.restore()``) puts the stock depth decoder back.

What changes, and only that: transformers' CSM generation loop (``CsmGenerationMixin._sample``) calls
``self.depth_decoder.generate(input_ids=[[0, c0], ...], backbone_last_hidden_state=h)`` once per backbone step to
get the frame's codes c1..c(Q-1). ``accelerate`` sets an instance attribute ``generate`` on ``model.depth_decoder``
that answers that call with depthdec (c0 given, the backbone's hidden state as input) and returns what the stock
call returns (``[B, 1 + Q]``: the placeholder, c0, c1..c(Q-1)); and it wraps ``model.generate`` (again an instance
attribute) to count backbone steps. The backbone, the sampling of c0, stopping criteria and everything else stay
transformers'. The weights are taken from the live model in memory when ``accelerate`` is called
(``Model.from_tensors`` on its state dict: the depth decoder, ``lm_head`` and the audio code table, copied into
depthdec): change the model's weights afterwards and call ``accelerate`` again (after ``restore``).

Sampling. With ``model.depth_decoder.generation_config.do_sample`` False (transformers' default for the depth
decoder; ``depth_decoder_do_sample=False`` in ``generate``) the codes are the argmax of every level, as stock
transformers: greedy generation gives the same codes as the stock model up to floating-point ties. With
``do_sample`` True, levels 1..Q-1 are sampled by SPEC §3 (depthdec's stateless Philox/Gumbel rule, not torch's
RNG) with the depth decoder's ``temperature`` and ``top_k``, and these noise keys: batch row b is stream
``seed + b`` (mod 2**64) and the frame index is ``frame + s`` where s counts the backbone steps of this
``generate`` call from 0. ``seed`` and ``frame`` are the ``accelerate`` arguments (default 0), overridden per call
by ``model.generate(..., depthdec_seed=S, depthdec_frame=F)``. So a sampled generation is reproducible from
(seed, frame) and the backbone's c0, whatever the batch or backend. Logits processors depthdec does not implement
(top_p < 1, min_p, typical_p < 1, repetition_penalty != 1, ...) on the depth decoder raise depthdec.Error instead
of being ignored.

Devices. The model may be on any device. When the decoder's backend is "cuda" (``backend="cuda"``, or "auto" on a
package built with ``DEPTHDEC_CUDA=1`` and a GPU present) and the backbone's hidden state is a CUDA tensor, each frame
stays on the device (``Decoder.generate`` on CUDA tensors, docs/device_api.md): the hidden state as it is (converted to
float32 on the device), c0 = ``input_ids[:, 1]``, and the keys above as CUDA int64 tensors holding the uint64 bits (row
b: seed + b, frame + s, both mod 2**64) — the host path's keys, so the host path's codes (bit for bit on the same
backend; ``backend="cpu"`` agrees up to rare floating-point near-ties between backends). The frame is enqueued on
torch's current stream with no host copy and no synchronisation; errors depthdec finds on the device (a non-finite
hidden state, a c0 out of range) are raised by the ``Decoder.sync()`` that ends every ``model.generate`` call that took
this path (so ``model.generate`` raises them, after the whole generation ran; until then the codes of a failed frame are
clamped into [0, V) so that the backbone's embedding lookup of the next step cannot fault on them). Otherwise (a cpu/ref
decoder, or a model on the host) the hidden state is copied to the host each frame and the codes back. The Python
package has the cuda backend only when built with ``DEPTHDEC_CUDA=1``; without it ``backend="auto"`` picks cpu and a
CUDA model takes the host path.
"""

from . import ArgumentError, Decoder, Error, Model, Status

__all__ = ["accelerate", "restore", "Accelerated"]

_ATTR = "_depthdec_hf"
_TABLE = "backbone_model.embed_tokens.embed_audio_tokens.weight"


def _i64(v):
    """The int64 with the bits of the uint64 v (what the device path's key tensors hold)."""
    return v - 2**64 if v >= 2**63 else v


def _depth_weights(model):
    """The tensors depthdec reads: the depth decoder's, lm_head (the level-0 head) and the audio code table."""
    return {k: v for k, v in model.state_dict().items()
            if k.startswith("depth_decoder.") or k == "lm_head.weight" or k == _TABLE}


def _check_processors(gc):
    """Refuse depth-decoder sampling settings depthdec would otherwise ignore."""
    bad = []
    if gc.top_p is not None and gc.top_p < 1.0:
        bad.append("top_p=%r" % gc.top_p)
    if getattr(gc, "min_p", None) is not None:
        bad.append("min_p=%r" % gc.min_p)
    if gc.typical_p is not None and gc.typical_p < 1.0:
        bad.append("typical_p=%r" % gc.typical_p)
    if gc.repetition_penalty is not None and gc.repetition_penalty != 1.0:
        bad.append("repetition_penalty=%r" % gc.repetition_penalty)
    for k in ("epsilon_cutoff", "eta_cutoff"):
        v = getattr(gc, k, None)
        if v:
            bad.append("%s=%r" % (k, v))
    for k in ("no_repeat_ngram_size", "bad_words_ids", "suppress_tokens", "begin_suppress_tokens",
              "sequence_bias", "guidance_scale"):
        v = getattr(gc, k, None)
        if v:
            bad.append("%s=%r" % (k, v))
    if bad:
        raise Error("depthdec.hf: the depth decoder's generation config asks for %s, which depthdec does not "
                    "implement (it samples by temperature and top_k only, SPEC §3); unset it or call "
                    "depthdec.hf.restore(model)" % ", ".join(bad), Status.EUNSUPPORTED)


def _sampling(gc):
    """(greedy, temperature, top_k) from the depth decoder's generation config."""
    if not gc.do_sample:
        return True, 0.0, 0
    _check_processors(gc)
    t = 1.0 if gc.temperature is None else float(gc.temperature)
    k = 0 if gc.top_k is None else int(gc.top_k)
    return t == 0.0, t, k


class Accelerated:
    """The handle accelerate() returns (also kept on the model). .model, .dd_model (the depthdec Model built from
    the live weights), .decoder, .seed, .frame; restore() undoes accelerate."""

    def __init__(self, model, backend, max_batch, threads, seed, frame):
        from . import _u64_scalar

        self.seed = _u64_scalar(seed, "seed")
        self.frame = _u64_scalar(frame, "frame")
        self.model = model
        self.dd_model = Model.from_tensors(model.config.to_dict(), _depth_weights(model))
        self.decoder = Decoder(self.dd_model, backend=backend, max_batch=max_batch, threads=threads)
        self._V = self.dd_model.config["codebook_size"]
        self._step = 0  # backbone steps of the current generate call
        self._device_used = False  # the current generate call took the device path (then it ends with sync())
        self._dev_seeds = None  # the call's seed tensor on the device (row b: seed + b), made at its first frame
        self._call_seed, self._call_frame = self.seed, self.frame
        dd = model.depth_decoder
        self._saved = {"depth": dd.__dict__.get("generate"), "model": model.__dict__.get("generate")}
        self._stock_generate = model.generate  # bound: the class's (or a previous wrapper's)
        object.__setattr__(dd, "generate", self._depth_generate)
        object.__setattr__(model, "generate", self._generate)
        object.__setattr__(model, _ATTR, self)

    def _generate(self, *args, depthdec_seed=None, depthdec_frame=None, **kwargs):
        from . import _u64_scalar

        self._call_seed = self.seed if depthdec_seed is None else _u64_scalar(depthdec_seed, "depthdec_seed")
        self._call_frame = self.frame if depthdec_frame is None else _u64_scalar(depthdec_frame, "depthdec_frame")
        self._step = 0
        self._device_used, self._dev_seeds = False, None
        try:
            out = self._stock_generate(*args, **kwargs)
        except BaseException as e:
            if self._device_used:  # report what is in flight; a device error of this call is only noted on it
                try:
                    self.decoder.sync()
                except Exception as se:
                    if hasattr(e, "add_note"):
                        e.add_note("depthdec.hf: the depth decoder also reported: %s" % se)
            raise
        if self._device_used:
            self.decoder.sync()  # raises what depthdec found on the device during this call
        return out

    def _depth_generate(self, input_ids=None, backbone_last_hidden_state=None, **kwargs):
        """Stands in for CsmDepthDecoderForCausalLM.generate as CsmGenerationMixin._sample calls it."""
        import torch

        if input_ids is None or backbone_last_hidden_state is None or input_ids.ndim != 2 or input_ids.shape[1] != 2:
            raise Error("depthdec.hf: the depth decoder was called as transformers' CSM generation loop does not "
                        "call it (want input_ids [B, 2] = (placeholder, c0) and backbone_last_hidden_state [B, H]); "
                        "depthdec.hf.restore(model) gives the stock depth decoder back", Status.EINVAL)
        greedy, t, k = _sampling(self.model.depth_decoder.generation_config)
        B = input_ids.shape[0]
        dev = input_ids.device
        frame = (self._call_frame + self._step) % 2**64
        hs = backbone_last_hidden_state.detach()
        if self.decoder.backend == "cuda" and hs.is_cuda:
            codes = self._device_codes(torch, hs, input_ids[:, 1].detach(), frame, t, k, greedy)
        else:
            h = hs.to("cpu", torch.float32)
            c0 = input_ids[:, 1].detach().to("cpu")
            seeds = torch.arange(B, dtype=torch.int64).numpy().astype("uint64") + self._call_seed  # wraps mod 2**64
            codes = self.decoder.generate(h, c0=c0, seed=seeds, frame=[frame] * B, temperature=t, top_k=k,
                                          greedy=greedy)
        self._step += 1
        return torch.cat([input_ids[:, :1], codes.to(device=dev, dtype=input_ids.dtype)], dim=1)

    def _device_codes(self, torch, h, c0, frame, t, k, greedy):
        """One frame on the device (CUDA hidden state, cuda decoder): the host path's keys as CUDA int64 tensors of
        their uint64 bits, enqueued on torch's current stream, no synchronisation (the generate call ends with
        sync())."""
        B, dev = h.shape[0], h.device
        if self._dev_seeds is None or self._dev_seeds.shape[0] != B or self._dev_seeds.device != dev:
            # row b: seed + b mod 2**64, as int64 bits (torch's int64 add wraps like the host path's uint64 add)
            self._dev_seeds = torch.arange(B, dtype=torch.int64, device=dev).add_(_i64(self._call_seed))
        frames = torch.full((B,), _i64(frame), dtype=torch.int64, device=dev)
        if c0.device != dev:
            c0 = c0.to(dev)
        self._device_used = True
        codes = self.decoder.generate(h, c0=c0, seed=self._dev_seeds, frame=frames, temperature=t, top_k=k,
                                      greedy=greedy)
        # a frame that failed on the device (reported by the sync() ending the call) leaves torch.empty's values:
        # keep them valid indices for the backbone's next embedding lookup (a no-op on every frame that succeeded)
        return codes.clamp_(0, self._V - 1)

    def restore(self):
        """Put the stock depth decoder (and generate) back. Idempotent."""
        m = self.model
        if m is None:
            return
        for obj, key in ((m.depth_decoder, "depth"), (m, "model")):
            if self._saved[key] is None:
                obj.__dict__.pop("generate", None)
            else:
                object.__setattr__(obj, "generate", self._saved[key])
        m.__dict__.pop(_ATTR, None)
        self.model = None
        self.decoder.close()

    def __repr__(self):
        return "<depthdec.hf.Accelerated %s, backend %s, seed %d, frame %d>" % (
            "active" if self.model is not None else "restored", self.decoder.backend, self.seed, self.frame)


def accelerate(model, backend="auto", max_batch=64, threads=0, seed=0, frame=0):
    """Make `model` (a transformers CsmForConditionalGeneration, transformers >= 5) run its depth decoder on
    depthdec inside its own generate; returns an Accelerated handle (handle.restore() or restore(model) undoes it).

    backend, max_batch, threads: the depthdec Decoder's (see depthdec.Decoder); a cuda decoder with the model on a
    CUDA device keeps every frame on the device and model.generate then ends with Decoder.sync() (module doc,
    "Devices"). seed, frame: the sampling keys
    (module doc: row b is stream seed + b, frame index frame + backbone step). Raises depthdec.Error when the model
    is not a CSM model, is already accelerated, or its weights cannot be read (the message names the tensor)."""
    if getattr(model, _ATTR, None) is not None:
        raise ArgumentError("depthdec.hf.accelerate: the model is already accelerated (restore it first)")
    cfg = getattr(model, "config", None)
    if getattr(cfg, "model_type", None) != "csm" or not hasattr(model, "depth_decoder"):
        raise ArgumentError("depthdec.hf.accelerate: want a transformers CsmForConditionalGeneration, got %s"
                            % type(model).__name__)
    return Accelerated(model, backend, max_batch, threads, seed, frame)


def restore(model):
    """Undo accelerate(model). A model that is not accelerated is left as it is."""
    h = model.__dict__.get(_ATTR)
    if h is not None:
        h.restore()

