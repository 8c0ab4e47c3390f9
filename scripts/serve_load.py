#!/usr/bin/env python3
"""Load test of `python -m depthdec.serve`: N concurrent streams on WebSockets, each sending one frame every period
(80 ms, with jitter) for its lifetime; streams join during the first quarter of the run and some leave early.

    python3 scripts/serve_load.py --model MODEL --url ws://127.0.0.1:8000/stream --streams 32 --seconds 20 [--check]
                                  [--mux K]

With --mux K the streams share connections, K per connection (as a gateway in front of the decoder would): each
connection sends one message per period holding its K streams' frames as a list (the server answers a list).

Prints one JSON object: streams, seconds, frames (answered), stream_frames_per_s, latency p50/p99/max (ms, send to
answer), deadline_misses (answers later than the period), lost (frames sent and never answered: must be 0),
errors (frames answered with an error), and with --check `wrong`: frames whose codes differ from this machine's
depthdec on the server's backend (`check_backend`, from /info) for the same (model, hidden, c0, seed, frame,
sampling), decoded locally after the run (must be 0; null when that backend cannot run here).
MODEL is what the server loads (a path or synthetic:KIND[:WEIGHTS]); it gives the input width and, with --check,
the reference codes. Needs `pip install websockets numpy` and the depthdec package.
"""
import argparse
import asyncio
import base64
import json
import random
import sys
import time

import numpy as np


def frame_request(rng, cfg, sid, k, seed):
    """Stream sid's frame k: its request (hidden from the stream's generator; c0 drawn when the model has no head0)
    and (hidden, c0, seed, frame) as --check replays it."""
    h = rng.standard_normal(cfg["input_dim"]).astype("<f4")
    c0 = None if cfg["has_head0"] else int(rng.integers(cfg["codebook_size"]))
    req = {"id": [sid, k], "hidden_b64": base64.b64encode(h.tobytes()).decode(), "c0": c0, "seed": seed + sid,
           "frame": k}
    return req, (h, c0, seed + sid, k)


async def run_stream(url, sid, cfg, start, life, period, jitter, seed, rec, t0, retries=0):
    """One stream: a frame every period on one WebSocket. With retries > 0 a dropped connection (a replica gone) is
    reopened and the unanswered frame sent again, up to `retries` times per frame (rec["retried"] counts them);
    without, the stream ends there and the frame counts as lost."""
    import websockets

    rng = np.random.default_rng(1000 + sid)
    await asyncio.sleep(start)
    k = 0
    next_t = time.monotonic()
    end = next_t + life
    ws = await websockets.connect(url, max_size=None)
    try:
        while time.monotonic() < end:
            req, (h, c0, _, _) = frame_request(rng, cfg, sid, k, seed)
            sent = time.monotonic()
            rec["sent"] += 1
            ans = None
            for attempt in range(retries + 1):
                try:
                    await ws.send(json.dumps(req))
                    ans = json.loads(await ws.recv())
                    break
                except Exception:
                    if attempt == retries:
                        break
                    rec["retried"] += 1
                    await asyncio.sleep(0.2)
                    try:
                        await ws.close()
                    except Exception:
                        pass
                    try:
                        ws = await websockets.connect(url, max_size=None)
                    except Exception:
                        pass  # the next attempt fails on send and retries again
            if ans is None:
                return  # the connection dropped for good: this frame is lost (counted as sent - answered)
            lat = time.monotonic() - sent
            rec["lat"].append(lat)
            if "codes" in ans and ans.get("id") == [sid, k]:
                rec["frames"].append((h, c0, seed + sid, k, ans["codes"]))
            else:
                rec["errors"] += 1
            k += 1
            next_t += period + random.uniform(-jitter, jitter)
            await asyncio.sleep(max(0.0, next_t - time.monotonic()))
    finally:
        try:
            await ws.close()
        except Exception:
            pass


async def run_group(url, sids, cfg, start, life, period, jitter, seed, rec):
    """K streams multiplexed on one WebSocket (a gateway's connection, --mux K): every period one message with the
    K streams' frames as a JSON list, answered by a list in the same order (the server's list protocol)."""
    import websockets

    rngs = {sid: np.random.default_rng(1000 + sid) for sid in sids}
    await asyncio.sleep(start)
    k = 0
    next_t = time.monotonic()
    end = next_t + life
    async with websockets.connect(url, max_size=None) as ws:
        while time.monotonic() < end:
            reqs, meta = zip(*(frame_request(rngs[sid], cfg, sid, k, seed) for sid in sids))
            sent = time.monotonic()
            rec["sent"] += len(reqs)
            try:
                await ws.send(json.dumps(reqs))
                ans = json.loads(await ws.recv())
            except Exception:
                return  # the connection dropped: its frames count as lost
            lat = time.monotonic() - sent
            if not isinstance(ans, list) or len(ans) != len(reqs):
                rec["errors"] += len(reqs)
                rec["lat"].extend([lat] * len(reqs))
            else:
                for (h, c0, sd, fi), a, sid in zip(meta, ans, sids):
                    rec["lat"].append(lat)
                    if isinstance(a, dict) and "codes" in a and a.get("id") == [sid, k]:
                        rec["frames"].append((h, c0, sd, fi, a["codes"]))
                    else:
                        rec["errors"] += 1
            k += 1
            next_t += period + random.uniform(-jitter, jitter)
            await asyncio.sleep(max(0.0, next_t - time.monotonic()))


