"""How many programs share one sequence (split-KV, "flash-decoding").

Decode launches one program (CTA) per (query-row block, KV head, sequence).
When that is too few to fill the GPU, each sequence's keys are split over
`num_splits` programs that write partial (o, lse) pairs, merged afterwards by a
combine kernel. The choice uses shapes only (never tensor values), so it costs
no device sync and is stable under CUDA-graph capture.

`slots` is the number of CTAs the GPU runs at once: SMs x resident CTAs per SM
of the kernel (the Triton kernel passes the SM count).

Rule: if the unsplit grid already fills ~80% of one wave, do not split (the
combine pass would cost more than it saves). Otherwise take, among split
counts that leave every split at least `min_tiles` KV tiles, the smallest whose
wave efficiency (work / (waves x SMs)) is within 5% of the best one, capped at
`max_splits`. With `one_wave` (the CUDA kernels, one CTA per SM), a count that
runs several waves gives way to the most splits that fit one wave, where that
is at least two: each wave pays every CTA's start and end again, more than the
few percent of idle SMs it saves (docs/design-sm90.md, "Host plan rules").
"""
from __future__ import annotations

import functools


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


@functools.lru_cache(maxsize=4096)
def choose_num_splits(ctas: int, seqlen_k: int, block_n: int, slots: int,
                      max_splits: int = 64, min_tiles: int = 2, one_wave: bool = False) -> int:
    if ctas >= 0.8 * slots:
        return 1
    n_tiles = cdiv(seqlen_k, block_n)
    limit = max(1, min(max_splits, n_tiles // min_tiles))
    if limit == 1:
        return 1
    eff = {}
    for s in range(1, limit + 1):
        work = ctas * s
        eff[s] = work / (cdiv(work, slots) * slots)
    best = max(eff.values())
    chosen = next(s for s in range(1, limit + 1) if eff[s] >= 0.95 * best)
    if one_wave and ctas * chosen > slots and slots // ctas >= 2:
        chosen = slots // ctas  # (< chosen <= limit)
    # Rebalance: no split left empty once the tile count is divided.
    return cdiv(n_tiles, cdiv(n_tiles, chosen))


@functools.lru_cache(maxsize=16)
def num_sms(device_index: int) -> int:
    import torch
    return torch.cuda.get_device_properties(device_index).multi_processor_count
