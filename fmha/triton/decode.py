"""Triton FA2 decode kernel: online softmax, GQA packing, split-KV.

Grid: (row blocks, B * Hkv, num_splits). One program owns BLOCK_M *packed
rows* of one KV head of one sequence: packed row r is query token t = r // G of
query head kvh * G + r % G (G = Hq / Hkv), so every query head that shares a KV
head is a row of the same `tl.dot`, and each K/V tile is read from HBM once per
KV head rather than once per query head. Along the cache, the program covers
keys [split * tokens_per_split, (split + 1) * tokens_per_split) clipped to the
sequence's length; with one split it writes `out` and `lse` directly, with
several it writes a normalised fp32 partial (o, lse) that `_combine_splits`
merges.

Paged caches (PAGED > 0): K and V are pools [num_blocks, page_size, Hkv, D] and
key j of sequence b is row j % page_size of page BlockTable[b, j // page_size],
the id clamped into [0, num_blocks) so that no id reads outside the pool. Where
the page size is a multiple of BLOCK_N a tile lies inside one page (tiles start
at multiples of BLOCK_N) and one id serves it (PAGED = 2); otherwise each key
looks up its own (PAGED = 1).

Head dims (D_qk, D_v): HEAD_DIM is D_v, the width of V, of the output and of
the first part of Q K^T; QK_TAIL = D_qk - D_v more columns of q and k (0, or
DeepSeek's 64 rope columns at (576, 512)) add a second, narrow product to the
scores, so no tile is padded to a power of two. With KV_SHARED, V is K's first
D_v columns (v_cache is k_cache's memory): each tile is loaded once, row-major
[BLOCK_N, D_v], and serves Q K^T (transposed) and P V.

Sliding windows (WINDOW): query t, at position i = L - T + t, sees keys i - window_left ..
i + window_right (the host passes bounds that never bind where a side is unbounded). A program
starts at the tile of the lowest key its first row sees; the splits cover a left window's span
from that tile (SPAN_FROM_LO), otherwise the cache from key 0, none starting before it. Keys
outside every row's window are neither loaded nor attended (they may hold anything).

Capped scores (SOFTCAP): s = c tanh(softmax_scale q.k / c), Gemma 2's, formed as (1 - 2 / (2^(2 x log2 e) + 1))
c log2(e) with x = q.k softmax_scale / c, so the softmax stays in the log2 domain. Left-padded caches
(HAS_LEFTPAD): sequence b's keys start at LeftPad[b], a lower bound like the window's.

Attention sinks (HAS_SINKS): sinks[h], one unscaled logit per query head, joins
the denominator once per row at the end (unsplit) or in the combine kernel
(split), never the loop: both rescale to max(m, sink) so exp never overflows,
and lse becomes the log of the whole denominator.

Numerics: scores are scaled by qk_scale = softmax_scale * log2(e) so the
softmax uses exp2; m_i (running max, log2 domain), l_i (running sum) and acc
(unnormalised output) are fp32; P is rounded to the input dtype for the PV
product, as on the tensor cores; O is divided by l_i once, at the end. Under the
Triton interpreter (INTERPRETED) the dot operands are taken in fp32 (its bf16
tl.dot is wrong) and P and O are rounded to bf16 by hand (its cast truncates).
"""
from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from ..base import interpreter_enabled
from ..splits import cdiv, choose_num_splits, num_sms

LN2 = math.log(2.0)
LOG2E = 1.0 / LN2
# (the kernel's copies: a @triton.jit function reads only constexpr globals)
_LN2 = tl.constexpr(LN2)
_LOG2E = tl.constexpr(LOG2E)


@triton.jit
def _rounded_by_hand(x, dtype: tl.constexpr):
    """fp32 x rounded to dtype, to nearest even, for the interpreter, whose fp32 -> bf16 cast truncates: half
    an ulp and the tie bit added to x's bits before the low 16 are cut. (Compiled kernels cast with .to.)"""
    if dtype == tl.bfloat16:
        bits = x.to(tl.uint32, bitcast=True)
        bits = bits + 0x7FFF + ((bits >> 16) & 1)
        return (bits & 0xFFFF0000).to(tl.float32, bitcast=True).to(dtype)
    return x.to(dtype)


