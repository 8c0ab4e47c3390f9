#!/usr/bin/env python3
"""The L2 bytes a frame's tensor-core linears must move under the exact scheme, and the floor they set (issue 14).

    python3 dev/cuda/l2_floor.py [--depthdec build/depthdec] [--sms 132] [--l2 8.56] [--peak 790] [--detail B] gpt csm

A computation, not a measurement. Every linear of a frame (decode, c0 given: pass 1 on 2 B tokens, passes 2..31 on
B, the head on B rows a level) is a product of Nr weight rows by T tokens over K, each weight multiplied by the hi
and the lo bf16 term of the activation (floor.py). A CTA computing a BM x BN tile over a K slab (split S) reads BM
rows of weights and 2 BN rows of activation terms, 2 bytes an element, from L2 into shared memory; a cluster of cm
CTAs along the rows (sharing a token tile) or cn along the tokens (sharing a row block) loads the shared operand once
by multicast, so a CTA reads (BM / cn + 2 BN / cm) (K / S) 2 bytes. With S > 1 the contract's chunk order (chunks of
128 k: a slab cannot pre-add its own chunk partials) makes the tiles write NC - NC / S + 1 fp32 arrays of T x Nr
that the epilogue reads back (split_traffic.py), counted here as L2 traffic both ways (as if they stayed in L2). A
linear's time is at least max(its L2 bytes / the L2 bandwidth, its waves x one CTA's MMAs at the SM's share of the
peak); the table takes, per linear, the tile (BM in 64, 128, 256; BN in 32, 64, 128, 256; BM BN <= 128 x 128),
split and cluster shape with the least of that bound, and sums a frame; the last column is the same bound at
`tp_shape`'s choices (BM 128, no multicast; split_traffic.py's mirror of tp_shape). Not counted: attention, norms,
epilogues' other bytes, sampling, launches or dependency waits, fill and drain (all of which the measured frame
pays): a floor, below what any executor reaches. Defaults: 132 SMs; L2 8.56 TB/s (the ring probe's best
L2-resident re-read rate on the H200, docs/cuda_derisk.txt); 790 TFLOP/s dense bf16 (floor.py's peak).
"""
import argparse
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from floor import dims  # noqa: E402
from split_traffic import shape  # noqa: E402

CKT = 8  # k-tiles of 16 a chunk: a chunk is 128 k
# a CTA's tile at most: the running sums and the chunk partial (two fp32 sets, the contract's chunk order) in the
# registers of two consumer warpgroups: 2 x 128 x 128 / 256 threads = 128 registers a thread
ACC_MAX = 128 * 128


