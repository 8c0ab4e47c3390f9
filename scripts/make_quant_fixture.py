#!/usr/bin/env python3
"""MLX's own quantizer as the oracle for depthdec's: random float32 matrices (with awkward groups: constant,
all-positive, all-negative, containing exact zeros) quantized by mlx.core.quantize at bits 8 and 4 and group
sizes 32/64/128, written as .npy for tests/test_quant.c. Needs `pip install "mlx[cpu]"` (run here on the CPU).

    python3 scripts/make_quant_fixture.py --out tests/fixtures
"""
import argparse
import os

import mlx.core as mx
import numpy as np


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="tests/fixtures")
    a = ap.parse_args()
    rng = np.random.default_rng(20261202)
    R, K = 12, 256
    w = (rng.standard_normal((R, K)) * 0.05).astype(np.float32)
    w[1, :64] = 0.25                      # constant group
    w[2, :] = np.abs(w[2, :]) + 0.01      # all positive
    w[3, :] = -np.abs(w[3, :]) - 0.01     # all negative
    w[4, ::7] = 0.0                       # exact zeros inside groups
    w[5, :] *= 40.0                       # a large row
    w[6, :] = rng.integers(-3, 4, K).astype(np.float32) * 0.125  # few distinct values (ties in rounding)
    np.save(os.path.join(a.out, "quant_w.npy"), w)
    for bits in (8, 4):
        for group in (32, 64, 128):
            q, s, b = mx.quantize(mx.array(w), group_size=group, bits=bits)
            tag = f"q{bits}_g{group}"
            np.save(os.path.join(a.out, f"quant_{tag}_q.npy"), np.array(q).astype(np.int64))
            np.save(os.path.join(a.out, f"quant_{tag}_s.npy"), np.array(s).astype(np.float32))
            np.save(os.path.join(a.out, f"quant_{tag}_b.npy"), np.array(b).astype(np.float32))
    print("mlx", mx.__version__, "wrote quant_* into", a.out)


if __name__ == "__main__":
    main()
