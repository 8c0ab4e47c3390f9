#!/usr/bin/env bash
# Regenerates the fuzzers' seed corpora from small valid files:
#   fuzz/corpus/fuzz_model/  models exported by `depthdec export --synthetic tiny-*` plus the test fixtures
#                            (tests/fixtures/gpt_*.safetensors, tests/fixtures/csm_tiny/), in the input layout that
#                            fuzz/fuzz_model.c documents — mostly "compact" (header kept, weights replaced by a
#                            fill length), so the whole corpus stays far below 1 MB
#   fuzz/corpus/fuzz_npy/    the fixtures' small .npy files plus one file per dtype / version / shape corner
# Usage: fuzz/make_corpus.sh [BUILD_DIR]   (default build; needs BUILD_DIR/depthdec and python3, stdlib only)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
cli=$build/depthdec
[ -x "$cli" ] || { echo "make_corpus: $cli not found (run make first)" >&2; exit 1; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for kind in tiny-gpt tiny-llama; do
    for w in f32 f16 bf16 q8 q4; do
        "$cli" export --synthetic "$kind" --weights "$w" --out "$tmp/$kind-$w.safetensors" >/dev/null
    done
done

rm -rf fuzz/corpus/fuzz_model fuzz/corpus/fuzz_npy
mkdir -p fuzz/corpus/fuzz_model fuzz/corpus/fuzz_npy
python3 - "$tmp" <<'PY'
import json, os, struct, sys

tmp = sys.argv[1]
SEP = b"\n--DDPART--\n"
out_m = "fuzz/corpus/fuzz_model"
out_n = "fuzz/corpus/fuzz_npy"

def read_st(path):
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    return json.loads(b[8:8 + n]), b[8 + n:]

def header_bytes(h):
    js = json.dumps(h, separators=(",", ":")).encode()
    return js + b" " * (-len(js) % 8)

def compact(h, data_size):
    hb = header_bytes(h)
    return struct.pack("<Q", len(hb)) + hb + struct.pack("<I", data_size)

def compact_file(path):
    h, data = read_st(path)
    return compact(h, len(data))

def subset(h, names):
    """A header holding only `names` (+ __metadata__), offsets re-tiled from 0; returns (header, data size)."""
    out, at = {}, 0
    if "__metadata__" in h:
        out["__metadata__"] = h["__metadata__"]
    for k in sorted(names, key=lambda k: h[k]["data_offsets"][0]):
        v = dict(h[k])
        size = v["data_offsets"][1] - v["data_offsets"][0]
        v["data_offsets"] = [at, at + size]
        out[k] = v
        at += size
    return out, at

def put(name, mode, *parts, run=False):
    """One seed; run=True adds a twin with the 'run' bit (decode + score the model) set."""
    if run:
        put(name + "-run", mode | 8, *parts, run=False)
    with open(os.path.join(out_m, name), "wb") as f:
        f.write(bytes([mode]) + SEP.join(parts))

# native, compact (mode 4): every synthetic kind x weight type, and the fixtures (which have in_proj)
for kind in ("tiny-gpt", "tiny-llama"):
    for w in ("f32", "f16", "bf16", "q8", "q4"):
        put(f"native-{kind}-{w}", 4, compact_file(f"{tmp}/{kind}-{w}.safetensors"), run=w in ("q4", "bf16"))
for w in ("f16", "bf16", "q8"):
    put(f"native-fixture-gpt-{w}", 4, compact_file(f"tests/fixtures/gpt_{w}.safetensors"), run=w == "q8")

# native, verbatim (mode 0): one real file, weights and all (the smallest one)
put("native-raw-tiny-llama-q4", 0, open(f"{tmp}/tiny-llama-q4.safetensors", "rb").read())

# native + sidecar config.json (mode 5): the config moved out of __metadata__
for kind, w in (("tiny-llama", "q4"), ("tiny-gpt", "bf16")):
    h, data = read_st(f"{tmp}/{kind}-{w}.safetensors")
    cfg = h.pop("__metadata__")["depthdec.config"].encode()
    put(f"sidecar-{kind}-{w}", 5, cfg, compact(h, len(data)), run=kind == "tiny-llama")

# HF CSM directory (mode 6): the fixture's config (minus the codec's) and its safetensors header
cfg = json.load(open("tests/fixtures/csm_tiny/config.json"))
cfg.pop("codec_config", None)
h, data = read_st("tests/fixtures/csm_tiny/model.safetensors")
cj = json.dumps(cfg, separators=(",", ":")).encode()
put("hf-csm-tiny", 6, cj, compact(h, len(data)), run=True)
# the transformers 4.x spelling of RoPE: rope_theta + rope_scaling {type: llama3}
c4 = json.loads(cj)
rp = c4["depth_decoder_config"].pop("rope_parameters")
c4["depth_decoder_config"]["rope_theta"] = rp.pop("rope_theta")
rp["type"] = rp.pop("rope_type")
c4["depth_decoder_config"]["rope_scaling"] = rp
put("hf-csm-tiny-rope4x", 6, json.dumps(c4, separators=(",", ":")).encode(), compact(h, len(data)))
# only the depth decoder's tensors (what a trimmed export carries), tied-name variant of the code table
dd = [k for k in h if k.startswith("depth_decoder.") or k == "lm_head.weight"
      or k == "backbone_model.embed_tokens.embed_audio_tokens.weight"]
hs, size = subset(h, dd)
put("hf-csm-tiny-depth-only", 6, cj, compact(hs, size))

# HF sharded directory (mode 7): the same tensors split over two shards + an index
names = sorted(k for k in h if k != "__metadata__")
half = len(names) // 2
h1, s1 = subset(h, names[:half])
h2, s2 = subset(h, names[half:])
index = {"metadata": {"total_size": s1 + s2},
         "weight_map": {**{k: "s1.safetensors" for k in names[:half]}, **{k: "s2.safetensors" for k in names[half:]}}}
put("hf-csm-tiny-sharded", 7, cj, json.dumps(index, separators=(",", ":")).encode(), compact(h1, s1), compact(h2, s2), run=True)

# .npy seeds: the fixtures' small files ...
for f in ("csm_tiny_codes.npy", "csm_tiny_hidden.npy", "gpt_q8_logits0.npy", "gpt_bf16_greedy.npy"):
    with open(f"tests/fixtures/{f}", "rb") as src, open(os.path.join(out_n, "fixture-" + f), "wb") as dst:
        dst.write(src.read())

# ... and the corners of the format, written by hand (numpy's layout: header padded to a multiple of 64)
def npy(name, descr, shape, data, version=(1, 0), quote="'", fortran="False"):
    shp = "(" + ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else "") + ")"
    q = quote
    text = "{%sdescr%s: %s%s%s, %sfortran_order%s: %s, %sshape%s: %s, }" % (q, q, q, descr, q, q, q, fortran, q, q, shp)
    pre = 10 if version[0] == 1 else 12
    total = (pre + len(text) + 1 + 63) // 64 * 64
    hdr = (text + " " * (total - pre - len(text) - 1) + "\n").encode()
    ln = struct.pack("<H", len(hdr)) if version[0] == 1 else struct.pack("<I", len(hdr))
    with open(os.path.join(out_n, name), "wb") as f:
        f.write(b"\x93NUMPY" + bytes(version) + ln + hdr + data)

