#!/usr/bin/env python3
"""Issue 15 point 4: transformers' CsmForConditionalGeneration.generate, stock vs depthdec.hf, and a PyTorch frame
loop whose depth part is a CUDA-graph replay of depthdec on device tensors.

Model: CsmForConditionalGeneration at CSM-1B dims from transformers' default CsmConfig (checked below against the
sesame/csm-1b dims: backbone 16 layers x 2048, 32/8 heads, FFN 8192; depth decoder 4 layers x 1024, 8/2 heads,
FFN 8192; 32 codebooks of 2051 entries), random weights (transformers' own init, N(0, 0.02)) in bfloat16, built from
the config on the device: nothing is downloaded. The codec is left out of the measurement (a tiny Mimi stands in for
it so that the model can be built; it is never run). The codebook-EOS stop is disabled
(config.codebook_eos_token_id = -1) so that every run makes exactly --frames frames.

For each batch size (--batch, default 1 and 8), --frames frames (default 50, 80 ms of audio each) after a
--prompt-len token random text prompt (prefill included in the time):
  stock     model.generate(...) as transformers ships it
  depthdec  model.generate(...) after depthdec.hf.accelerate(model, backend=cuda|cpu)
  loop      a plain PyTorch loop: backbone step eager (transformers' CsmBackboneModel with its DynamicCache), the
            depth part one torch.cuda.graph replay per frame of a captured depthdec Decoder.generate on device
            tensors (c0 = None: depthdec computes level 0 with its head0, which is the model's lm_head, then levels
            1..31; the frame index advances inside the graph). On --device cpu the same loop runs eagerly.
  graph     the captured depthdec frame alone, replayed --frames times back to back (ms/frame)
Depth share: CUDA events recorded on the current stream around every depth-decoder call (transformers' call of
model.depth_decoder.generate, or the graph replay), summed at the end: the GPU-timeline time from the end of the
backbone's work to the end of the depth decoder's (host launch gaps inside included), no extra synchronisation.
End to end: wall time between two torch.cuda.synchronize() around the whole generate call (or loop).
Greedy by default (backbone and depth argmax); --sample: both sampled with top-k 50, temperature 0.9 (depthdec by
SPEC §3, transformers by torch's RNG: the codes are not comparable then).

  python3 scripts/bench_hf.py --device cuda --frames 50 --json out.json      # the H200 run (well under 5 min)
  python3 scripts/bench_hf.py --tiny --device cpu --frames 3                 # a smoke test of the script on CPU
"""

import argparse
import json
import platform
import sys
import time

import torch
import transformers
from transformers import CsmConfig, CsmForConditionalGeneration

import depthdec
import depthdec.hf

FRAME_S = 0.080  # CSM / Mimi: 12.5 frames per second of audio
CSM1B = dict(  # sesame/csm-1b (its config.json on the Hub; transformers' CsmConfig defaults are these)
    backbone=dict(hidden_size=2048, num_hidden_layers=16, num_attention_heads=32, num_key_value_heads=8,
                  intermediate_size=8192, num_codebooks=32, vocab_size=2051, text_vocab_size=128256),
    depth=dict(hidden_size=1024, num_hidden_layers=4, num_attention_heads=8, num_key_value_heads=2,
               intermediate_size=8192, num_codebooks=32, vocab_size=2051, backbone_hidden_size=2048))
TINY_CODEC = dict(model_type="mimi", codebook_size=64, num_quantizers=32, hidden_size=32, intermediate_size=64,
                  num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=2, head_dim=16, num_filters=4,
                  upsampling_ratios=[2, 2], codebook_dim=16, vector_quantization_hidden_dimension=16,
                  sliding_window=16, upsample_groups=32, max_position_embeddings=64)


