"""depthdec on Ray Serve: one frame of one stream per request, frames of many streams batched into one decode.

    python -m depthdec.serve MODEL [--backend B] [--max-batch N] [--batch-wait-ms W] [--replicas R]
                                   [--address RAY_ADDRESS] [--host H] [--port P]

MODEL is anything depthdec.Model loads (a native .safetensors, an HF directory), or ``synthetic:KIND[:WEIGHTS]``
(e.g. ``synthetic:gpt:bf16``). Ray runs locally unless --address names a cluster (``auto`` or ``ray://host:10001``).
Replicas: one per GPU of the cluster when it has GPUs and the backend may use them (``num_gpus=1`` each), else one
CPU replica (--replicas overrides). Needs ``pip install 'ray[serve]'`` (tested with 2.60.0).

Requests (JSON), per frame: ``{"hidden": [floats] | "hidden_b64": base64 of little-endian float32, "c0": int or
null, "seed": int, "frame": int, "temperature": 0.9, "top_k": 50, "greedy": false, "id": anything}`` (Moshi's
depformer: also ``"text": int``, the frame's text token, required there) ->
``{"id": ..., "codes": [Q ints]}`` or ``{"id": ..., "error": "..."}``.
  POST /frame        one frame (HTTP 400 with the error for a bad request)
  WS   /stream       a stream's connection for its lifetime: one request message per frame, one answer each
  GET  /info         the model's config, backend, max batch
A message (or a POST body) may also be a JSON list of up to MAX_FRAMES frames -- e.g. a gateway multiplexing many
streams on one connection, or a backbone server sending its whole batch -- answered by a list in the same order,
each entry a frame's answer (codes or error: a bad frame does not fail the others; POST answers 200 with the list).
One message then costs one trip through Serve's proxy for all its frames.

The server keeps no per-stream state: the caller keeps its seed and frame index, so any replica can serve any frame,
and a frame's codes depend only on (model, hidden, c0, seed, frame, sampling; Moshi: text) -- never on the batch it
landed in. A
bad request is refused alone (validated before batching; a batch whose decode fails is retried frame by frame so
only the bad frame gets the error).
"""
import argparse
import asyncio
import base64
import math
import sys
import time

import numpy as np

import depthdec

U64 = 2**64
MAX_FRAMES = 4096  # frames in one list message


def load_model(spec):
    """depthdec.Model from a path or 'synthetic:KIND[:WEIGHTS]'."""
    if spec.startswith("synthetic:"):
        parts = spec.split(":")
        return depthdec.Model.synthetic(parts[1], weights=parts[2] if len(parts) > 2 else "bf16")
    return depthdec.Model(spec)


def parse_frame(cfg, req):
    """A request dict checked against the model's config -> (hidden float32 [I], c0 or None, seed, frame,
    temperature, top_k, text or None). Raises ValueError with a message that names the field."""
    if not isinstance(req, dict):
        raise ValueError("request: want a JSON object")
    I, V = cfg["input_dim"], cfg["codebook_size"]
    if "hidden_b64" in req:
        try:
            raw = base64.b64decode(req["hidden_b64"], validate=True)
        except Exception:
            raise ValueError("hidden_b64: not base64")
        if len(raw) != 4 * I:
            raise ValueError("hidden_b64: %d bytes, want %d (%d little-endian float32)" % (len(raw), 4 * I, I))
        h = np.frombuffer(raw, dtype="<f4").astype(np.float32)
    elif "hidden" in req:
        v = req["hidden"]
        if not isinstance(v, list) or len(v) != I:
            raise ValueError("hidden: want a list of %d numbers" % I)
        try:
            h = np.asarray(v, dtype=np.float64)
        except (TypeError, ValueError):
            raise ValueError("hidden: not all numbers")
        h = h.astype(np.float32)
    else:
        raise ValueError("hidden: missing (give 'hidden' or 'hidden_b64')")
    if not np.all(np.isfinite(h)):
        raise ValueError("hidden: element %d is not finite" % int(np.argmax(~np.isfinite(h))))
    c0 = req.get("c0")
    V_in = V + int(cfg.get("per_position", False))  # Moshi: its pad/initial id V is a valid input code
    if c0 is not None:
        if isinstance(c0, bool) or not isinstance(c0, int) or not 0 <= c0 < V_in:
            raise ValueError("c0: want an integer in [0, %d)" % V_in)
    elif not cfg["has_head0"]:
        raise ValueError("c0: required (this model has no head0: the backbone gives c0)")
    tv, text = cfg.get("text_vocab", 0), req.get("text")
    if tv and (isinstance(text, bool) or not isinstance(text, int) or not 0 <= text <= tv):
        raise ValueError("text: want the frame's text token, an integer in [0, %d] (Moshi's depformer)" % tv)
    if not tv and text is not None:
        raise ValueError("text: this model takes no text token")
    ints = {}
    for k in ("seed", "frame"):
        x = req.get(k, 0)
        if isinstance(x, bool) or not isinstance(x, int) or not 0 <= x < U64:
            raise ValueError("%s: want an integer in [0, 2**64)" % k)
        ints[k] = x
    if req.get("greedy", False) is True:
        t, kk = 0.0, 0
    else:
        t, kk = req.get("temperature", 0.9), req.get("top_k", 50)
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not math.isfinite(t) or t < 0:
            raise ValueError("temperature: want a finite number >= 0")
        if isinstance(kk, bool) or not isinstance(kk, int) or kk < 0:
            raise ValueError("top_k: want an integer >= 0")
    return h, c0, ints["seed"], ints["frame"], float(t), int(kk), text


