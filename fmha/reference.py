"""The fp32 reference backend: the ground truth of every test.

Plain PyTorch in float32 on whatever device the inputs live on. It implements
the full contract of `fmha.attention`: GQA/MQA by head grouping, bottom-right
aligned causal masking, sliding windows, capped scores, left-padded caches,
per-sequence cache lengths, the LSE, rows with no visible key (zeros out,
LSE = -inf; with sinks, LSE = the sink), paged caches (a gather through the
block table, its ids clamped into the pool as the kernels clamp them), a V head
dim of its own (V may be K's memory: it is read as given) and attention sinks.
"""
from __future__ import annotations

import torch


def visible_mask(seqlens: torch.Tensor, T: int, S: int, causal: bool, window_left: int = -1,
                 window_right: int = -1, leftpad=None) -> torch.Tensor:
    """Boolean [B, T, S]: may query t of sequence b attend to key j?

    Keys at j >= seqlens[b] are never visible; with `causal`, query t sees keys
    j <= seqlens[b] - T + t (bottom-right alignment, as flash-attn); a window bound of
    0 or more (-1: none) keeps keys j >= i - window_left and j <= i + window_right, i = seqlens[b] - T + t; with
    `leftpad` (int [B]) keys j < leftpad[b] are not visible either. Lengths are clamped to [0, S], as the
    kernels do.
    """
    L = seqlens.to(torch.int64).clamp(0, S).view(-1, 1, 1)
    j = torch.arange(S, device=seqlens.device).view(1, 1, S)
    i = L - T + torch.arange(T, device=seqlens.device).view(1, T, 1)  # each query's position
    mask = j < L
    if causal:
        mask = mask & (j <= i)
    if window_left >= 0:
        mask = mask & (j >= i - window_left)
    if window_right >= 0:
        mask = mask & (j <= i + window_right)
    if leftpad is not None:
        mask = mask & (j >= leftpad.to(device=seqlens.device, dtype=torch.int64).view(-1, 1, 1))
    return mask.expand(-1, T, S)


def gather_pages(pool, block_table, b: int):
    """Sequence b's logical cache [capacity, Hkv, D] from a page pool [num_blocks, page_size, Hkv, D]:
    token j at page block_table[b, j // page_size] (clamped into [0, num_blocks)), row j % page_size."""
    num_blocks, page_size = pool.shape[0], pool.shape[1]
    j = torch.arange(block_table.shape[1] * page_size, device=pool.device)
    ids = block_table[b].to(device=pool.device, dtype=torch.int64).clamp(0, num_blocks - 1)
    return pool[ids[j // page_size], j % page_size]


def attention_reference(q, k_cache, v_cache, cache_seqlens, softmax_scale: float, causal: bool,
                        compute_dtype=torch.float32, block_table=None, sinks=None, window_size=(-1, -1),
                        softcap: float = 0.0, cache_leftpad=None):
    """Return (out [B, T, Hq, D_v] in compute_dtype, lse [B, Hq, T] float32).

    With `block_table`, k_cache and v_cache are page pools (see gather_pages) and S is the table's
    capacity, max_blocks_per_seq * page_size. `sinks` (float32 [Hq], or None): query head h's logit
    sinks[h], unscaled, joins the denominator of each of its rows, p_j = exp(s_j) / (exp(sinks[h]) +
    sum_k exp(s_k)) with s = softmax_scale * q.k, and lse = log(exp(sinks[h]) + sum_k exp(s_k)): the log of
    the whole denominator, so that out = sum_j exp(s_j - lse) v_j still holds. window_size (left, right):
    visible_mask's sliding window (-1: no bound). softcap > 0: each score s becomes softcap * tanh(s / softcap)
    before the softmax. cache_leftpad (int [B]): sequence b's keys start at cache_leftpad[b]."""
    B, T, Hq, D = q.shape
    Hkv, Dv = k_cache.shape[2], v_cache.shape[3]
    S = k_cache.shape[1] if block_table is None else block_table.shape[1] * k_cache.shape[1]
    G = Hq // Hkv
    if cache_seqlens is None:
        cache_seqlens = torch.full((B,), S, dtype=torch.int32, device=q.device)
    mask = visible_mask(cache_seqlens, T, S, causal, *window_size, leftpad=cache_leftpad)  # [B, T, S]
    out = torch.empty(B, T, Hq, Dv, dtype=compute_dtype, device=q.device)
    lse = torch.empty(B, Hq, T, dtype=torch.float32, device=q.device)
    sink = None if sinks is None else sinks.to(device=q.device, dtype=compute_dtype).view(Hkv, G, 1, 1)
    for b in range(B):  # one sequence at a time keeps the fp32 copies of the cache small
        qb = q[b].to(compute_dtype).view(T, Hkv, G, D)
        if block_table is None:
            kb, vb = k_cache[b], v_cache[b]  # [S, Hkv, D], [S, Hkv, Dv]
        else:
            kb, vb = gather_pages(k_cache, block_table, b), gather_pages(v_cache, block_table, b)
        kb = kb.to(compute_dtype)
        # Keys past the sequence's length are ignored, whatever they hold (NaN included):
        # their scores are masked below, and their values are zeroed so 0 * NaN never happens.
        vb = vb.to(compute_dtype).masked_fill(~mask[b].any(0).view(S, 1, 1), 0.0)
        scores = torch.einsum("thgd,shd->hgts", qb, kb) * softmax_scale  # [Hkv, G, T, S]
        if softcap > 0:
            scores = softcap * torch.tanh(scores / softcap)
        scores = scores.masked_fill(~mask[b].view(1, 1, T, S), float("-inf"))
        row_max = scores.amax(dim=-1, keepdim=True)
        if sink is not None:  # the sink takes part in the max, so exp never overflows
            row_max = torch.maximum(row_max, sink.expand_as(row_max))
        empty = torch.isinf(row_max)  # no visible key (and no sink): all -inf
        row_max = torch.where(empty, torch.zeros_like(row_max), row_max)
        p = torch.exp(scores - row_max)
        row_sum = p.sum(dim=-1, keepdim=True)
        if sink is not None:
            row_sum = row_sum + torch.exp(sink - row_max)
        o = torch.einsum("hgts,shd->thgd", p / torch.where(row_sum == 0, torch.ones_like(row_sum), row_sum), vb)
        out[b] = o.reshape(T, Hq, Dv)
        lse_b = (row_max + torch.log(row_sum)).squeeze(-1)  # [Hkv, G, T]; log(0) = -inf on empty rows
        lse[b] = lse_b.reshape(Hq, T).to(torch.float32)
    return out, lse
