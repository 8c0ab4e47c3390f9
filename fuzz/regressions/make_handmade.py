#!/usr/bin/env python3
"""Writes the hand-made resource-limit inputs of fuzz/regressions/ (the ones not found by a fuzzer): headers and
configs that ask for huge sizes backed by tiny files. Each must be refused with a clean error, before anything is
sized from it. Formats: model-* files are fuzz_model inputs (see fuzz/fuzz_model.c), npy-* files are .npy files.
Expected statuses are listed in EXPECTED. Run from the repository root: python3 fuzz/regressions/make_handmade.py"""
import json, struct

OUT = "fuzz/regressions/"
SEP = b"\n--DDPART--\n"


def st(header, data=b""):
    js = json.dumps(header, separators=(",", ":")).encode()
    js += b" " * (-len(js) % 8)
    return struct.pack("<Q", len(js)) + js + data


def model(name, mode, *parts):
    open(OUT + name, "wb").write(bytes([mode]) + SEP.join(parts))


def npy(name, header, data=b"", version=1, hlen=None):
    h = header.encode()
    h += b" " * (-(len(h) + (10 if version == 1 else 12) + 1) % 64) + b"\n"
    n = len(h) if hlen is None else hlen
    ln = struct.pack("<H", n) if version == 1 else struct.pack("<I", n)
    open(OUT + name, "wb").write(b"\x93NUMPY" + bytes([version, 0]) + ln + h + data)


BIG = {"format": "depthdec", "version": 1, "block": "gpt", "levels": 64, "codebook_size": 65536,
       "input_dim": 16384, "dim": 16384, "layers": 64, "heads": 32, "kv_heads": 32, "head_dim": 512,
       "ffn_dim": 65536, "norm_eps": 1e-5, "rope": None}
meta = {"__metadata__": {"depthdec.config": json.dumps(BIG)}}

# a config at every maximum (64 layers of 16384 dims, 64 levels of 65536 codes) in a 100-byte file
model("model-max-config-tiny-file", 0, st({**meta, "norm.weight": {"dtype": "F32", "shape": [4],
                                                                    "data_offsets": [0, 16]}}, b"\0" * 16))
# the same, with every tensor named at its full shape but offsets that claim ~16 TB
big = dict(meta)
at = 0
for name, shape in (("embed.weight", [63, 65536, 16384]), ("heads.weight", [63, 65536, 16384])):
    n = 4
    for d in shape:
        n *= d
    big[name] = {"dtype": "F32", "shape": shape, "data_offsets": [at, at + n]}
    at += n
model("model-max-shapes-claimed", 0, st(big))
# shape product overflows 64 bits
model("model-shape-overflow", 0, st({"x": {"dtype": "F64", "shape": [1 << 62, 1 << 62], "data_offsets": [0, 0]}}))
# header length 2^63
model("model-header-len-huge", 0, struct.pack("<Q", 1 << 63) + b"{}")
# one past each bound: 65 layers
model("model-config-layers-65", 0, st({"__metadata__": {"depthdec.config": json.dumps({**BIG, "layers": 65})}}))
# HF CSM config at the maximum with an empty model.safetensors
csm = {"model_type": "csm", "hidden_size": 16384,
       "depth_decoder_config": {"backbone_hidden_size": 16384, "num_codebooks": 64, "vocab_size": 65536,
                                "hidden_size": 16384, "num_hidden_layers": 64, "num_attention_heads": 32,
                                "num_key_value_heads": 32, "head_dim": 512, "intermediate_size": 65536}}
model("model-hf-max-config-empty-file", 2, json.dumps(csm).encode(), st({}))
# a sharded index pointing outside the directory
model("model-hf-shard-traversal", 3, json.dumps(csm).encode(),
      json.dumps({"weight_map": {"lm_head.weight": "../../etc/passwd"}}).encode())

# .npy: a (2^40, 2^20) float32 array in a 128-byte file, a shape whose product overflows, a header length past
# the end of the file
npy("npy-huge-shape-tiny-file", "{'descr': '<f4', 'fortran_order': False, 'shape': (1099511627776, 1048576), }")
npy("npy-shape-overflow", "{'descr': '<f8', 'fortran_order': False, 'shape': (4611686018427387904, 8), }")
npy("npy-header-len-beyond-file", "{'descr': '<f4', 'fortran_order': False, 'shape': (1,), }", b"\0" * 4,
    version=2, hlen=0xFFFFFFFF)