npy("f4-2x3", "<f4", (2, 3), struct.pack("<6f", 0, 1, -2.5, 3e38, float("inf"), float("nan")))
npy("f2-4", "<f2", (4,), struct.pack("<4H", 0x3C00, 0xC000, 0x7C00, 0x0001))
npy("i4-2x2", "<i4", (2, 2), struct.pack("<4i", 0, 1, -1, 2051))
npy("i8-3", "<i8", (3,), struct.pack("<3q", 5, -(1 << 40), 1 << 31))
npy("f8-2", "<f8", (2,), struct.pack("<2d", 1.5, 1e300))
npy("f4-scalar", "<f4", (), struct.pack("<f", 7.0))
npy("f4-empty-0x3", "<f4", (0, 3), b"")
npy("i4-8d", "<i4", (1, 1, 1, 1, 1, 1, 1, 2), struct.pack("<2i", 3, 4))
npy("f4-v2", "<f4", (2,), struct.pack("<2f", 1, 2), version=(2, 0))
npy("i4-v3-dquote", "=i4", (1,), struct.pack("<i", 9), version=(3, 0), quote='"')
npy("f4-fortran", "<f4", (2, 2), struct.pack("<4f", 1, 2, 3, 4), fortran="True")
npy("f4-bigendian", ">f4", (1,), struct.pack(">f", 1))
PY
du -sh fuzz/corpus
echo "make_corpus: $(ls fuzz/corpus/fuzz_model | wc -l) model seeds, $(ls fuzz/corpus/fuzz_npy | wc -l) npy seeds"
