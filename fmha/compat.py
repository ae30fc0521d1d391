"""FlashAttention 2's `flash_attn_with_kvcache` and FlashMLA's `flash_mla_with_kvcache` (with
`get_mla_metadata`), with their signatures, over `fmha.attention`.

flash_attn_with_kvcache serves what fmha computes: the cache as it is or with new keys and values appended in
place (`k`, `v`), contiguous or paged (`block_table`), causal or not, with the LSE; `cache_batch_idx` reads the
caches as a page pool of one page a cache row; rotary embeddings (`rotary_cos` / `rotary_sin`) rotate q and the
new keys at FlashAttention's positions before the append; `window_size`, `softcap` and `cache_leftpad` are
fmha.attention's (a causal window's right edge is the diagonal whatever is passed, as in FlashAttention).
`alibi_slopes` is refused by name before anything is written. Differences from FlashAttention that a caller can
see: the LSE of a row with no visible key is -inf (log of an empty sum; FlashAttention 2 writes +inf there),
`num_splits` is accepted but not used (fmha plans its own split-KV launch; the result is the same up to rounding),
and the rotation and the append are torch operations launched before the attention kernel, not fused into it.

flash_mla_with_kvcache serves FlashMLA's dense decode: a latent page pool whose first head_dim_v columns are V; its
sparse and fp8 modes are refused by name. A row with no visible key gets lse = -inf there too (FlashMLA: +inf).
"""
from __future__ import annotations

import numbers
from typing import Optional, Union

import torch

from .api import _check_inference_only, _ready_runner, attention
from .dispatch import check_backend_name
from .problem import (SUPPORTED_HEAD_DIM_PAIRS, _check_dense, _check_tensor, _elements_share_memory, _shown,
                      check_bool, check_cache_seqlens, check_qk_head_dims, check_softcap, check_window,
                      check_writable_in_place, validate, validate_cached)

__all__ = ["flash_attn_with_kvcache", "flash_mla_with_kvcache", "get_mla_metadata"]