def decode_frames(dec, frames):
    """Codes of parsed frames (tuples of parse_frame) as lists, in order: one library call per group of the same
    sampling and c0 kind (given / sampled); a failing group is retried frame by frame, so a frame that fails gets
    its own error (an Exception in its slot) and the others their codes."""
    out = [None] * len(frames)
    groups = {}
    for i, (h, c0, seed, frame, t, k, text) in enumerate(frames):
        groups.setdefault((t, k, c0 is None), []).append(i)
    for (t, k, no_c0), idx in groups.items():
        def run(rows):
            h = np.stack([frames[i][0] for i in rows])
            c0 = None if no_c0 else np.array([frames[i][1] for i in rows], dtype=np.int32)
            seeds = np.array([frames[i][2] for i in rows], dtype=np.uint64)
            fidx = np.array([frames[i][3] for i in rows], dtype=np.uint64)
            text = None if frames[rows[0]][6] is None else np.array([frames[i][6] for i in rows], dtype=np.int32)
            return dec.generate(h, c0=c0, seed=seeds, frame=fidx, temperature=t, top_k=k, text=text)
        try:
            codes = run(idx)
            for j, i in enumerate(idx):
                out[i] = codes[j].tolist()
        except Exception:
            for i in idx:
                try:
                    out[i] = run([i])[0].tolist()
                except Exception as e:  # noqa: BLE001 -- reported to the one caller
                    out[i] = e
    return out


