#!/usr/bin/env python3
"""Host model of tput_clsplit.patch's cluster exchange (issue 14), run under random schedules.

    python3 dev/cuda/tpcl_check.py [--runs 20000] [--mutate]

A tile's S ranks (S = 2 or 4) each compute sc chunk partials (rank z: chunks z, z + S, ...). Rank r > 0, for its
i-th chunk: waits for phase i - 1 of its barrier sempty (i > 0), writes the partial into its slot in rank 0's shared
memory, arrives on rank 0's sfull[r - 1]. Rank 0, for its i-th chunk: adds its own partial, then for r = 1 .. S - 1
waits for phase i of sfull[r - 1], adds the slot, and (i + 1 < sc) arrives on rank r's sempty. The model is the
protocol only: a barrier completes its phase k at the k-th arrive (the 256 threads' arrives of one phase as one),
a wait for phase k passes once k phases are complete, the slot is one buffer a rank. Each step of a rank is an
event; the scheduler picks a runnable rank at random. Checked: no deadlock, rank 0 adds chunks 0 .. NC - 1 in order,
no slot is written before rank 0 read the value before it, and no rank exits while another may still arrive on its
barrier (remote arrives after the target's last wait would touch an exited CTA's shared memory).
--mutate runs broken variants (rank 0 releases a slot before reading it; rank r writes without waiting; rank 0
arrives after its last chunk too) and expects each to be caught.
"""
import argparse
import random


def run(S, sc, rng, mutate=None):
    """one schedule; returns None or the first violation found"""
    phases = {("sfull", r): 0 for r in range(1, S)}  # completed phases of rank 0's sfull[r - 1]
    phases.update({("sempty", r): 0 for r in range(1, S)})  # of rank r's sempty
    slot = {r: None for r in range(1, S)}  # the chunk whose partial is in rank r's slot, None when read
    added = []
    exited = set()

    def rank0():
        for i in range(sc):
            added.append(S * i)
            yield
            for r in range(1, S):
                if mutate == "early_release" and i + 1 < sc:
                    phases[("sempty", r)] += 1
                while phases[("sfull", r)] < i + 1:
                    yield "wait"
                if slot[r] is None:
                    raise AssertionError("rank 0 read an empty slot")
                added.append(slot[r])
                slot[r] = None
                yield
                if (i + 1 < sc or mutate == "late_arrive") and mutate != "early_release":
                    if r in exited:
                        raise AssertionError("rank 0 arrived on an exited rank's barrier")
                    phases[("sempty", r)] += 1
                yield

    def rank(r):
        for i in range(sc):
            yield  # the chunk's wgmmas
            if i > 0 and mutate != "no_wait":
                while phases[("sempty", r)] < i:
                    yield "wait"
            if slot[r] is not None:
                raise AssertionError("rank %d overwrote chunk %d before rank 0 read it" % (r, slot[r]))
            slot[r] = S * i + r
            yield
            if 0 in exited:
                raise AssertionError("rank %d arrived on rank 0's barrier after rank 0 exited" % r)
            phases[("sfull", r)] += 1
            yield

    gens = {0: rank0()}
    gens.update({r: rank(r) for r in range(1, S)})
    blocked = {}
    try:
        while gens:
            live = list(gens)
            rng.shuffle(live)
            progressed = False
            for k in live:
                try:
                    out = next(gens[k])
                except StopIteration:
                    del gens[k]
                    exited.add(k)
                    progressed = True
                    break
                if out != "wait":
                    progressed = True
                    break
            if not progressed:
                return "deadlock"
    except AssertionError as e:
        return str(e)
    if added != list(range(S * sc)):
        return "rank 0 added the chunks in the order %s" % added[:12]
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=20000)
    ap.add_argument("--mutate", action="store_true")
    a = ap.parse_args()
    rng = random.Random(1)
    cases = [(S, sc) for S in (2, 4) for sc in (1, 2, 3, 8)]
    bad = 0
    for S, sc in cases:
        for _ in range(a.runs // len(cases)):
            e = run(S, sc, rng)
            if e:
                print("S %d sc %d: %s" % (S, sc, e))
                bad += 1
                break
    print("protocol: %s (%d schedules, S 2 and 4, 1-8 chunks a rank)" % ("ok" if not bad else "FAILED", a.runs))
    if a.mutate:
        for m in ("early_release", "no_wait", "late_arrive"):
            caught = None
            for _ in range(a.runs // 4):
                S, sc = rng.choice([(2, 3), (4, 2), (4, 8)])
                caught = run(S, sc, rng, m)
                if caught:
                    break
            print("mutation %s: %s" % (m, "caught (%s)" % caught if caught else "NOT caught"))
            bad += not caught
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
