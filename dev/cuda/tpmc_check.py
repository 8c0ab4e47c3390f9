#!/usr/bin/env python3
"""Host model of tput_mcast.patch's cluster protocol (and tput_pp.patch's later stage release), no GPU needed.

Two checks:
1. grid: for every cluster shape (cm, ct) and padded grid, blockIdx.x -> (mb, tt, z) as tp_linear computes it
   (rank = blockIdx.x % cs, mi = rank % cm, ti = rank / cm) covers every (row block, token tile, slab) of the padded
   grid exactly once; the CTAs of a cluster share (tt, z) along cm and (mb, z) along ct, which the multicast masks
   assume (wmask: ranks mi, mi + cm; amask: ranks cm ti, cm ti + 1).
2. ring: the 4-stage mbarrier ring of one cluster run as interleaved state machines under random schedules and
   random copy latencies: each CTA's producer (the pre-PDL weight prefetch, empty waits, expect_tx, multicast copies
   with complete_tx on every destination's full barrier), 8 consumer warps a CTA (full waits, the stage's contents
   checked: every m-tile's weights and both activation terms of the right k block, row block and token tile; release
   to the CTAs in the kernel's release lambda), mbarrier semantics as in the PTX ISA (pending arrivals, transaction
   count that may go negative before expect_tx, phase parity). Flags: a copy landing in a stage some consumer still
   holds (read before its release), a wrong tag, a deadlock, a copy or arrival reaching a CTA after it passed the
   final cluster barrier. Consumer release modes: 0 the bf16 path of tput_mcast (a chunk's two stages at its end),
   1 tput_pp's (a chunk's two stages after the next chunk's were waited for), 2 the QINT path (each stage after its
   own wgmmas).

    python3 dev/cuda/tpmc_check.py [runs]     (prints 'ok' lines; exits 1 on the first failure)
    python3 dev/cuda/tpmc_check.py --mutate   (each deliberate protocol error must be caught: prints 'caught')
"""
import random
import sys

STAGES = 4
MUT = None  # a deliberate protocol error (--mutate)