def summarize(rec, seconds, streams, period):
    lat = np.array(rec["lat"]) * 1e3
    answered = len(rec["lat"])
    out = {"streams": streams, "seconds": seconds, "frames": answered,
           "stream_frames_per_s": round(answered / seconds, 1),
           "latency_ms": {"p50": round(float(np.percentile(lat, 50)), 2) if answered else None,
                          "p99": round(float(np.percentile(lat, 99)), 2) if answered else None,
                          "max": round(float(lat.max()), 2) if answered else None},
           "deadline_misses": int((lat > period * 1e3).sum()), "lost": rec["sent"] - answered,
           "errors": rec["errors"], "retried": rec.get("retried", 0)}
    return out


def check(model_spec, frames, backend="cpu"):
    """Frames whose served codes differ from a local decode on `backend` (the server's, from /info: all frames in one
    batch, and batch invariance makes it exact), or None when that backend cannot run here. Another backend's codes
    are not bit-identical (SPEC: >= 99.9% of (stream, level) pairs): compare with the server's."""
    import depthdec
    from depthdec.serve import load_model

    if backend not in depthdec.available_backends():
        return None
    m = load_model(model_spec)
    if not frames:
        return 0
    h = np.stack([f[0] for f in frames]).astype(np.float32)
    c0 = None if frames[0][1] is None else np.array([f[1] for f in frames], dtype=np.int32)
    seeds = np.array([f[2] for f in frames], dtype=np.uint64)
    fidx = np.array([f[3] for f in frames], dtype=np.uint64)
    d = depthdec.Decoder(m, backend=backend, max_batch=256)
    want = d.generate(h, c0=c0, seed=seeds, frame=fidx)
    got = np.array([f[4] for f in frames], dtype=np.int32)
    return int(np.sum(np.any(want != got, axis=1)))


def server_info(url):
    """The server's GET /info (config, backend, max batch), from its WebSocket url."""
    import urllib.request

    info_url = url.replace("ws://", "http://").rsplit("/stream", 1)[0] + "/info"
    return json.loads(urllib.request.urlopen(info_url, timeout=30).read())


async def load(url, model_spec, streams, seconds, period, jitter, seed, retries=0, during=None, mux=1):
    """Run the streams; `during`, when given, is a coroutine function run alongside them (a fault to inject).
    mux > 1: the streams in connections of `mux` streams each (run_group; retries do not apply)."""
    cfg = server_info(url)["config"]
    rec = {"sent": 0, "lat": [], "frames": [], "errors": 0, "retried": 0}
    rnd = random.Random(seed)
    t0 = time.monotonic()
    tasks = []
    if mux > 1:  # groups join during the first quarter, a quarter of them leave early
        for g, s0 in enumerate(range(0, streams, mux)):
            start = rnd.uniform(0, seconds / 4)
            life = seconds - start if g % 4 else rnd.uniform(seconds / 4, seconds - start)
            tasks.append(run_group(url, list(range(s0, min(s0 + mux, streams))), cfg, start, life, period, jitter,
                                   seed, rec))
    for s in range(streams if mux <= 1 else 0):
        start = rnd.uniform(0, seconds / 4)
        life = seconds - start if s % 4 else rnd.uniform(seconds / 4, seconds - start)  # a quarter leave early
        tasks.append(run_stream(url, s, cfg, start, life, period, jitter, seed, rec, t0, retries))
    if during:
        tasks.append(during())
    await asyncio.gather(*tasks)
    return rec


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--url", default="ws://127.0.0.1:8000/stream")
    ap.add_argument("--model", required=True, help="the server's MODEL (path or synthetic:KIND[:WEIGHTS])")
    ap.add_argument("--streams", type=int, default=16)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--period-ms", type=float, default=80.0)
    ap.add_argument("--jitter-ms", type=float, default=10.0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--check", action="store_true", help="compare every answered frame with a local decode")
    ap.add_argument("--retries", type=int, default=0, help="reopen a dropped stream and resend its frame (per frame)")
    ap.add_argument("--mux", type=int, default=1,
                    help="streams per connection: one list message per period for all of them (a gateway; default 1)")
    a = ap.parse_args(argv)
    rec = asyncio.run(load(a.url, a.model, a.streams, a.seconds, a.period_ms / 1e3, a.jitter_ms / 1e3, a.seed,
                           a.retries, mux=a.mux))
    out = summarize(rec, a.seconds, a.streams, a.period_ms / 1e3)
    out["mux"] = a.mux
    if a.check:
        out["check_backend"] = server_info(a.url)["backend"]
        out["wrong"] = check(a.model, rec["frames"], out["check_backend"])
    print(json.dumps(out))
    return 0 if out["lost"] == 0 and out.get("wrong", 0) == 0 else 1  # wrong None (not checkable here): not a failure


if __name__ == "__main__":
    sys.exit(main())