@triton.jit
def _decode_kernel(
    Q, K, V, Out, Lse, OPart, LsePart, Seqlens, BlockTable, Sinks,
    stride_qb, stride_qt, stride_qh,
    stride_kb, stride_ks, stride_kh,
    stride_vb, stride_vs, stride_vh,
    stride_ob, stride_ot, stride_oh,
    stride_bt, num_blocks,
    T, S, tokens_per_split, qk_scale, window_left, window_right, cap_log2, LeftPad,
    HEADS_KV: tl.constexpr, GROUP: tl.constexpr, NUM_SPLITS: tl.constexpr,
    HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    CAUSAL: tl.constexpr, HAS_SEQLENS: tl.constexpr, INTERPRETED: tl.constexpr, OFFS_64: tl.constexpr,
    PAGED: tl.constexpr, PAGE_SIZE: tl.constexpr,
    QK_TAIL: tl.constexpr, KV_SHARED: tl.constexpr, HAS_SINKS: tl.constexpr, WINDOW: tl.constexpr,
    SOFTCAP: tl.constexpr, HAS_LEFTPAD: tl.constexpr, SPAN_FROM_LO: tl.constexpr, FLAT_GRID: tl.constexpr,
    M_BLOCKS: tl.constexpr,
):
    if FLAT_GRID:  # more (sequence, KV head) pairs than grid axis y holds: axis x counts them and the row blocks
        # (M_BLOCKS, a constant only here, so that other launches compile as without it)
        pid_m = tl.program_id(0) % M_BLOCKS
        pid_bh = tl.program_id(0) // M_BLOCKS
    else:
        pid_m = tl.program_id(0)
        pid_bh = tl.program_id(1)
    split = tl.program_id(2)
    # 64-bit batch and head indices: b * stride_kb passes 2^31 elements on large caches.
    b = (pid_bh // HEADS_KV).to(tl.int64)
    kvh = (pid_bh % HEADS_KV).to(tl.int64)
    HEADS_Q: tl.constexpr = HEADS_KV * GROUP

    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    row_valid = rows < T * GROUP
    t = rows // GROUP
    hq = kvh * GROUP + rows % GROUP  # int64 through kvh
    t_addr = t.to(tl.int64) if OFFS_64 else t  # t * stride_qt, t * stride_ot past 2^31 (token-major views)
    offs_d = tl.arange(0, HEAD_DIM)

    q_rows = Q + b * stride_qb + t_addr[:, None] * stride_qt + hq[:, None] * stride_qh
    q = tl.load(q_rows + offs_d[None, :], mask=row_valid[:, None], other=0.0)
    if INTERPRETED:  # the interpreter's bf16 tl.dot is wrong (triton-lang/triton#11584)
        q = q.to(tl.float32)
    if QK_TAIL > 0:  # q's columns past D_v: a second, narrow Q K^T product
        offs_r = HEAD_DIM + tl.arange(0, QK_TAIL)
        q_tail = tl.load(q_rows + offs_r[None, :], mask=row_valid[:, None], other=0.0)
        if INTERPRETED:
            q_tail = q_tail.to(tl.float32)

    if HAS_SEQLENS:
        seqlen = tl.minimum(tl.maximum(tl.load(Seqlens + b), 0), S)
    else:
        seqlen = S
    if WINDOW or HAS_LEFTPAD:  # the lowest key the block's first row sees, and its tile
        key_lo = 0
        if WINDOW:
            key_lo = tl.maximum(seqlen - T + (pid_m * BLOCK_M) // GROUP - window_left, 0)
        if HAS_LEFTPAD:
            key_lo = tl.maximum(key_lo, tl.load(LeftPad + b))
        tile_lo = key_lo // BLOCK_N * BLOCK_N
        if SPAN_FROM_LO:  # the splits cover a left window's span from that tile
            start = tile_lo + split * tokens_per_split
        else:  # ... or the cache, each split from that tile on
            start = split * tokens_per_split
        end = tl.minimum(start + tokens_per_split, seqlen)
        start = tl.maximum(start, tile_lo)
    else:
        start = split * tokens_per_split
        end = tl.minimum(start + tokens_per_split, seqlen)
    # Last key visible to each row: bottom-right causal alignment (each row's position).
    last_key = seqlen - T + t
    if CAUSAL:
        t_max = tl.minimum(pid_m * BLOCK_M + BLOCK_M - 1, T * GROUP - 1) // GROUP
        end = tl.minimum(end, seqlen - T + t_max + 1)
    if WINDOW:  # the block's last row's right bound
        t_last = tl.minimum(pid_m * BLOCK_M + BLOCK_M - 1, T * GROUP - 1) // GROUP
        end = tl.minimum(end, seqlen - T + t_last + window_right + 1)

    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)

    if PAGED:  # pools: the page offset is added per tile or per key below
        k_base = K + kvh * stride_kh
        v_base = V + kvh * stride_vh
    else:
        k_base = K + b * stride_kb + kvh * stride_kh
        v_base = V + b * stride_vb + kvh * stride_vh
    table = BlockTable + b * stride_bt
    for n0 in range(start, end, BLOCK_N):
        offs_n = n0 + tl.arange(0, BLOCK_N)
        if OFFS_64:  # a sequence's (or page's) token span past 2^31 elements
            offs_n = offs_n.to(tl.int64)
        in_range = offs_n < end
        if WINDOW or HAS_LEFTPAD:  # keys before every row's first are not read (they may hold anything)
            in_range = in_range & (offs_n >= key_lo)
        if PAGED == 2:  # the tile lies inside one page
            page = tl.load(table + n0 // PAGE_SIZE)
            page = tl.minimum(tl.maximum(page, 0), num_blocks - 1).to(tl.int64)
            rows_n = (n0 % PAGE_SIZE) + tl.arange(0, BLOCK_N)
            if OFFS_64:
                rows_n = rows_n.to(tl.int64)
            k_keys = k_base + page * stride_kb + rows_n * stride_ks
            v_keys = v_base + page * stride_vb + rows_n * stride_vs
        elif PAGED == 1:  # one id per key; keys past `end` read no table entry
            pages = tl.load(table + offs_n // PAGE_SIZE, mask=in_range, other=0)
            pages = tl.minimum(tl.maximum(pages, 0), num_blocks - 1).to(tl.int64)
            rows_n = offs_n % PAGE_SIZE
            k_keys = k_base + pages * stride_kb + rows_n * stride_ks
            v_keys = v_base + pages * stride_vb + rows_n * stride_vs
        else:
            k_keys = k_base + offs_n * stride_ks
            v_keys = v_base + offs_n * stride_vs
        if KV_SHARED:  # one latent tile, row-major: K^T for the scores, itself as V below
            kv = tl.load(k_keys[:, None] + offs_d[None, :], mask=in_range[:, None], other=0.0)
            if INTERPRETED:
                kv = kv.to(tl.float32)
            qk = tl.dot(q, tl.trans(kv))
        else:
            k = tl.load(k_keys[None, :] + offs_d[:, None], mask=in_range[None, :], other=0.0)
            if INTERPRETED:
                k = k.to(tl.float32)
            qk = tl.dot(q, k)
        if QK_TAIL > 0:
            k_tail = tl.load(k_keys[None, :] + offs_r[:, None], mask=in_range[None, :], other=0.0)
            if INTERPRETED:
                k_tail = k_tail.to(tl.float32)
            qk = tl.dot(q_tail, k_tail, qk)
        if SOFTCAP:  # c tanh(x), x = q.k softmax_scale / c (qk_scale), in the log2 domain (cap_log2 = c log2 e)
            qk = (1.0 - 2.0 / (tl.math.exp2((qk * qk_scale) * (2.0 * _LOG2E)) + 1.0)) * cap_log2
        else:
            qk = qk * qk_scale
        visible = in_range[None, :]
        if CAUSAL:
            visible = visible & (offs_n[None, :] <= last_key[:, None])
        if WINDOW:
            visible = visible & (offs_n[None, :] >= (last_key - window_left)[:, None])
            visible = visible & (offs_n[None, :] <= (last_key + window_right)[:, None])
        qk = tl.where(visible, qk, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(qk, 1))
        # A row that has seen no visible key yet keeps m = -inf; subtract 0 instead so exp2 gives 0, not NaN.
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        p = tl.math.exp2(qk - m_safe[:, None])
        alpha = tl.math.exp2(m_i - m_safe)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None]
        if KV_SHARED:
            v = kv
        else:
            v = tl.load(v_keys[:, None] + offs_d[None, :], mask=in_range[:, None], other=0.0)
        if INTERPRETED:  # (P rounded as the tensor cores take it)
            acc += tl.dot(_rounded_by_hand(p, V.dtype.element_ty).to(tl.float32), v.to(tl.float32))
        else:
            p_in = p.to(V.dtype.element_ty)  # rounded as the tensor cores take it
            acc += tl.dot(p_in, v)
        m_i = m_new

    if HAS_SINKS and NUM_SPLITS == 1:  # split partials stay sink-free: the combine kernel adds the sink
        sink = tl.load(Sinks + hq) * _LOG2E  # log2 domain, as m_i
        m_fin = tl.maximum(m_i, sink)
        m_fin = tl.where(m_fin == float("-inf"), 0.0, m_fin)  # no key and a -inf sink: 0 / 0 avoided below
        alpha = tl.math.exp2(m_i - m_fin)
        l_i = l_i * alpha + tl.math.exp2(sink - m_fin)
        acc = acc * alpha[:, None]
        m_i = m_fin
    empty = l_i == 0.0
    o = acc / tl.where(empty, 1.0, l_i)[:, None]
    lse = tl.where(empty, float("-inf"), (m_i + tl.math.log2(tl.where(empty, 1.0, l_i))) * _LN2)
    if NUM_SPLITS == 1:
        o_ptrs = Out + b * stride_ob + t_addr[:, None] * stride_ot + hq[:, None] * stride_oh + offs_d[None, :]
        if INTERPRETED:
            tl.store(o_ptrs, _rounded_by_hand(o, Out.dtype.element_ty), mask=row_valid[:, None])
        else:
            tl.store(o_ptrs, o.to(Out.dtype.element_ty), mask=row_valid[:, None])
        tl.store(Lse + (b * HEADS_Q + hq) * T + t, lse, mask=row_valid)
    else:
        part = ((b * T + t) * HEADS_Q + hq) * NUM_SPLITS + split  # [B, T, Hq, splits]
        tl.store(OPart + part[:, None] * HEAD_DIM + offs_d[None, :], o, mask=row_valid[:, None])
        tl.store(LsePart + part, lse, mask=row_valid)


@triton.jit
def _combine_splits(
    Out, Lse, OPart, LsePart, Sinks,
    stride_ob, stride_ot, stride_oh,
    T, HEADS_Q: tl.constexpr, NUM_SPLITS: tl.constexpr, SPLITS_POW2: tl.constexpr,
    HEAD_DIM: tl.constexpr, HAS_SINKS: tl.constexpr, INTERPRETED: tl.constexpr,
):
    """One program per (b, t, hq): out = sum_s w_s o_s / sum_s w_s with w_s = exp(lse_s - max lse); a sink
    adds exp(sink - max) to the denominator (and takes part in the max) and nothing to the sum."""
    pid = tl.program_id(0).to(tl.int64)  # = (b * T + t) * HEADS_Q + hq
    hq = pid % HEADS_Q
    bt = pid // HEADS_Q
    t = bt % T
    b = bt // T
    offs_s = tl.arange(0, SPLITS_POW2)
    lse_s = tl.load(LsePart + pid * NUM_SPLITS + offs_s, mask=offs_s < NUM_SPLITS, other=float("-inf"))
    lse_max = tl.max(lse_s, 0)
    if HAS_SINKS:
        sink = tl.load(Sinks + hq)
        lse_max = tl.maximum(lse_max, sink)
    lse_safe = tl.where(lse_max == float("-inf"), 0.0, lse_max)
    w = tl.exp(lse_s - lse_safe)  # 0 for empty splits
    w_sum = tl.sum(w, 0)
    if HAS_SINKS:
        w_sum += tl.exp(sink - lse_safe)
    offs_d = tl.arange(0, HEAD_DIM)
    acc = tl.zeros([HEAD_DIM], dtype=tl.float32)
    for s in range(NUM_SPLITS):
        w_s = tl.exp(tl.load(LsePart + pid * NUM_SPLITS + s) - lse_safe)
        acc += w_s * tl.load(OPart + (pid * NUM_SPLITS + s) * HEAD_DIM + offs_d)
    empty = w_sum == 0.0
    out = acc / tl.where(empty, 1.0, w_sum)
    if INTERPRETED:
        out = _rounded_by_hand(out, Out.dtype.element_ty)
    else:
        out = out.to(Out.dtype.element_ty)
    tl.store(Out + b * stride_ob + t * stride_ot + hq * stride_oh + offs_d, out)
    lse = tl.where(empty, float("-inf"), lse_safe + tl.log(tl.where(empty, 1.0, w_sum)))
    tl.store(Lse + (b * HEADS_Q + hq) * T + t, lse)


def launch_config(head_dim: int, rows: int, kv_shared: bool = False):
    """(BLOCK_M, BLOCK_N, num_warps, num_stages) for one head dim (D_qk) and packed-row count.

    BLOCK_M covers the packed rows (T x G) up to 64, a register budget: the fp32
    accumulator is BLOCK_M x D. BLOCK_N keeps a K and a V tile per pipeline stage
    within shared memory (128 keys at D = 128, 64 at D = 64 and 256, 32 at 512).
    Tuned by a sweep on an H200, e.g. D=128: BLOCK_N=128, 4 warps, 3 stages was
    within 1% of the best config on every shape tried.
    D_qk = 576 (D_v = 512 plus a 64-column tail) takes D = 512's tiles. A shared latent
    (kv_shared: one tile serves as K and V) of more than 16 rows takes 64 keys a tile, 8 warps
    and 2 stages: its two stages hold what a K and a V stage held (docs/deepseek.md).
    """
    block_m = min(64, max(16, triton.next_power_of_2(rows)))
    if kv_shared and head_dim >= 512 and block_m >= 32:  # (1.2-1.5x faster than 32-key tiles on an H100)
        return block_m, 64, 8, 2
    block_n = {64: 64, 128: 128, 256: 64, 512: 32, 576: 32}[head_dim]
    num_warps = 8 if block_m * head_dim >= 64 * 256 else 4
    num_stages = 2 if block_m * head_dim >= 64 * 512 else 3
    return block_m, block_n, num_warps, num_stages


def key_span(p, block_n: int) -> int:
    """Keys a program's range covers: the cache, or with a left window bound its span from the tile of the
    block's lowest visible key (the window and the rows' spread: at most left + T keys past that key, and
    the rounding down to a tile)."""
    return p.seqlen_k if p.window_left < 0 else min(p.seqlen_k, p.window_left + p.seqlen_q + block_n)


def window_bounds(p) -> tuple:
    """(window_left, window_right) for the kernel: the problem's, or where a side is unbounded a value that
    never binds (left S: below key 0; right T: past the last key), so the int32 sums stay within range."""
    left = p.seqlen_k if p.window_left < 0 else min(p.window_left, p.seqlen_k)
    right = p.seqlen_q if p.window_right < 0 else min(p.window_right, p.seqlen_q)
    return left, right


def plan(p, device_sms: int):
    """Return (block config, grid, num_splits, tokens_per_split) for a problem, from shapes only."""
    rows = p.seqlen_q * p.group_size
    block_m, block_n, num_warps, num_stages = launch_config(p.head_dim, rows, p.kv_shared)
    m_blocks = cdiv(rows, block_m)
    ctas = m_blocks * p.batch * p.heads_kv
    splits = choose_num_splits(ctas, key_span(p, block_n), block_n, device_sms)
    return (block_m, block_n, num_warps, num_stages), m_blocks, splits


def offsets_64(q, k_cache, v_cache, out, rows_in_span: int) -> bool:
    """The kernel's OFFS_64: some token offset times its token stride reaches 2^31 elements (a K/V token of a
    sequence or page, or a query token of q or out), so those products are formed in 64 bits."""
    kv_span = max(k_cache.stride(1), v_cache.stride(1)) * rows_in_span
    q_span = max(q.stride(1), out.stride(1)) * (q.shape[1] - 1)
    return max(kv_span, q_span) >= 2 ** 31


GRID_YZ_MAX = 65535  # CUDA's limit on grid axes y and z


def paged_mode(p, block_n: int) -> int:
    """The kernel's PAGED: 0 contiguous caches, 2 one page id per tile (pages a multiple of the tile), 1 one
    per key."""
    if not p.has_block_table:
        return 0
    return 2 if p.page_size % block_n == 0 else 1


def decode_attention(p, q, k_cache, v_cache, cache_seqlens, out, lse, num_splits=None, block_table=None,
                     sinks=None, cache_leftpad=None):
    """Run the decode kernel for Problem `p`, writing `out` [B, T, Hq, D_v] and `lse` [B, Hq, T] (contiguous fp32).

    `num_splits` overrides the heuristic (tests use it to force the split path). For a paged `p`,
    `block_table` [B, max_blocks_per_seq] addresses the page pools k_cache / v_cache. `sinks`: float32 [Hq]
    for a problem with sinks. Where p.kv_shared, v_cache is read through k_cache's pointer and strides.
    `cache_leftpad`: int32 [B] for a problem with left padding.
    """
    if p.has_block_table != (block_table is not None):
        raise ValueError("block_table: given for a contiguous problem, or missing for a paged one")
    if p.has_sinks != (sinks is not None):
        raise ValueError("sinks: given for a problem without sinks, or missing for one with them")
    if p.has_leftpad != (cache_leftpad is not None):
        raise ValueError("cache_leftpad: given for a problem without left padding, or missing for one with it")
    if p.kv_shared and v_cache.data_ptr() != k_cache.data_ptr():
        raise ValueError("v_cache: the problem says it shares k_cache's memory, but its data pointer differs")
    on_gpu = q.device.type == "cuda"
    sms = num_sms(q.device.index if q.device.index is not None else torch.cuda.current_device()) if on_gpu else 8
    (block_m, block_n, num_warps, num_stages), m_blocks, splits = plan(p, sms)
    span = key_span(p, block_n)
    if num_splits is not None:
        splits = max(1, min(int(num_splits), cdiv(span, block_n)))
    tokens_per_split = cdiv(cdiv(span, splits), block_n) * block_n
    B, T, Hq, _ = q.shape
    D = p.head_dim_v
    if splits > 1:
        o_part = torch.empty(B * T * Hq * splits * D, dtype=torch.float32, device=q.device)
        lse_part = torch.empty(B * T * Hq * splits, dtype=torch.float32, device=q.device)
    else:
        o_part = lse_part = out  # unused placeholders
    seqlens = cache_seqlens if cache_seqlens is not None else lse  # unused placeholder
    paged = paged_mode(p, block_n)
    if paged:
        table, stride_bt, num_blocks = block_table, block_table.stride(0), p.num_blocks
        rows_in_span = p.page_size  # token offsets within a page
    else:
        table, stride_bt, num_blocks = seqlens, 0, 1  # unused placeholder
        rows_in_span = p.seqlen_k
    sinks_arg = sinks if sinks is not None else lse  # unused placeholder
    # Grid axes y and z hold at most 65535; past that the row blocks and (sequence, KV head) pairs share axis x,
    # in the same order (a pair's row blocks adjacent).
    flat_grid = B * p.heads_kv > GRID_YZ_MAX
    grid = (m_blocks * B * p.heads_kv, 1, splits) if flat_grid else (m_blocks, B * p.heads_kv, splits)
    _decode_kernel[grid](
        q, k_cache, v_cache, out, lse, o_part, lse_part, seqlens, table, sinks_arg,
        q.stride(0), q.stride(1), q.stride(2),
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        v_cache.stride(0), v_cache.stride(1), v_cache.stride(2),
        out.stride(0), out.stride(1), out.stride(2),
        stride_bt, num_blocks,
        T, p.seqlen_k, tokens_per_split, p.softmax_scale / p.softcap if p.softcap else p.softmax_scale * LOG2E,
        *window_bounds(p), p.softcap * LOG2E, cache_leftpad if cache_leftpad is not None else lse,
        HEADS_KV=p.heads_kv, GROUP=p.group_size, NUM_SPLITS=splits,
        HEAD_DIM=D, BLOCK_M=block_m, BLOCK_N=block_n,
        CAUSAL=p.causal and T > 1, HAS_SEQLENS=cache_seqlens is not None,
        INTERPRETED=interpreter_enabled(),
        OFFS_64=offsets_64(q, k_cache, v_cache, out, rows_in_span),
        PAGED=paged, PAGE_SIZE=p.page_size if paged else 1,
        QK_TAIL=p.head_dim - D, KV_SHARED=p.kv_shared, HAS_SINKS=sinks is not None, WINDOW=p.has_window,
        SOFTCAP=p.softcap > 0, HAS_LEFTPAD=cache_leftpad is not None, SPAN_FROM_LO=p.window_left >= 0,
        FLAT_GRID=flat_grid, M_BLOCKS=m_blocks if flat_grid else 1, num_warps=num_warps, num_stages=num_stages,
    )
    if splits > 1:
        _combine_splits[(B * T * Hq,)](
            out, lse, o_part, lse_part, sinks_arg,
            out.stride(0), out.stride(1), out.stride(2),
            T, HEADS_Q=Hq, NUM_SPLITS=splits, SPLITS_POW2=max(2, triton.next_power_of_2(splits)),
            HEAD_DIM=D, HAS_SINKS=sinks is not None, INTERPRETED=interpreter_enabled(), num_warps=4,
        )
    return splits
