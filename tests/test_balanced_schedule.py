"""The balanced schedule's arithmetic (fmha/cuda/csrc/sm90/schedule_balanced.cuh, BalancedWalk; the workspace slots
of common/params.h balanced_slot), modelled in Python line for line and checked on many batches without a GPU: every
tile of every unit is dealt to exactly one CTA, every unit (an empty one too) is visited, the pieces a unit's visits
name are the CTAs that visit it, and no two pieces share a workspace slot. The GPU tests (test_deepseek.py -k
balanced) run the kernel itself."""
from __future__ import annotations

import random

import pytest


def walk(P, Hkv, C, c):
    """BalancedWalk for CTA c of C over running tile sums P (len B + 1): its visits in order, as dicts."""
    B = len(P) - 1
    total = Hkv * P[B]
    chunk = max(1, (total + C - 1) // C)
    r0, r1 = c * chunk, c * chunk + chunk
    lo, hi = 0, B
    while lo < hi:
        mid = (lo + hi) // 2
        if Hkv * P[mid] >= r0 or Hkv * P[mid + 1] > r0:
            hi = mid
        else:
            lo = mid + 1
    b, kvh = lo, 0
    if b < B:
        n, base = P[b + 1] - P[b], Hkv * P[b]
        if n > 0 and r0 > base:
            kvh = min(Hkv - 1, (r0 - base) // n)
    visits = []
    while b < B:
        n = P[b + 1] - P[b]
        start = Hkv * P[b] + kvh * n
        end = start + n
        first = start // chunk if n > 0 else min(C - 1, start // chunk)
        if first > c:
            break
        last = (end - 1) // chunk if n > 0 else first
        tb = max(start, r0) - start
        visits.append(dict(unit=b * Hkv + kvh, tile_begin=tb, tile_end=max(min(end, r1) - start, tb),
                           piece=c - first, pieces=last - first + 1, first_cta=first,
                           first_mid=1 if start > first * chunk else 0))
        kvh += 1
        if kvh == Hkv:
            kvh, b = 0, b + 1
    return visits


def balanced_slot(first_cta, first_mid, k):
    return 2 * (first_cta + k) + (first_mid if k == 0 else 0)


def batches():
    rnd = random.Random(0)
    yield [0], 1, 1
    yield [0, 0, 0], 1, 6
    yield [5], 1, 4
    yield [1, 1, 1], 2, 3
    yield [64, 0, 1, 0], 4, 16
    for _ in range(300):
        B = rnd.randint(1, 40)
        Hkv = rnd.choice((1, 1, 2, 4))
        tiles = [rnd.choice((0, 1, 2, rnd.randint(0, 80), rnd.randint(0, 300))) for _ in range(B)]
        yield tiles, Hkv, B * Hkv * rnd.choice((1, 1, 2, 3, 4))


@pytest.mark.parametrize("tiles,Hkv,C", list(batches()))
def test_every_tile_dealt_once_and_every_piece_in_its_own_slot(tiles, Hkv, C):
    P = [0]
    for n in tiles:
        P.append(P[-1] + n)
    dealt = {}  # (unit, tile) -> CTA
    visits_of = {}  # unit -> [(cta, visit)]
    slots = {}
    for c in range(C):
        for v in walk(P, Hkv, C, c):
            u = v["unit"]
            visits_of.setdefault(u, []).append((c, v))
            for t in range(v["tile_begin"], v["tile_end"]):
                assert (u, t) not in dealt, f"tile {t} of unit {u} dealt twice"
                dealt[(u, t)] = c
            if v["pieces"] > 1:
                slot = balanced_slot(v["first_cta"], v["first_mid"], v["piece"])
                assert 0 <= slot < 2 * C and slot not in slots, f"slot {slot} of unit {u} taken"
                slots[slot] = (u, v["piece"])
    for b, n in enumerate(tiles):
        for kvh in range(Hkv):
            u = b * Hkv + kvh
            assert all((u, t) in dealt for t in range(n)), f"unit {u} not covered"
            vs = visits_of.get(u, [])
            assert vs, f"unit {u} never visited"
            pieces = {v["pieces"] for _, v in vs}
            assert pieces == {len(vs)}, f"unit {u}: {len(vs)} visits name {pieces} pieces"
            assert sorted(v["piece"] for _, v in vs) == list(range(len(vs)))
            assert [c for c, _ in vs] == [vs[0][1]["first_cta"] + k for k in range(len(vs))]
            if len(vs) > 1:  # the combine kernel finds every piece where its CTA wrote it
                for k, (_, v) in enumerate(sorted(vs, key=lambda cv: cv[1]["piece"])):
                    assert slots[balanced_slot(v["first_cta"], v["first_mid"], k)] == (u, k)