def flash_attn_with_kvcache(q, k_cache, v_cache, k=None, v=None, rotary_cos=None, rotary_sin=None,
                            cache_seqlens: Optional[Union[int, torch.Tensor]] = None, cache_batch_idx=None,
                            cache_leftpad=None, block_table=None, softmax_scale=None, causal=False,
                            window_size=(-1, -1), softcap=0.0, rotary_interleaved=True, alibi_slopes=None,
                            num_splits=0, return_softmax_lse=False, *, backend="auto"):
    """Decode attention of q [B, T, Hq, D] against k_cache / v_cache [B, S, Hkv, D] (page pools
    [num_blocks, page_size, Hkv, D] with block_table [B, max_blocks_per_seq]), as FlashAttention 2's function of
    this name, which `fmha.attention` computes.

    cache_batch_idx: int32 [B], the cache row of each sequence (k_cache / v_cache [B_cache, S, Hkv, D]; ids are
    clamped into [0, B_cache) on the device); not with a block_table.
    cache_seqlens: int in [0, 2^31) or contiguous int32 [B], the tokens each sequence has in the cache (None: all
    S). With k and v ([B, T_new, Hkv, D] and [B, T_new, Hkv, D_v]), those are first written into the caches in
    place at positions cache_seqlens .. cache_seqlens + T_new - 1 of each sequence, and the attention reads
    cache_seqlens + T_new tokens (so q may not lie in the caches' memory then). Positions past a sequence's
    capacity and page ids outside the pool are clamped into it (device data: checking them would need a sync;
    FlashAttention raises for a paged cache that would overflow), so such a write lands inside the cache, over
    its last slot, and its result is undefined.
    causal: bottom-right aligned, as FlashAttention's. Returns out [B, T, Hq, D_v], and with return_softmax_lse
    also the LSE [B, Hq, T] (float32, natural log). backend: as fmha.attention's.
    rotary_cos / rotary_sin: [seqlen_ro, rotary_dim / 2] in q's dtype or float32, seqlen_ro at least the cache's
    capacity (S, or max_blocks_per_seq x page_size); only with k and v. The first rotary_dim columns of the new
    keys are rotated at positions cache_seqlens, cache_seqlens + 1, .. and those of q at the same positions where
    causal or windowed, or all at cache_seqlens where neither; pairs (2i, 2i + 1) where rotary_interleaved, else (i, i +
    rotary_dim / 2) (GPT-NeoX). Computed in float32 and rounded to the dtype, as FlashAttention's kernel does.
    Unlike FlashAttention 2, float32 tables, any rotary_dim of 2 or more and strided tables are taken, and a
    position past the table (q's, causal, where T > T_new near the cache's end) takes its last row where
    FlashAttention's kernel reads past it: positions are clamped into [0, seqlen_ro) on the device, as the
    append's are.
    """
    if alibi_slopes is not None:
        raise NotImplementedError(f"alibi_slopes: fmha does not support it (got {type(alibi_slopes).__name__}); "
                                  "allowed: None")
    check_bool("causal", causal)
    check_bool("rotary_interleaved", rotary_interleaved)
    window_left, window_right = check_window(window_size, False)
    window_size = (window_left, -1 if causal else window_right)  # (causal: the right edge is 0, as in FlashAttention)
    softcap = check_softcap(softcap)
    if isinstance(num_splits, bool) or not isinstance(num_splits, numbers.Integral):
        raise TypeError(f"num_splits: expected an int >= 0, got {type(num_splits).__name__} {num_splits!r} "
                        "(accepted, not used: fmha plans its own splits)")
    if num_splits < 0:
        raise ValueError(f"num_splits: expected an int >= 0, got {num_splits!r} (accepted, not used: fmha plans its "
                         "own splits)")
    check_bool("return_softmax_lse", return_softmax_lse)
    check_backend_name(backend)  # (before anything is written; the append checks what the backend can serve)
    if not isinstance(q, torch.Tensor):
        raise TypeError(f"q: expected a torch.Tensor [B, T, Hq, D], got {type(q).__name__}")
    _check_dense("q", q, "a dense (torch.strided) tensor [B, T, Hq, D]")
    if q.dim() != 4:
        raise ValueError(f"q: expected a 4-D tensor [B, T, Hq, D], got {list(q.shape)}")
    B = q.shape[0]
    if cache_leftpad is not None:  # (checked before anything is written; the attention call checks the rest)
        check_cache_seqlens(cache_leftpad, q, "cache_leftpad")
    extra = dict(window_size=window_size, softcap=softcap, cache_leftpad=cache_leftpad)
    if isinstance(cache_seqlens, numbers.Integral) and not isinstance(cache_seqlens, bool):
        if not 0 <= cache_seqlens < 2 ** 31:
            raise ValueError(f"cache_seqlens: got {cache_seqlens}; allowed: an int in [0, 2^31) or a contiguous "
                             "int32 tensor [B]")
        cache_seqlens = torch.full((B,), int(cache_seqlens), dtype=torch.int32, device=q.device)
    if cache_batch_idx is not None:  # each sequence's cache row as the one page, of S tokens, of a page table
        block_table = _batch_idx_as_table(cache_batch_idx, block_table, q, k_cache, v_cache)
        if cache_seqlens is None and k is None and isinstance(k_cache, torch.Tensor) and k_cache.dim() == 4:
            cache_seqlens = torch.full((B,), k_cache.shape[1], dtype=torch.int32, device=q.device)
    if (k is None) != (v is None):
        raise ValueError(f"{'v' if k is not None else 'k'}: missing; new keys and values come together (k and v)")
    if (rotary_cos is None) != (rotary_sin is None):
        raise ValueError(f"{'rotary_sin' if rotary_cos is not None else 'rotary_cos'}: missing; rotary_cos and "
                         "rotary_sin come together")
    if rotary_cos is not None and k is None:
        raise ValueError("rotary_cos: rotary embeddings need the new keys k and v (they rotate q and k at the "
                         "positions k is written to); without them, rotate q before the call")
    if k is None:
        if cache_seqlens is not None and not isinstance(cache_seqlens, torch.Tensor):
            raise TypeError(f"cache_seqlens: expected an int, a contiguous int32 tensor [B] or None, got "
                            f"{type(cache_seqlens).__name__} {_shown(cache_seqlens)}")
        return attention(q, k_cache, v_cache, cache_seqlens, block_table=block_table, softmax_scale=softmax_scale,
                         causal=causal, return_lse=return_softmax_lse, backend=backend, **extra)
    if not isinstance(cache_seqlens, torch.Tensor):
        got = "None" if cache_seqlens is None else type(cache_seqlens).__name__
        raise TypeError(f"cache_seqlens: got {got} with k and v; the new tokens are written after each sequence's "
                        "cache_seqlens tokens, so they are needed (an int or an int32 tensor [B])")
    _check_new_tokens(k, v, q, k_cache, v_cache)
    # cache_seqlens as given, whose dtype and strides cache_seqlens + T_new would hide from the attention call's
    # checks (in full where the rotation reads it or the quick test fails; traced: the op checks it when it runs)
    if rotary_cos is not None or not (torch.compiler.is_compiling() or (
            cache_seqlens.dtype == torch.int32 and cache_seqlens.layout == torch.strided
            and cache_seqlens.is_contiguous())):
        check_cache_seqlens(cache_seqlens, q)
    if rotary_cos is not None:
        capacity = _check_rotary(rotary_cos, rotary_sin, q, k, k_cache, block_table)
    _check_inference_only(q, k_cache, v_cache, k=k, v=v, rotary_cos=rotary_cos, rotary_sin=rotary_sin)
    if rotary_cos is not None:
        # FlashAttention's "causal or local", a side of at least the cache's capacity counting as none
        local = causal or 0 <= window_left < capacity or 0 <= window_right < capacity
        q, k = _rotated(q, k, cache_seqlens, rotary_cos, rotary_sin, local, rotary_interleaved)
    lengths = cache_seqlens + k.shape[1]  # (int32, on the device: no sync)
    if torch.compiler.is_compiling():  # the checks need data pointers: inside the op, on real tensors
        torch.ops.fmha.append_kv_(q, k_cache, v_cache, k, v, cache_seqlens, lengths, block_table, softmax_scale,
                                  causal, *window_size, softcap, cache_leftpad, backend)
    else:
        _checked_append(q, k_cache, v_cache, k, v, cache_seqlens, lengths, block_table, softmax_scale, causal,
                        window_size, softcap, cache_leftpad, backend, validate_cached)
    return attention(q, k_cache, v_cache, lengths, block_table=block_table, softmax_scale=softmax_scale,
                     causal=causal, return_lse=return_softmax_lse, backend=backend, **extra)