def make_config(tiny):
    if tiny:  # small dims of the same shape of model, for testing this script on a CPU
        cfg = CsmConfig(
            num_codebooks=8, vocab_size=64, text_vocab_size=128, hidden_size=96, intermediate_size=128,
            num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=24,
            codebook_pad_token_id=63, codebook_eos_token_id=0, audio_token_id=122, audio_eos_token_id=123,
            bos_token_id=120, pad_token_id=122,
            depth_decoder_config=dict(num_codebooks=8, vocab_size=64, backbone_hidden_size=96, hidden_size=64,
                                      intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                                      num_key_value_heads=2, head_dim=16, max_position_embeddings=9),
            codec_config=dict(TINY_CODEC, num_quantizers=8))
        return cfg, []
    cfg = CsmConfig(codec_config=TINY_CODEC)  # transformers' defaults; the codec is never run
    diffs = []
    for part, want in CSM1B.items():
        c = cfg if part == "backbone" else cfg.depth_decoder_config
        for k, v in want.items():
            if getattr(c, k) != v:
                diffs.append("%s.%s: default %r, set to %r" % (part, k, getattr(c, k), v))
                setattr(c, k, v)
    return cfg, diffs


def build_model(cfg, device):
    prev = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)
    try:
        torch.manual_seed(0)
        with torch.device(device):
            m = CsmForConditionalGeneration(cfg)
    finally:
        torch.set_default_dtype(prev)
    m = m.to(device=device, dtype=torch.bfloat16).eval()
    m.config.codebook_eos_token_id = -1  # never stop early: exactly --frames frames
    return m


class Clock:
    """Wall time around a region (synchronised on CUDA) and the depth decoder's time inside it (CUDA events on the
    current stream on CUDA, perf_counter on the CPU)."""

    def __init__(self, device):
        self.cuda = device.startswith("cuda")
        self.events, self.cpu_s = [], 0.0

    def sync(self):
        if self.cuda:
            torch.cuda.synchronize()

    def depth(self, fn, *a, **kw):
        if self.cuda:
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record()
            out = fn(*a, **kw)
            e1.record()
            self.events.append((e0, e1))
            return out
        t0 = time.perf_counter()
        out = fn(*a, **kw)
        self.cpu_s += time.perf_counter() - t0
        return out

    def depth_s(self):
        self.sync()
        return self.cpu_s + sum(a.elapsed_time(b) for a, b in self.events) / 1e3


def timed_generate(model, clock, kw):
    """model.generate(**kw) with the depth decoder's calls timed: (codes, wall s, depth s)."""
    dd = model.depth_decoder
    saved = dd.__dict__.get("generate")
    inner = dd.generate  # bound: the class's, or depthdec.hf's instance attribute

    def generate(*a, **k):
        return clock.depth(inner, *a, **k)

    object.__setattr__(dd, "generate", generate)
    try:
        clock.sync()
        t0 = time.perf_counter()
        out = model.generate(**kw)
        clock.sync()
        wall = time.perf_counter() - t0
    finally:
        if saved is None:
            dd.__dict__.pop("generate", None)
        else:
            object.__setattr__(dd, "generate", saved)
    return out, wall, clock.depth_s()


def gen_kwargs(model, B, prompt_len, frames, sample, device, seed):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, min(model.config.text_vocab_size, 120), (B, prompt_len), generator=g).to(device)
    kw = dict(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=frames)
    if sample:
        kw.update(do_sample=True, top_k=50, temperature=0.9, depth_decoder_do_sample=True, depth_decoder_top_k=50,
                  depth_decoder_temperature=0.9)
    else:
        kw.update(do_sample=False, depth_decoder_do_sample=False)
    return kw


def row(variant, B, frames, wall, depth_s, extra=None):
    r = dict(variant=variant, batch=B, frames=frames, wall_s=wall, ms_per_frame=1e3 * wall / frames,
             s_per_audio_s=wall / (frames * FRAME_S), depth_s=depth_s,
             depth_ms_per_frame=None if depth_s is None else 1e3 * depth_s / frames,
             depth_share=None if depth_s is None else depth_s / wall)
    r.update(extra or {})
    return r


