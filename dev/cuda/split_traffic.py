#!/usr/bin/env python3
"""The bytes a frame's split-K partials move through memory, from the throughput executor's choices (issue 14).

    python3 dev/cuda/split_traffic.py [--sms 132]

tp_shape (src/cuda/tput.cu as of 554b457, mirrored here: keep the two in step) picks per linear and batch the
token tile BN and the split S. With S > 1 the tile writes NC - NC / S + 1 arrays of T x Nr floats (slab 0's
running sums, then every later slab's chunk partials: the contract adds chunk partials onto the running sum one at
a time, in chunk order, so a slab cannot pre-add its own) and tp_epi reads them back; with S = 1 one array. Per
frame (decode, c0 given: 31 passes, pass 1 with two positions a stream) at GPT and CSM dims. A computation, not a
measurement: how much of it stays in L2 is not modelled.
"""
import argparse

CKT, PART = 8, 64 << 20


def shape(Nr, K, T, bnmax, sms):
    NC, best, out = K // (16 * CKT), 1e30, (bnmax, 1)
    bn = 32 if T <= 32 else 64  # the 32-token tile where a 64-token tile is mostly padding (554b457)
    while bn <= bnmax:
        S = 1
        while S <= NC and S <= 16:
            if NC % S == 0:
                pb = (NC - NC // S + 1) * T * Nr * 4
                if not (S > 1 and pb > PART):
                    tiles = ((Nr + 127) // 128) * ((T + bn - 1) // bn) * S
                    cyc = (tiles + sms - 1) // sms * bn * (K / S) / 4.0 + (2.0 * pb / (16.0 * sms) if S > 1 else 0) + tiles * 8.0
                    if cyc < best:
                        best, out = cyc, (bn, S)
            S *= 2
        bn *= 2
    return out


MODELS = {  # (name, rows Nr, K) a layer; layers; vocabulary (the head's rows)
    "gpt": ([("qkv", 3072, 1024), ("out", 1024, 1024), ("fc1", 4096, 1024), ("fc2", 1024, 4096)], 4, 2048),
    "csm": ([("qkv", 1536, 1024), ("out", 1024, 1024), ("fc1 (gate/up)", 16384, 1024), ("fc2", 1024, 8192)], 4, 2051),
}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sms", type=int, default=132)
    a = ap.parse_args()
    print("| model | batch | linear (pass 2 on) | BN | S | arrays | MB a layer, written + read |")
    print("|---|---:|---|---:|---:|---:|---:|")
    for m, B in (("gpt", 64), ("gpt", 256), ("gpt", 512), ("csm", 256)):
        lins, L, V = MODELS[m]
        total = 0.0
        for p in range(1, 32):
            T = 2 * B if p == 1 else B
            for name, Nr, K in lins:
                bn, S = shape(Nr, K, T, 128, a.sms)
                NC = K // 128
                arrays = NC - NC // S + 1 if S > 1 else 1
                total += 2.0 * arrays * T * Nr * 4 * L
                if p == 2:
                    print("| %s | %d | %s | %d | %d | %d | %.1f |" % (m, B, name, bn, S, arrays, 2.0 * arrays * T * Nr * 4 / 1e6))
            Nr = (V + 15) // 16 * 16
            bn, S = shape(Nr, 1024, B, 128, a.sms)
            total += 2.0 * (8 - 8 // S + 1 if S > 1 else 1) * B * Nr * 4
        print("| %s | %d | **a frame** | | | | **%.0f** |" % (m, B, total / 1e6))


if __name__ == "__main__":
    main()