def _batch_idx_as_table(cache_batch_idx, block_table, q, k_cache, v_cache) -> torch.Tensor:
    """cache_batch_idx (int32 [B]) as a block table [B, 1] over the caches read as a pool of B_cache pages of S
    tokens: no copy; its ids are clamped into the cache on the device, as page ids are. The caches are checked
    here as the contiguous caches the caller passed (the pool's checks would speak of pages)."""
    if block_table is not None:
        raise NotImplementedError("cache_batch_idx: not with a block_table (nor is it in FlashAttention); index the "
                                  "pages through the block table instead")
    layout = "[B_cache, S, Hkv, D] (the rows cache_batch_idx picks)"
    _check_tensor("k_cache", k_cache, layout)
    _check_tensor("v_cache", v_cache, layout)
    if k_cache.shape[:3] != v_cache.shape[:3]:
        raise ValueError(f"v_cache: [B_cache, S, Hkv] = {list(v_cache.shape[:3])} differs from k_cache's "
                         f"{list(k_cache.shape[:3])}")
    if 0 in k_cache.shape[:3]:  # (the page pool it becomes would name num_blocks and page_size)
        raise ValueError(f"k_cache: B_cache, S and Hkv must be >= 1, got shape {list(k_cache.shape)}")
    if not isinstance(cache_batch_idx, torch.Tensor) or cache_batch_idx.dtype != torch.int32:
        got = cache_batch_idx.dtype if isinstance(cache_batch_idx, torch.Tensor) else type(cache_batch_idx).__name__
        raise TypeError(f"cache_batch_idx: expected an int32 tensor [B], got {got}")
    _check_dense("cache_batch_idx", cache_batch_idx, "a dense (torch.strided) int32 tensor [B]")
    B = q.shape[0]
    if tuple(cache_batch_idx.shape) != (B,) or cache_batch_idx.device != q.device:
        raise ValueError(f"cache_batch_idx: expected shape [{B}] on {q.device}, got {list(cache_batch_idx.shape)} "
                         f"on {cache_batch_idx.device}")
    if B > 1 and cache_batch_idx.stride(0) != 1:
        raise ValueError(f"cache_batch_idx: must be contiguous, got stride {cache_batch_idx.stride(0)}")
    return cache_batch_idx.view(B, 1)