def depth_loop(model, dec, B, frames, kw, sample, device, clock, use_graph):
    """The PyTorch loop: backbone eager, depth = depthdec (graph replay on CUDA). Returns (codes [B, F, Q], wall s,
    depth s, graph-only ms/frame or None, graph replay == eager call or None)."""
    bb = model.backbone_model
    Q = model.config.num_codebooks
    T, K = (0.9, 50) if sample else (0.0, 0)
    dev = torch.device(device)
    h_st = torch.zeros((B, model.config.hidden_size), dtype=torch.bfloat16, device=dev)
    seeds = torch.arange(B, dtype=torch.int64, device=dev)  # row b: stream b
    frame_t = torch.zeros(B, dtype=torch.int64, device=dev)

    def depth_frame():
        codes = dec.generate(h_st, c0=None, seed=seeds, frame=frame_t, temperature=T, top_k=K, greedy=not sample)
        frame_t.add_(1)  # the next frame index, inside the graph when captured
        return codes

    graph_ms, graph_ok = None, None
    if use_graph:
        side = torch.cuda.Stream()  # the eager call a capture needs first (same batch size), on a side stream
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            depth_frame()
        torch.cuda.current_stream().wait_stream(side)
        dec.sync()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            out_st = depth_frame()
        # the graph alone, back to back; then a check: one replay == one eager call on the same inputs
        h_st.normal_()
        frame_t.zero_()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(frames):
            g.replay()
        torch.cuda.synchronize()
        graph_ms = 1e3 * (time.perf_counter() - t0) / frames
        frame_t.fill_(7)
        g.replay()
        frame_t.fill_(7)
        eager = depth_frame()
        dec.sync()
        graph_ok = bool(torch.equal(out_st, eager))

        def step():
            g.replay()
            return out_st
    else:
        step = depth_frame

    frame_t.zero_()
    codes = []
    with torch.no_grad():
        clock.sync()
        t0 = time.perf_counter()
        o = bb(inputs_embeds=model.embed_text_tokens(kw["input_ids"]), use_cache=True)
        cache = o.past_key_values
        for f in range(frames):
            h_st.copy_(o.last_hidden_state[:, -1, :])
            c = clock.depth(step).long()  # c0..c(Q-1), depthdec's
            codes.append(c)
            if f + 1 < frames:
                o = bb(input_ids=c[:, None, :], past_key_values=cache, use_cache=True)
        clock.sync()
        wall = time.perf_counter() - t0
    dec.sync()
    out = torch.stack(codes, 1)
    assert out.shape == (B, frames, Q)
    return out, wall, clock.depth_s(), graph_ms, graph_ok


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cuda", help="cuda (the measurement) or cpu (a smoke test)")
    ap.add_argument("--tiny", action="store_true", help="a tiny CSM instead of CSM-1B dims (testing the script)")
    ap.add_argument("--frames", type=int, default=50)
    ap.add_argument("--batch", type=int, nargs="+", default=[1, 8])
    ap.add_argument("--prompt-len", type=int, default=16)
    ap.add_argument("--sample", action="store_true", help="top-k 50, temperature 0.9 (default: greedy)")
    ap.add_argument("--skip-stock", action="store_true", help="leave out stock transformers (slow)")
    ap.add_argument("--json", help="write the results here")
    a = ap.parse_args()
    cuda = a.device.startswith("cuda")
    if cuda and not torch.cuda.is_available():
        sys.exit("bench_hf: --device cuda but torch.cuda.is_available() is False")
    backend = "cuda" if cuda else "cpu"
    if not depthdec.backend_available(backend):
        sys.exit("bench_hf: depthdec has no %s backend here (the package needs DEPTHDEC_CUDA=1 at install)" % backend)
    transformers.utils.logging.set_verbosity_error()
    if cuda:
        torch.backends.cuda.matmul.allow_tf32 = False

    t_build = time.perf_counter()
    cfg, diffs = make_config(a.tiny)
    model = build_model(cfg, a.device)
    for d in diffs:
        print("config:", d)
    n_params = sum(p.numel() for n, p in model.named_parameters() if not n.startswith("codec_model."))
    handle = depthdec.hf.accelerate(model, backend=backend)  # builds depthdec's model from the live weights
    dd_model = handle.dd_model
    handle.restore()
    build_s = time.perf_counter() - t_build
    dc = cfg.depth_decoder_config
    info = dict(device=(torch.cuda.get_device_name() if cuda else platform.processor() or "cpu"), tiny=a.tiny,
                torch=torch.__version__, transformers=transformers.__version__, depthdec=depthdec.__version__,
                backend=backend, dtype="bfloat16", mode="sampled top-k 50, T 0.9" if a.sample else "greedy",
                frames=a.frames, prompt_len=a.prompt_len, params_without_codec=n_params, build_s=build_s,
                backbone=dict(layers=cfg.num_hidden_layers, hidden=cfg.hidden_size, heads=cfg.num_attention_heads,
                              kv_heads=cfg.num_key_value_heads, ffn=cfg.intermediate_size),
                depth=dict(layers=dc.num_hidden_layers, hidden=dc.hidden_size, heads=dc.num_attention_heads,
                           kv_heads=dc.num_key_value_heads, ffn=dc.intermediate_size),
                codebooks=cfg.num_codebooks, codebook_size=cfg.vocab_size, config_set_explicitly=diffs)
    print("model: %.2fB parameters (codec left out), built in %.1f s; %s; torch %s, transformers %s, depthdec %s, %s"
          % (n_params / 1e9, build_s, info["device"], torch.__version__, transformers.__version__,
             depthdec.__version__, info["mode"]), flush=True)

    rows, checks = [], {}
    dec = depthdec.Decoder(dd_model, backend=backend, max_batch=max(64, max(a.batch)))
    for B in a.batch:
        kw = gen_kwargs(model, B, a.prompt_len, a.frames, a.sample, a.device, seed=B)
        warm = dict(kw, max_new_tokens=2)
        ref = None
        if not a.skip_stock:
            model.generate(**warm)
            ref, wall, ds = timed_generate(model, Clock(a.device), kw)
            assert ref.shape == (B, a.frames, cfg.num_codebooks), ref.shape
            rows.append(row("stock", B, a.frames, wall, ds))
            print("  B%d stock     %.2f s" % (B, wall), flush=True)
        h = depthdec.hf.accelerate(model, backend=backend)
        model.generate(**warm)
        got, wall, ds = timed_generate(model, Clock(a.device), kw)
        h.restore()
        assert got.shape == (B, a.frames, cfg.num_codebooks), got.shape
        extra = {}
        if ref is not None and not a.sample:  # bf16 transformers vs depthdec's float32 arithmetic: not expected equal
            extra["frames_equal_to_stock"] = int((got == ref).all(-1).all(0).sum())
        rows.append(row("depthdec.hf", B, a.frames, wall, ds, extra))
        print("  B%d depthdec  %.2f s" % (B, wall), flush=True)
        codes, wall, ds, gms, gok = depth_loop(model, dec, B, a.frames, kw, a.sample, a.device, Clock(a.device), cuda)
        rows.append(row("loop+graph" if cuda else "loop (eager)", B, a.frames, wall, ds))
        if gms is not None:
            rows.append(dict(variant="graph only", batch=B, frames=a.frames, ms_per_frame=gms,
                             s_per_audio_s=gms / 1e3 / FRAME_S, depth_share=1.0, depth_ms_per_frame=gms))
            checks["graph_replay_equals_eager_B%d" % B] = gok
        print("  B%d loop      %.2f s" % (B, wall), flush=True)
    dec.close()

    print("\n%-13s %3s %6s %9s %9s %11s %9s %7s" % ("variant", "B", "frames", "wall s", "ms/frame", "s/audio s",
                                                     "depth ms", "depth%"))
    for r in rows:
        print("%-13s %3d %6d %9s %9.2f %11.4f %9s %7s" % (
            r["variant"], r["batch"], r["frames"], "-" if "wall_s" not in r else "%.3f" % r["wall_s"],
            r["ms_per_frame"], r["s_per_audio_s"],
            "-" if r.get("depth_ms_per_frame") is None else "%.2f" % r["depth_ms_per_frame"],
            "-" if r.get("depth_share") is None else "%.1f" % (100 * r["depth_share"])))
    print("s/audio s: wall seconds per second of audio of each stream (%d ms per frame); a batch of B makes B "
          "streams in that time. depth: CUDA events around the depth decoder's calls (or the graph replays)."
          % (FRAME_S * 1e3))
    for k, v in checks.items():
        print("check %s: %s" % (k, v))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(dict(info=info, rows=rows, checks=checks), f, indent=1)
        print("wrote", a.json)
    if checks and not all(checks.values()):
        sys.exit("bench_hf: a graph replay differed from the eager call")


if __name__ == "__main__":
    main()
