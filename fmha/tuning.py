"""Per-GPU backend tables measured by the perf suite (`python -m perf --write-tuning`).

A table is fmha/tuning/<gpu-name>.json: a list of measured shapes, each with the
median time of every fmha backend. `lookup` finds the measured entry nearest
to a problem (same head dim, then nearest in log(B x S), T, the group size and
the grid's B x Hkv) and returns the fastest backend of that entry that can serve
the problem. No table for this GPU means no answer, and the dispatcher's
documented rule applies.
"""
from __future__ import annotations

import functools
import json
import math
import os
import re

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


def lookup(p, candidates):
    """(backend, note) from the measured table for p's GPU, or None."""
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
    name = min(times, key=times.get)
    shape = f"B={e['B']} T={e['T']} G={e['G']} Hkv={e['Hkv']} S={e['S']} D={e['D']}"
    others = ", ".join(f"{n} {t:.1f} us" for n, t in sorted(times.items(), key=lambda kv: kv[1]))
    return name, f"fastest on the nearest measured shape ({shape}: {others}) in {table['path']}"