def _check_new_tokens(k, v, q, k_cache, v_cache) -> None:
    """k [B, T_new, Hkv, D_qk] and v [B, T_new, Hkv, D_v]: the caches' heads, widths, dtype and device."""
    for name, t, cache in (("k", k, k_cache), ("v", v, v_cache)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name}: expected a torch.Tensor [B, T_new, Hkv, D] of new tokens, got "
                            f"{type(t).__name__}")
        _check_dense(name, t, "a dense (torch.strided) tensor [B, T_new, Hkv, D] of new tokens")
        if t.dim() != 4:
            raise ValueError(f"{name}: expected a 4-D tensor [B, T_new, Hkv, D] of new tokens, got {list(t.shape)}")
        cache_name = "k_cache" if name == "k" else "v_cache"
        if not isinstance(cache, torch.Tensor):  # (before anything reads its attributes)
            raise TypeError(f"{cache_name}: expected a torch.Tensor, the cache the new tokens are written into, got "
                            f"{type(cache).__name__}")
        if cache.dim() != 4:
            return  # (validate names the cache)
        if name == "k":  # (before the rotation reads q's head dim)
            check_qk_head_dims(cache.shape[-1], q.shape[-1])
        want = (q.shape[0], k.shape[1], *cache.shape[2:])
        if tuple(t.shape) != want:
            raise ValueError(f"{name}: expected shape {list(want)} ([B, T_new] of q and k, [Hkv, D] of the cache), "
                             f"got {list(t.shape)}")
        if t.dtype != cache.dtype:
            raise TypeError(f"{name}: dtype {t.dtype} differs from the cache's {cache.dtype}")
        if t.device != cache.device:
            raise ValueError(f"{name}: on {t.device}, the cache is on {cache.device}")
        if not torch.compiler.is_compiling():  # (symbolic strides do not sort: the op checks when the graph runs)
            _check_writable(cache_name, cache)


def _check_writable(name: str, cache: torch.Tensor) -> None:
    """A cache new tokens are written into: no two of its elements may share memory."""
    if _elements_share_memory(cache):
        raise ValueError(f"{name}: strides {tuple(cache.stride())} make several of its elements share memory "
                         f"(an expanded view); new tokens cannot be written into it")


