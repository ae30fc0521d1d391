"""The balanced schedule's arithmetic (fmha/cuda/csrc/sm90/schedule_balanced.cuh, BalancedWalk; the workspace slots
of common/params.h balanced_slot), modelled in Python line for line and checked on many batches without a GPU: every
tile of every unit is dealt to exactly one CTA, every unit with tiles is visited and no empty one is (CTA u % C writes
those, balanced_empty_units), the pieces a unit's visits name are the CTAs that visit it, no two pieces share a
workspace slot, and no CTA holds more than its share; at a visit's weight of one (the narrow loop) and four (the
64-key seesaw, balanced_visit_weight). The GPU tests (test_deepseek.py -k balanced) run the kernel itself."""
from __future__ import annotations

import random

import pytest


def share_start(W, Hkv, C, c):
    """BalancedWalk's constructor: (chunk, r0, r1, b, kvh) of CTA c of C over running weight sums W."""
    B = len(W) - 1
    total = Hkv * W[B]
    chunk = max(1, (total + C - 1) // C)
    r0, r1 = c * chunk, c * chunk + chunk
    lo, hi = 0, B
    while lo < hi:
        mid = (lo + hi) // 2
        if Hkv * W[mid + 1] > r0:
            hi = mid
        else:
            lo = mid + 1
    b, kvh = lo, 0
    if b < B:
        wt, base = W[b + 1] - W[b], Hkv * W[b]
        kvh = min(Hkv - 1, (r0 - base) // wt)
    return chunk, r0, r1, b, kvh


def visit_at(b, kvh, Hkv, start, wt, visit, c, chunk, r0, r1):
    """The BalancedVisit both walks fill for the unit at position start of weight wt, or None where its tiles start
    past CTA c's share (the walk ends there)."""
    n, ts = wt - visit, start + visit
    first, last = ts // chunk, (start + visit - 1 + n) // chunk
    if first > c:
        return None
    tb = max(ts, r0) - ts
    return dict(unit=b * Hkv + kvh, tile_begin=tb, tile_end=max(min(ts + n, r1) - ts, tb), piece=c - first,
                pieces=last - first + 1, first_cta=first, first_mid=1 if ts > first * chunk else 0)


def walk(W, Hkv, C, c, visit=1):
    """BalancedWalk for CTA c of C over running weight sums W (len B + 1; a unit weighs its tiles + `visit`, the
    positions of its visit (balanced_visit_weight: 1, the 64-key seesaw's 4), an empty one 0): its visits in order,
    as dicts."""
    B = len(W) - 1
    chunk, r0, r1, b, kvh = share_start(W, Hkv, C, c)
    visits = []
    while True:
        if b >= B or Hkv * W[b] >= r1:
            break
        if W[b + 1] == W[b]:
            lo, hi = b + 1, B
            while lo < hi:
                mid = (lo + hi) // 2
                if W[mid + 1] > W[b]:
                    hi = mid
                else:
                    lo = mid + 1
            b = lo
            if b >= B:
                break
        wt = W[b + 1] - W[b]
        v = visit_at(b, kvh, Hkv, Hkv * W[b] + kvh * wt, wt, visit, c, chunk, r0, r1)
        if v is None:
            break
        visits.append(v)
        kvh += 1
        if kvh == Hkv:
            kvh, b = 0, b + 1
    return visits


def walk_by_lengths(tiles, W, Hkv, C, c, visit):
    """BalancedWalkByLengths (the 64-key seesaw's producer): the start from the sums, then sequence by sequence with
    each weight taken from the lengths (tiles) again."""
    B = len(W) - 1
    chunk, r0, r1, b, kvh = share_start(W, Hkv, C, c)
    weight = lambda b: tiles[b] + visit if tiles[b] > 0 else 0  # noqa: E731 (balanced_seq_weight)
    at = W[min(b, B)]
    wt = W[b + 1] - at if b < B else 0
    visits = []
    while b < B and Hkv * at < r1:
        while wt == 0 and b + 1 < B:
            b += 1
            wt = weight(b)
        if wt == 0:
            break
        v = visit_at(b, kvh, Hkv, Hkv * at + kvh * wt, wt, visit, c, chunk, r0, r1)
        if v is None:
            break
        visits.append(v)
        kvh += 1
        if kvh == Hkv:
            kvh, at, b = 0, at + wt, b + 1
            wt = weight(b) if b < B else 0
    return visits


def empty_units(W, Hkv, C, c):
    """balanced_empty_units for CTA c of C: the units u = c, c + C, ... of sequences that weigh nothing."""
    B = len(W) - 1
    return [u for u in range(c, B * Hkv, C) if W[u // Hkv + 1] == W[u // Hkv]]


def balanced_slot(first_cta, first_mid, k):
    return 2 * (first_cta + k) + (first_mid if k == 0 else 0)


def batches():
    rnd = random.Random(0)
    yield [0], 1, 1
    yield [0, 0, 0], 1, 6
    yield [5], 1, 4
    yield [1, 1, 1], 2, 3
    yield [64, 0, 1, 0], 4, 16
    yield [64] * 64 + [0] * 64, 1, 128  # a batch padded with empty sequences
    yield [0] * 200, 1, 200
    yield [0] * 7 + [3] + [0] * 9, 2, 5
    for _ in range(300):
        B = rnd.randint(1, 40)
        Hkv = rnd.choice((1, 1, 2, 4))
        tiles = [rnd.choice((0, 1, 2, rnd.randint(0, 80), rnd.randint(0, 300))) for _ in range(B)]
        yield tiles, Hkv, B * Hkv * rnd.choice((1, 1, 2, 3, 4))
    for _ in range(100):  # grids capped at one wave: fewer CTAs than units
        B = rnd.randint(2, 60)
        Hkv = rnd.choice((1, 1, 2, 4))
        tiles = [rnd.choice((0, 1, 2, rnd.randint(0, 80), rnd.randint(0, 300))) for _ in range(B)]
        yield tiles, Hkv, rnd.randint(1, B * Hkv - 1)


@pytest.mark.parametrize("visit", (1, 4))
def test_the_seesaw_walk_by_lengths_visits_as_the_walk_over_the_sums(visit):
    """BalancedWalkByLengths, which reads the sums only to find its start, gives every CTA the visits BalancedWalk
    gives it, empty sequences, several KV heads and shares past the total included."""
    for tiles, Hkv, C in batches():
        W = [0]
        for n in tiles:
            W.append(W[-1] + (n + visit if n > 0 else 0))
        for c in range(C + 2):  # (and CTAs past the grid's, whose shares start past the total)
            assert walk_by_lengths(tiles, W, Hkv, C, c, visit) == walk(W, Hkv, C, c, visit), (tiles, Hkv, C, c)


@pytest.mark.parametrize("visit", (1, 4))
@pytest.mark.parametrize("tiles,Hkv,C", list(batches()))
def test_every_tile_dealt_once_and_every_piece_in_its_own_slot(tiles, Hkv, C, visit):
    W = [0]
    for n in tiles:
        W.append(W[-1] + (n + visit if n > 0 else 0))
    dealt = {}  # (unit, tile) -> CTA
    visits_of = {}  # unit -> [(cta, visit)]
    writers = {}  # unit -> CTAs that write its descriptor (and, one piece, its output)
    slots = {}
    chunk = max(1, (Hkv * W[-1] + C - 1) // C)
    for c in range(C):
        held = 0  # positions of the share this CTA works on: its tiles
        for u in empty_units(W, Hkv, C, c):
            writers.setdefault(u, []).append(c)
        for v in walk(W, Hkv, C, c, visit):
            u = v["unit"]
            if v["piece"] == 0:
                writers.setdefault(u, []).append(c)
            n = tiles[u // Hkv]
            assert n > 0, f"unit {u}: an empty unit visited"
            assert v["tile_begin"] < v["tile_end"], f"unit {u}: a visit without tiles"
            held += v["tile_end"] - v["tile_begin"]
            visits_of.setdefault(u, []).append((c, v))
            for t in range(v["tile_begin"], v["tile_end"]):
                assert (u, t) not in dealt, f"tile {t} of unit {u} dealt twice"
                dealt[(u, t)] = c
            if v["pieces"] > 1:
                slot = balanced_slot(v["first_cta"], v["first_mid"], v["piece"])
                assert 0 <= slot < 2 * C and slot not in slots, f"slot {slot} of unit {u} taken"
                slots[slot] = (u, v["piece"])
        assert held <= chunk, f"CTA {c} holds {held} positions, its share is {chunk}"
    for b, n in enumerate(tiles):
        for kvh in range(Hkv):
            u = b * Hkv + kvh
            assert all((u, t) in dealt for t in range(n)), f"unit {u} not covered"
            vs = visits_of.get(u, [])
            assert writers.get(u) == [vs[0][1]["first_cta"] if vs else u % C], f"unit {u}: descriptor by {writers.get(u)}"
            if n == 0:  # written by CTA u % C (balanced_empty_units), which needs no walk
                assert not vs
                continue
            assert vs, f"unit {u} never visited"
            pieces = {v["pieces"] for _, v in vs}
            assert pieces == {len(vs)}, f"unit {u}: {len(vs)} visits name {pieces} pieces"
            assert sorted(v["piece"] for _, v in vs) == list(range(len(vs)))
            assert [c for c, _ in vs] == [vs[0][1]["first_cta"] + k for k in range(len(vs))]
            if len(vs) > 1:  # the combine kernel finds every piece where its CTA wrote it
                for k, (_, v) in enumerate(sorted(vs, key=lambda cv: cv[1]["piece"])):
                    assert slots[balanced_slot(v["first_cta"], v["first_mid"], k)] == (u, k)