def build_app(model_spec, backend="auto", max_batch=64, batch_wait_ms=5.0, replicas=None, num_gpus=None,
              max_streams=4096):
    """The Ray Serve application (bound deployment) of MODEL. Importing ray here keeps depthdec free of it.
    max_streams: concurrent requests a replica accepts (Serve's max_ongoing_requests; its default, 5, would let only
    5 streams hold a WebSocket and cap a batch at 5)."""
    from fastapi import FastAPI, Request, WebSocket, WebSocketDisconnect
    from fastapi.responses import JSONResponse
    from ray import serve

    api = FastAPI()

    @serve.deployment
    @serve.ingress(api)
    class DepthDecoder:
        def __init__(self, model_spec, backend, max_batch, batch_wait_ms):
            self.model = load_model(model_spec)
            self.cfg = self.model.config
            self.dec = depthdec.Decoder(self.model, backend=backend, max_batch=max_batch)
            self.decode_batch.set_max_batch_size(max_batch)
            self.decode_batch.set_batch_wait_timeout_s(batch_wait_ms / 1000.0)

        @serve.batch(max_batch_size=64, batch_wait_timeout_s=0.005)
        async def decode_batch(self, frames):
            # one decode call for the frames of many streams; the library releases the GIL
            return await asyncio.to_thread(decode_frames, self.dec, frames)

        async def answer_any(self, req):
            """(body, status) of one frame's message or of a list of frames (answered in order)"""
            if not isinstance(req, list):
                return await self.answer(req)
            if not 1 <= len(req) <= MAX_FRAMES:
                return {"error": "request: a list of %d frames, want 1 to %d" % (len(req), MAX_FRAMES)}, 400
            res = await asyncio.gather(*(self.answer(r) for r in req))
            return [body for body, _ in res], 200

        async def answer(self, req):
            rid = req.get("id") if isinstance(req, dict) else None
            try:
                fr = parse_frame(self.cfg, req)
            except ValueError as e:
                return {"id": rid, "error": str(e)}, 400
            r = await self.decode_batch(fr)
            if isinstance(r, Exception):
                return {"id": rid, "error": str(r)}, 400
            return {"id": rid, "codes": r}, 200

        @api.post("/frame")
        async def frame(self, request: Request):
            try:
                req = await request.json()
            except Exception:
                return JSONResponse({"error": "request: not JSON"}, status_code=400)
            body, code = await self.answer_any(req)
            return JSONResponse(body, status_code=code)

        @api.websocket("/stream")
        async def stream(self, ws: WebSocket):
            await ws.accept()
            try:
                while True:
                    try:
                        req = await ws.receive_json()
                    except WebSocketDisconnect:
                        raise
                    except Exception:
                        await ws.send_json({"error": "request: not JSON"})
                        continue
                    body, _ = await self.answer_any(req)
                    await ws.send_json(body)
            except WebSocketDisconnect:
                pass

        @api.get("/info")
        async def info(self):
            return {"config": self.cfg, "backend": self.dec.backend, "max_batch": self.dec.max_batch}

    opts = {}
    if num_gpus:
        opts["ray_actor_options"] = {"num_gpus": num_gpus}
    return DepthDecoder.options(num_replicas=replicas or 1, max_ongoing_requests=max(max_streams, max_batch),
                                **opts).bind(model_spec, backend, max_batch, batch_wait_ms)


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m depthdec.serve", description=__doc__.split("\n\n")[0])
    ap.add_argument("model", help="model path, or synthetic:KIND[:WEIGHTS]")
    ap.add_argument("--backend", default="auto", help="auto (default), cpu, cuda, ref")
    ap.add_argument("--max-batch", type=int, default=64, help="frames per decode call (default 64)")
    ap.add_argument("--batch-wait-ms", type=float, default=5.0, help="longest wait to fill a batch (default 5 ms)")
    ap.add_argument("--replicas", type=int, default=None, help="default: one per GPU, else 1")
    ap.add_argument("--max-streams", type=int, default=4096, help="concurrent requests/streams per replica (4096)")
    ap.add_argument("--address", default=None, help="a Ray cluster's address (default: a local Ray)")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8000)
    ap.add_argument("--proxy-location", default="EveryNode", choices=["EveryNode", "HeadOnly"],
                    help="where Serve runs its HTTP proxies: EveryNode (default: each node with a replica) or HeadOnly "
                         "(one proxy; needed when several Ray nodes share one host, as their proxies would bind the "
                         "same host:port)")
    a = ap.parse_args(argv)
    load_model(a.model)  # a bad model fails here, with the library's message, before Ray starts
    import ray
    from ray import serve

    ray.init(address=a.address, ignore_reinit_error=True, logging_level="ERROR")
    gpus = int(ray.cluster_resources().get("GPU", 0))
    use_gpu = gpus > 0 and a.backend in ("auto", "cuda")
    replicas = a.replicas or (gpus if use_gpu else 1)
    serve.start(proxy_location=a.proxy_location, http_options={"host": a.host, "port": a.port})
    serve.run(build_app(a.model, a.backend, a.max_batch, a.batch_wait_ms, replicas, 1 if use_gpu else None,
                        a.max_streams),
              name="depthdec", route_prefix="/")
    print("depthdec.serve: %s on %d %s replica(s) at http://%s:%d (POST /frame, WS /stream, GET /info)" %
          (a.model, replicas, "GPU" if use_gpu else "CPU", a.host, a.port), flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        serve.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