def grid_check():
    n = 0
    for MBk in range(1, 7):
        for TT in range(1, 6):
            for S in (1, 2, 4):
                for cm in (1, 2):
                    for ct in (1, 2):
                        if TT % ct:
                            continue
                        cs = cm * ct
                        MBp = (MBk + cm - 1) // cm * cm
                        tiles = MBp * TT * S
                        assert tiles % cs == 0, ("grid not a multiple of the cluster", MBk, TT, S, cm, ct)
                        TTc = (TT + ct - 1) // ct
                        seen = {}
                        for b in range(tiles):
                            rank = b % cs
                            mi, ti = rank % cm, rank // cm
                            bx = b // cs
                            tt = ct * (bx % TTc) + ti
                            z = (bx // TTc) % S
                            mb = cm * (bx // (TTc * S)) + mi
                            key = (mb, tt, z)
                            assert key not in seen, ("twice", key, MBk, TT, S, cm, ct)
                            assert mb < MBp and tt < TT and z < S, ("outside", key)
                            seen[key] = b
                        assert len(seen) == tiles
                        for b0 in range(0, tiles, cs):  # the members of one cluster
                            m = {}
                            for r in range(cs):
                                b = b0 + r
                                bx = b // cs
                                m[r] = (cm * (bx // (TTc * S)) + r % cm, ct * (bx % TTc) + r // cm, (bx // TTc) % S)
                            for r in range(cs):
                                mi, ti = r % cm, r // cm
                                if cm > 1:  # amask partners: same token tile and slab
                                    p = 3 << (cm * ti)
                                    for q in range(cs):
                                        if p >> q & 1:
                                            assert m[q][1:] == m[r][1:], ("amask", m, r, q)
                                if ct > 1:  # wmask partners: same row block and slab
                                    p = (1 << mi) | (1 << (mi + cm))
                                    for q in range(cs):
                                        if p >> q & 1:
                                            assert m[q][0] == m[r][0] and m[q][2] == m[r][2], ("wmask", m, r, q)
                        n += 1
    print("ok grid: %d shapes" % n)


class Bar:
    def __init__(self, count):
        self.count, self.pending, self.tx, self.phase = count, count, 0, 0

    def _check(self):
        if self.pending == 0 and self.tx == 0:
            self.phase ^= 1
            self.pending = self.count

    def arrive(self):
        assert self.pending > 0, "arrival beyond the count"
        self.pending -= 1
        self._check()

    def expect_tx(self, b):
        self.tx += b
        self.arrive()

    def complete_tx(self, b):
        self.tx -= b
        if self.pending == 0:
            self._check()

    def done(self, parity):  # try_wait.parity: the phase of this parity has completed
        return self.phase != parity


def ring_run(cm, ct, nkb, pp, seed):
    rng = random.Random(seed)
    cs = cm * ct
    WB, HB = 8, 1  # bytes units: a weight m-tile, an activation term (any positive sizes)
    SB = 8 * WB + 2 * HB
    full = [[Bar(1) for _ in range(STAGES)] for _ in range(cs)]
    empty = [[Bar(8 if MUT == "count" else 8 * (cm + ct - 1)) for _ in range(STAGES)] for _ in range(cs)]
    stage = [[dict() for _ in range(STAGES)] for _ in range(cs)]  # contents: key -> tag
    holders = [[set() for _ in range(STAGES)] for _ in range(cs)]  # consumer warps between full wait and release
    exited = [False] * cs
    inflight = []  # (dst, s, key, tag, bytes)
    mb_of = lambda r: r % cm  # row block within the cluster
    tt_of = lambda r: r // cm

    def issue(r, s, kb, weights, acts):
        mi, ti = r % cm, r // cm
        if weights:
            share = range(ti * 8 // ct, (ti + 1) * 8 // ct)
            dsts = [mi, mi + cm] if ct > 1 else [r]
            for i in share:
                for d in dsts:
                    inflight.append((d, s, ("w", i), (kb, mb_of(r), i), WB))
        if acts:
            if cm > 1:
                dsts = [cm * ti, cm * ti + 1] if MUT != "amask" else [r]
                for d in dsts:
                    inflight.append((d, s, ("a", mi), (kb, tt_of(r), mi), HB))
            else:
                for term in (0, 1):
                    inflight.append((r, s, ("a", term), (kb, tt_of(r), term), HB))

    def producer(r):
        pre = min(STAGES, nkb)
        for kb in range(pre):  # weights before the PDL wait
            full[r][kb].expect_tx(SB)
            issue(r, kb, kb, True, False)
            yield
        s, rnd = 0, 0
        for kb in range(nkb):
            if rnd > 0 and MUT != "nowait":
                while not empty[r][s].done((rnd - 1) & 1):
                    yield
            if kb >= pre:
                full[r][s].expect_tx(SB)
            issue(r, s, kb, kb >= pre, True)
            yield
            s += 1
            if s == STAGES:
                s, rnd = 0, rnd + 1

    def release(r, s):
        mi, ti = r % cm, r // cm
        targets = [r]
        if ct > 1 and MUT != "release":
            targets.append(mi + cm * (1 - ti))
        if cm > 1:
            targets.append(1 - mi + cm * ti)
        for t in targets:
            assert not exited[t], "arrival at an exited CTA"
            empty[t][s].arrive()

    def consumer(r, w):
        s, rnd = 0, 0
        held = []  # stages read and not yet released
        chunk_of = []
        for kb in range(nkb):
            while not full[r][s].done(rnd & 1):
                yield
            holders[r][s].add(w)
            want = {("w", i): (kb, mb_of(r), i) for i in range(8)}
            want.update({("a", t): (kb, tt_of(r), t) for t in (0, 1)})
            for k, v in want.items():
                got = stage[r][s].get(k)
                assert got == v, ("stage contents", r, s, k, got, v)
            held.append(s)
            chunk_of.append(kb // 2)
            yield
            # releases: mcast: a chunk's stages after its wgmmas (at the chunk's end); pp: chunk c's after chunk
            # c + 1's stages were waited for (or at the end); QINT: each stage after its own wgmmas
            c = kb // 2
            if pp == 2:
                holders[r][s].discard(w)
                release(r, s)
                held, chunk_of = held[:-1], chunk_of[:-1]
                yield
            elif kb % 2 == 1:
                rel = [x for x, cc in zip(held, chunk_of) if cc == (c - 1 if pp else c)]
                for x in rel:
                    holders[r][x].discard(w)
                    release(r, x)
                keep = [(x, cc) for x, cc in zip(held, chunk_of) if cc != (c - 1 if pp else c)]
                held, chunk_of = [x for x, _ in keep], [cc for _, cc in keep]
                yield
            s += 1
            if s == STAGES:
                s, rnd = 0, rnd + 1
        for x in held:  # the last chunk (and an odd k block)
            holders[r][x].discard(w)
            release(r, x)

    actors = []
    for r in range(cs):
        actors.append(("p", r, producer(r)))
        for w in range(8):
            actors.append(("c", r, consumer(r, w)))
    live = {i: True for i in range(len(actors))}
    steps = 0
    while any(live.values()) or inflight:
        steps += 1
        assert steps < 200000, "deadlock"
        if inflight and (rng.random() < 0.35 or not any(live.values())):
            d, s, key, tag, b = inflight.pop(rng.randrange(len(inflight)))
            assert not exited[d], "copy into an exited CTA"
            assert not holders[d][s], ("copy into a stage a consumer still reads", d, s, key, tag, holders[d][s])
            stage[d][s][key] = tag
            full[d][s].complete_tx(b)
            continue
        cand = [i for i in live if live[i]]
        if not cand:
            continue
        i = rng.choice(cand)
        try:
            next(actors[i][2])
        except StopIteration:
            live[i] = False
    assert not inflight  # the final cluster barrier: every actor of every CTA finished, nothing in flight
    for r in range(cs):
        exited[r] = True
        for s in range(STAGES):
            assert full[r][s].pending == 1 and full[r][s].tx == 0, ("full barrier not at rest", r, s)
            assert empty[r][s].pending == empty[r][s].count, ("empty barrier not at rest", r, s)
    return steps


def mutate():
    global MUT
    for MUT, cm, ct in (("count", 2, 2), ("amask", 2, 1), ("release", 1, 2), ("nowait", 2, 1)):
        try:
            for k in range(50):
                ring_run(cm, ct, 16, 0, seed=k)
        except AssertionError as e:
            print("caught %s (cm %d ct %d): %s" % (MUT, cm, ct, str(e)[:100]))
            continue
        print("NOT CAUGHT: %s" % MUT)
        sys.exit(1)


def main():
    if sys.argv[1:] == ["--mutate"]:
        return mutate()
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 300
    grid_check()
    for pp in (0, 1, 2):
        for cm in (1, 2):
            for ct in (1, 2):
                for nkb in (2, 4, 6, 8, 16):
                    for k in range(runs // 10):
                        ring_run(cm, ct, nkb, pp, seed=hash((cm, ct, nkb, pp, k)) & 0xFFFFFFFF)
                print("ok ring: cm %d ct %d, release mode %d (k blocks 2-16, %d schedules each)" % (cm, ct, pp, runs // 10))


if __name__ == "__main__":
    main()
