"""Per-GPU backend tables measured by the perf suite (`python -m perf --write-tuning`).

A table is fmha/tuning/<gpu-name>.json: a list of measured shapes, each with the
median time of every fmha backend. `lookup` finds the measured entry nearest
to a problem (same head dim, then nearest in log(B x S), T, the group size and
the grid's B x Hkv) and returns the fastest backend of that entry that can serve
the problem; where several are within run-to-run noise (NOISE) of the fastest, the one
with the lowest eager per-call cost. No table for this GPU means no answer, and the
dispatcher's documented rule applies.
"""
from __future__ import annotations

import functools
import json
import math
import os
import re
from typing import NamedTuple, Optional

TABLE_DIR = os.path.join(os.path.dirname(__file__), "tuning")


def gpu_key(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


@functools.lru_cache(maxsize=8)
def load_table(device_index: int):
    import torch
    name = torch.cuda.get_device_name(device_index)
    path = os.path.join(TABLE_DIR, gpu_key(name) + ".json")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        table = json.load(f)
    table["path"] = os.path.relpath(path, os.path.dirname(TABLE_DIR))
    return table


# Entries whose times are within this fraction of the fastest are a tie: one suite run on one GPU cannot order
# them (run-to-run spreads of 1-2% on an H200), and another H200 may order them the other way.
NOISE = 0.02


class TablePick(NamedTuple):
    backend: str
    note: str  # why, with the table's times and how far apart they are
    within_noise: bool  # another candidate's time is within NOISE of the fastest


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%" if x < 0.1 else f"{100 * x:.0f}%"


def _us(t: float) -> str:
    return f"{t:.2f} us" if t < 10 else f"{t:.1f} us"


def lookup(p, candidates, eager_us=None) -> Optional[TablePick]:
    """The pick for p from the measured table of its GPU, or None (no table, a problem of another kind than the
    table's, no entry of p's head dim, no time for any candidate). Among candidates within NOISE of the fastest,
    the one of the lowest eager per-call host time (`eager_us`: name -> microseconds) wins: within noise, graph
    replay cannot tell them apart, while a loop run eagerly can."""
    if p.has_block_table or p.kv_shared:  # the table's shapes are contiguous caches with V a tensor of its own:
        return None  # paged, the Triton kernel loses far more (1.4-1.6x at B1) than cuda; a latent read once differs
    table = load_table(p.device.index if p.device.index is not None else 0)
    if not table:
        return None
    best = None
    for e in table.get("entries", []):
        if e["D"] != p.head_dim:
            continue
        dist = (abs(math.log2(e["B"] * e["S"]) - math.log2(p.batch * p.seqlen_k))
                + abs(math.log2(e["T"]) - math.log2(p.seqlen_q))
                + abs(math.log2(e["G"]) - math.log2(p.group_size))
                + abs(math.log2(e["B"] * e["Hkv"]) - math.log2(p.batch * p.heads_kv)))
        if best is None or dist < best[0]:
            best = (dist, e)
    if best is None:
        return None
    e = best[1]
    times = {name: t for name, t in e["median_us"].items() if name in candidates and t is not None}
    if not times:
        return None
    fastest = min(times, key=times.get)
    tied = [n for n, t in times.items() if t <= times[fastest] * (1 + NOISE)]
    eager = eager_us or {}
    name = min(tied, key=lambda n: (eager.get(n) if eager.get(n) is not None else math.inf, times[n]))
    shape = f"B={e['B']} T={e['T']} G={e['G']} Hkv={e['Hkv']} S={e['S']} D={e['D']} in {table['path']}"
    ranked = sorted(times, key=times.get)
    listed = " vs ".join(f"{n} {_us(times[n])}" for n in [name] + [n for n in ranked if n != name])
    if len(times) == 1:
        return TablePick(name, f"the only candidate timed on the nearest measured shape ({shape}: {listed})", False)
    if len(tied) == 1:
        runner_up = ranked[1]
        apart = times[runner_up] / times[name] - 1
        return TablePick(name, f"fastest on the nearest measured shape ({shape}): {listed}, {_pct(apart)} apart",
                         False)
    spread = max(times[n] for n in tied) / times[fastest] - 1
    others = [n for n in tied if n != name]
    if eager.get(name) is not None and all(eager.get(n) is not None for n in others):
        costs = ", ".join(f"{n} {eager[n]:.0f} us" for n in [name] + others)
        why = f"took {name} for its lower per-call cost (eager host time: {costs})"
    else:
        why = f"took {name}"
    return TablePick(name, f"within noise on the nearest measured shape ({shape}): {listed}, {_pct(spread)} apart, "
                     f"under the {_pct(NOISE)} noise margin: {why}", True)