def bound(Nr, K, T, BM, BN, S, cm, cn, sms, l2, peak):
    """a linear at one tile, split and cluster shape: (max(L2 bytes / l2, MMA waves) seconds, L2 bytes)"""
    NC, ctas = K // (16 * CKT), math.ceil(Nr / BM) * math.ceil(T / BN) * S
    part = (NC - NC // S + 1) * T * Nr * 4 * 2 if S > 1 else 0
    byts = ctas * (BM / cn + 2.0 * BN / cm) * (K // S) * 2 + part
    return max(byts / l2, math.ceil(ctas / sms) * (2.0 * 2 * BM * BN * (K // S)) / (peak / sms)), byts


def linear_floor(Nr, K, T, sms, l2, peak, clusters, bms=(64, 128, 256)):
    """the least bound over tiles, splits and cluster shapes: (seconds, bytes, (BM, BN, S, cm, cn))"""
    NC, best = K // (16 * CKT), None
    for BM in bms:
        for BN in (32, 64, 128, 256):
            for S in (1, 2, 4, 8, 16):
                for cm, cn in clusters:
                    if BM * BN > ACC_MAX or NC % S or cm > math.ceil(Nr / BM) or cn > math.ceil(T / BN):
                        continue
                    t, byts = bound(Nr, K, T, BM, BN, S, cm, cn, sms, l2, peak)
                    if best is None or t < best[0]:
                        best = (t, byts, (BM, BN, S, cm, cn))
    return best


def at_shape(Nr, K, T, sms, l2, peak):
    """the same bound at tp_shape's choice (split_traffic.py's mirror of it): BM 128, no multicast"""
    BN, S = shape(Nr, K, T, 128, sms)
    return bound(Nr, K, T, 128, BN, S, 1, 1, sms, l2, peak) + ((128, BN, S, 1, 1),)


def linears(d):
    """(name, rows Nr, K) of a layer's linears, then the head's (tput.cu's rows: MT 16)"""
    D, F = d["D"], d["F"]
    return [("qkv", (d["H"] + 2 * d["KVH"]) * d["HD"], D), ("out", D, d["H"] * d["HD"]),
            ("fc1", (2 if d["gated"] else 1) * F, D), ("fc2", D, F), ("head", (d["V"] + 15) // 16 * 16, D)]


def frame(d, B, lf):
    """a frame's (seconds, bytes) with lf(Nr, K, T) -> (seconds, bytes, shape) for each linear"""
    L, Q = d["L"], d["Q"]
    tot_t = tot_b = 0.0
    for name, Nr, K in linears(d):
        # the layers: pass 1 on two positions a stream, passes 2..Q-1 on one; the head: B rows at levels 1..Q-1
        for T, n in (((B, Q - 1),) if name == "head" else ((2 * B, L), (B, (Q - 2) * L))):
            t, b, _ = lf(Nr, K, T)
            tot_t += n * t
            tot_b += n * b
    return tot_t, tot_b


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("models", nargs="*", default=["gpt", "csm"])
    ap.add_argument("--depthdec", default="build/depthdec")
    ap.add_argument("--sms", type=int, default=132)
    ap.add_argument("--l2", type=float, default=8.56, help="L2 TB/s")
    ap.add_argument("--peak", type=float, default=790.0, help="dense bf16 TFLOP/s")
    ap.add_argument("--detail", type=int, default=0,
                    help="a batch: each linear's best shape at BM 128 (tp_linear's), at any BM, with 2x2 multicast")
    a = ap.parse_args()
    l2, peak = a.l2 * 1e12, a.peak * 1e12
    shapes = [("none", [(1, 1)]), ("2x1 / 1x2", [(1, 1), (2, 1), (1, 2)]),
              ("up to 2x2", [(1, 1), (2, 1), (1, 2), (2, 2)]),
              ("clusters up to 8", [(m, n) for m in (1, 2, 4, 8) for n in (1, 2, 4, 8) if m * n <= 8])]
    if not a.detail:
        print("| model (bf16) | batch | " + " | ".join("multicast %s: GB / ms" % s for s, _ in shapes) +
              " | tp_shape's choices: GB / ms |")
        print("|---|---:|" + "---:|" * (len(shapes) + 1))
    for m in a.models:
        d = dims(a.depthdec, m)
        if a.detail:
            for name, Nr, K in linears(d):
                for cl, bms in (([(1, 1)], (128,)), ([(1, 1)], (64, 128, 256)),
                                ([(1, 1), (2, 1), (1, 2), (2, 2)], (64, 128, 256))):
                    t, b, c = linear_floor(Nr, K, a.detail, a.sms, l2, peak, cl, bms)
                    print("%s B%d %s Nr %d K %d: %.2f us, %.1f MB, BM %d BN %d S %d cluster %dx%d" % (
                        m, a.detail, name, Nr, K, t * 1e6, b / 1e6, *c))
            continue
        for B in (8, 64, 256, 512):
            cells = []
            for _, cl in shapes:
                t, b = frame(d, B, lambda Nr, K, T: linear_floor(Nr, K, T, a.sms, l2, peak, cl))
                cells.append("%.1f / %.2f" % (b / 1e9, t * 1e3))
            t, b = frame(d, B, lambda Nr, K, T: at_shape(Nr, K, T, a.sms, l2, peak))
            cells.append("%.1f / %.2f" % (b / 1e9, t * 1e3))
            print("| %s | %d | %s |" % (m.upper(), B, " | ".join(cells)))


if __name__ == "__main__":
    main()