def _check_rotary(cos, sin, q, k, k_cache, block_table) -> int:
    """cos / sin [seqlen_ro, rotary_dim / 2]: one shape, q's dtype or float32, q's device, rotary_dim at most k's
    head dim, seqlen_ro at least the cache's capacity (FlashAttention's rule: every position that can be written).
    Returns that capacity (tokens a sequence's cache holds), or 2^31 where the caches are not yet checked."""
    for name, t in (("rotary_cos", cos), ("rotary_sin", sin)):
        if isinstance(t, torch.Tensor):
            _check_dense(name, t, "a dense (torch.strided) tensor [seqlen_ro, rotary_dim / 2]")
        if not isinstance(t, torch.Tensor) or t.dim() != 2 or t.shape[1] == 0:
            got = list(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__
            raise ValueError(f"{name}: expected a 2-D tensor [seqlen_ro, rotary_dim / 2] with rotary_dim >= 2, "
                             f"got {got}")
        if t.dtype not in (q.dtype, torch.float32) or t.device != q.device:
            allowed = f"{q.dtype} (q's dtype)" + (" or torch.float32" if q.dtype != torch.float32 else "")
            raise ValueError(f"{name}: {t.dtype} on {t.device}; allowed: {allowed}, on {q.device}")
    if sin.shape != cos.shape:
        raise ValueError(f"rotary_sin: shape {list(sin.shape)} differs from rotary_cos's {list(cos.shape)}")
    seqlen_ro, rotary_dim = cos.shape[0], 2 * cos.shape[1]
    if rotary_dim > k.shape[-1]:
        raise ValueError(f"rotary_cos: rotary_dim = 2 x {cos.shape[1]} = {rotary_dim} exceeds the key head dim "
                         f"{k.shape[-1]}")
    if not isinstance(k_cache, torch.Tensor) or k_cache.dim() != 4 or not (
            block_table is None or isinstance(block_table, torch.Tensor) and block_table.dim() == 2):
        return 2 ** 31  # (validate names the cache and the table before anything is written)
    capacity = k_cache.shape[1] * (1 if block_table is None else block_table.shape[1])
    if seqlen_ro < capacity:
        raise ValueError(f"rotary_cos: {seqlen_ro} positions, fewer than the cache holds ({capacity}); every "
                         "position a token can be written to needs one")
    return capacity


def _rotated(q, k, cache_seqlens, cos, sin, local, interleaved):
    """q and k rotated at FlashAttention's positions: k's token i at cache_seqlens + i, q's the same where `local`
    (causal or windowed), else all of q at cache_seqlens."""
    offsets = torch.arange(max(q.shape[1], k.shape[1]), device=q.device)
    start = cache_seqlens.to(torch.int64)[:, None]
    q_pos = start + offsets[:q.shape[1]] if local else start.expand(-1, q.shape[1])
    return (_rotate(q, q_pos, cos, sin, interleaved), _rotate(k, start + offsets[:k.shape[1]], cos, sin, interleaved))


def _rotate(x, pos, cos, sin, interleaved) -> torch.Tensor:
    """x [B, L, H, D] with its first rotary_dim columns turned by the angles of positions pos [B, L] (clamped into
    the table): x0' = x0 cos - x1 sin, x1' = x0 sin + x1 cos over the column pairs, in float32."""
    half = cos.shape[1]
    pos = pos.clamp(0, cos.shape[0] - 1)
    c, s = cos[pos].float()[:, :, None], sin[pos].float()[:, :, None]  # [B, L, 1, rotary_dim / 2]
    turned = x[..., :2 * half].float()
    x0, x1 = (turned[..., 0::2], turned[..., 1::2]) if interleaved else (turned[..., :half], turned[..., half:])
    y0, y1 = x0 * c - x1 * s, x0 * s + x1 * c
    turned = torch.stack((y0, y1), -1).flatten(-2) if interleaved else torch.cat((y0, y1), -1)
    return torch.cat((turned.to(x.dtype), x[..., 2 * half:]), -1)


def _checked_append(q, k_cache, v_cache, k, v, cache_seqlens, lengths, block_table, softmax_scale, causal,
                    window_size, softcap, cache_leftpad, backend, check=validate) -> None:
    """Every check of the attention call on the lengths after the append (`check`: validate, or its memoised
    form), the backend it asks for included (a refused one must leave the caches as they were), then the
    append."""
    p = check(q, k_cache, v_cache, lengths, softmax_scale, causal, None, block_table, None, window_size, softcap,
              cache_leftpad)
    qa, s = q.data_ptr(), p.spans  # (ranges, as for out: the append would change what the attention reads as q)
    for name, a, span in (("k_cache", k_cache.data_ptr(), s[1]), ("v_cache", v_cache.data_ptr(), s[2])):
        if qa < a + span and a < qa + s[0]:
            raise ValueError(f"q: its memory meets {name}'s, which the new tokens are written into before the "
                             "attention reads q; pass a q of its own")
    _ready_runner(p, backend)
    for name, cache in (("k_cache", k_cache), ("v_cache", v_cache)):  # (on real tensors: not traceable)
        check_writable_in_place(name, cache, "call with the new tokens under torch.inference_mode()")
    _append(k_cache, v_cache, k, v, cache_seqlens, block_table)


@torch.library.custom_op("fmha::append_kv_", mutates_args=("k_cache", "v_cache"))
def _append_op(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
               cache_seqlens: torch.Tensor, lengths: torch.Tensor, block_table: Optional[torch.Tensor],
               softmax_scale: Optional[float], causal: bool, window_left: int, window_right: int, softcap: float,
               cache_leftpad: Optional[torch.Tensor], backend: str) -> None:
    """The append as torch.compile sees it: checked, then written, when the graph runs."""
    _check_writable("k_cache", k_cache)
    _check_writable("v_cache", v_cache)
    check_cache_seqlens(cache_seqlens, q)
    _checked_append(q, k_cache, v_cache, k, v, cache_seqlens, lengths, block_table, softmax_scale, causal,
                    (window_left, window_right), softcap, cache_leftpad, backend)


@_append_op.register_fake
def _(q, k_cache, v_cache, k, v, cache_seqlens, lengths, block_table, softmax_scale, causal, window_left,
      window_right, softcap, cache_leftpad, backend):
    return None


def _append(k_cache, v_cache, k, v, cache_seqlens, block_table) -> None:
    """k and v into the caches at each sequence's positions cache_seqlens .., clamped into the cache (the pool)."""
    B, T_new = k.shape[:2]
    pos = cache_seqlens.to(torch.int64)[:, None] + torch.arange(T_new, device=k.device)
    if block_table is None:
        rows = torch.arange(B, device=k.device)[:, None]
        at = (rows, pos.clamp(0, k_cache.shape[1] - 1))
    else:
        page_size = k_cache.shape[1]
        pos = pos.clamp(0, block_table.shape[1] * page_size - 1)
        pages = block_table.to(torch.int64).gather(1, pos // page_size).clamp(0, k_cache.shape[0] - 1)
        at = (pages, pos % page_size)
    v_cache[at] = v
    k_cache[at] = k  # (last: where V is K's memory, the whole key is what stays)


def get_mla_metadata(*args, **kwargs):
    """FlashMLA's scheduling call: fmha plans its launch itself, so this returns (None, None), which
    flash_mla_with_kvcache takes in place of FlashMLA's metadata (any arguments are accepted, as FlashMLA's are)."""
    return None, None


def flash_mla_with_kvcache(q, k_cache, block_table, cache_seqlens, head_dim_v, tile_scheduler_metadata=None,
                           num_splits=None, softmax_scale=None, causal=False, is_fp8_kvcache=False, indices=None,
                           attn_sink=None, extra_k_cache=None, extra_indices_in_kvcache=None, topk_length=None,
                           extra_topk_length=None, *, backend="auto"):
    """DeepSeek's MLA decode as FlashMLA's dense call of this name: q [B, T, Hq, D_qk] against the latent k_cache,
    a page pool [num_blocks, page_size, Hkv, D_qk] with block_table [B, max_blocks_per_seq] (or, with block_table
    None, a contiguous cache [B, S, Hkv, D_qk]), whose first head_dim_v columns are V (576/512: V3; 512/512: V4).
    Returns (out [B, T, Hq, head_dim_v], softmax_lse [B, Hq, T] float32). causal: bottom-right aligned.

    tile_scheduler_metadata and num_splits (get_mla_metadata's, or FlashMLA's own) are accepted and not used.
    FlashMLA's sparse and fp8 modes (is_fp8_kvcache, indices, extra_k_cache, extra_indices_in_kvcache,
    topk_length, extra_topk_length) are refused by name, as is attn_sink, which FlashMLA's dense call refuses too
    (fmha.attention(sinks=...) joins sinks, its LSE including them). A row with no visible key gets lse = -inf."""
    if is_fp8_kvcache is not False:
        raise NotImplementedError(f"is_fp8_kvcache: fmha reads bf16 / fp16 caches, got {is_fp8_kvcache!r}; "
                                  "allowed: False")
    for name, value in (("indices", indices), ("extra_k_cache", extra_k_cache),
                        ("extra_indices_in_kvcache", extra_indices_in_kvcache), ("topk_length", topk_length),
                        ("extra_topk_length", extra_topk_length)):
        if value is not None:
            raise NotImplementedError(f"{name}: FlashMLA's sparse attention is not in fmha (got "
                                      f"{type(value).__name__}); allowed: None")
    if attn_sink is not None:
        raise NotImplementedError("attn_sink: not taken by the dense call (FlashMLA's refuses it too); "
                                  "fmha.attention(..., sinks=attn_sink) joins sinks, and its LSE includes them")
    if isinstance(head_dim_v, bool) or not isinstance(head_dim_v, numbers.Integral):
        raise TypeError(f"head_dim_v: expected an int, got {type(head_dim_v).__name__} {head_dim_v!r}")
    if not isinstance(k_cache, torch.Tensor):
        raise TypeError(f"k_cache: expected a torch.Tensor [num_blocks, page_size, Hkv, D_qk], got "
                        f"{type(k_cache).__name__}")
    _check_dense("k_cache", k_cache, "a dense (torch.strided) latent cache [num_blocks, page_size, Hkv, D_qk]")
    if k_cache.dim() != 4:
        raise ValueError(f"k_cache: expected a 4-D latent cache [num_blocks, page_size, Hkv, D_qk] (or [B, S, Hkv, "
                         f"D_qk] without block_table), got {k_cache.dim()}-D")
    D = k_cache.shape[-1]
    if (D, head_dim_v) not in SUPPORTED_HEAD_DIM_PAIRS:
        allowed = [dv for dk, dv in SUPPORTED_HEAD_DIM_PAIRS if dk == D]
        raise ValueError(f"head_dim_v: {head_dim_v} with k_cache's D_qk = {D} is not supported; allowed "
                         + (f"with {D}: {allowed[0]}" if allowed else
                            f"pairs (D_qk, head_dim_v): {', '.join(map(str, SUPPORTED_HEAD_DIM_PAIRS))}"))
    return attention(q, k_cache, k_cache[..., :head_dim_v], cache_seqlens, block_table=block_table,
                     softmax_scale=softmax_scale, causal=causal, return_lse=True, backend=backend)
