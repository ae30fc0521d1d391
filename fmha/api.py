"""The public entry points: attention, sdpa, explain."""
from __future__ import annotations

from typing import Optional

import torch

from .backends import registry
from .dispatch import Decision, decide
from .problem import validate, validate_cached


def attention(q, k_cache, v_cache, cache_seqlens=None, *, softmax_scale=None, causal=True,
              return_lse=False, backend="auto", out=None):
    """Decode attention of a few query tokens against a KV cache.

    q: [B, T, Hq, D]; k_cache, v_cache: [B, S, Hkv, D] (flash_attn_with_kvcache layout),
    bf16 or fp16, any strides with stride(-1) == 1. cache_seqlens: int32 [B] valid cache
    tokens per sequence (default S; values are clamped to [0, S]). causal: bottom-right
    aligned, query t sees keys j <= cache_seqlens[b] - T + t. Returns out [B, T, Hq, D]
    (into `out` if given) and, with return_lse, lse [B, Hq, T] float32 (natural log;
    -inf and a zero output for a row with no visible key).
    backend: "auto" or a name from fmha.available_backends().
    """
    if torch.compiler.is_compiling():
        # Under torch.compile the checks and the choice of backend run inside the custom op,
        # on real tensors, still before any kernel is launched.
        B, T, Hq, D = q.shape
        if out is None:
            out = q.new_empty(q.shape)
        lse = torch.empty(B, Hq, T, dtype=torch.float32, device=q.device)
        torch.ops.fmha.attention_(q, k_cache, v_cache, cache_seqlens, out, lse,
                                  softmax_scale, bool(causal), backend)
        return (out, lse) if return_lse else out
    p = validate_cached(q, k_cache, v_cache, cache_seqlens, softmax_scale, causal, out)
    decision = decide(p, backend)
    if out is None:
        out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    if return_lse:
        lse = torch.empty(p.batch, p.heads_q, p.seqlen_q, dtype=torch.float32, device=q.device)
    else:  # the kernels always write an LSE; nobody reads this one
        lse = _lse_scratch(p)
    registry()[decision.backend].run(p, q, k_cache, v_cache, cache_seqlens, out, lse)
    return (out, lse) if return_lse else out


_LSE_SCRATCH: dict = {}


def _lse_scratch(p) -> torch.Tensor:
    """A float32 [B, Hq, T] buffer the kernels may write an unwanted LSE into (never read).

    One per (device, shape), kept for the process so that CUDA-graph replays of a captured
    call still own it; concurrent writers only race on values nobody reads."""
    key = (p.device, p.batch, p.heads_q, p.seqlen_q)
    buf = _LSE_SCRATCH.get(key)
    if buf is None:
        buf = torch.empty(p.batch, p.heads_q, p.seqlen_q, dtype=torch.float32, device=p.device)
        if len(_LSE_SCRATCH) < 256:  # never evict: a captured graph may still write into an entry
            _LSE_SCRATCH[key] = buf
    return buf


def explain(q, k_cache, v_cache, cache_seqlens=None, *, softmax_scale=None, causal=True,
            return_lse=False, backend="auto", out=None) -> Decision:
    """Which backend `attention` would use for these arguments, and why (print it)."""
    p = validate(q, k_cache, v_cache, cache_seqlens, softmax_scale, causal, out)
    return decide(p, backend)


def sdpa(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
         enable_gqa=False, *, backend="auto"):
    """`F.scaled_dot_product_attention` for decode-shaped calls, [B, H, L, E] layout.

    Serves query [B, Hq, L, E], key/value [B, Hkv, S, E] without copies. What it cannot
    honour is an error: attn_mask, dropout, and is_causal with L != S (SDPA's causal mask
    is top-left aligned; for decode use fmha.attention(causal=True), bottom-right aligned).
    """
    for name, t in (("query", query), ("key", key), ("value", value)):
        if not isinstance(t, torch.Tensor) or t.dim() != 4:
            got = f"{t.dim()}-D" if isinstance(t, torch.Tensor) else type(t).__name__
            raise ValueError(f"{name}: expected a 4-D tensor [B, H, L, E], got {got}")
    if attn_mask is not None:
        raise ValueError("attn_mask: fmha.sdpa does not take an explicit mask (got a tensor); allowed: None. "
                         "Use is_causal, or fmha.attention with cache_seqlens for per-sequence lengths")
    if dropout_p != 0.0:
        raise ValueError(f"dropout_p: got {dropout_p}; fmha is an inference library, allowed: 0.0")
    L, S = query.shape[2], key.shape[2]
    if is_causal and L != S:
        raise ValueError(f"is_causal: SDPA's causal mask is top-left aligned, which for L={L} != S={S} is not "
                         "decode attention; use fmha.attention(..., causal=True) (bottom-right aligned)")
    if query.shape[1] != key.shape[1] and not enable_gqa:
        raise ValueError(f"key: {key.shape[1]} heads differ from query's {query.shape[1]}; pass enable_gqa=True "
                         "for grouped-query attention, as with F.scaled_dot_product_attention")
    B, Hq, L, E = query.shape
    result = torch.empty(B, Hq, L, E, dtype=query.dtype, device=query.device)
    attention(query.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2), None,
              softmax_scale=scale, causal=bool(is_causal), backend=backend, out=result.transpose(1, 2))
    return result


# ---- torch.library custom op: what torch.compile sees -------------------------------------

@torch.library.custom_op("fmha::attention_", mutates_args=("out", "lse"))
def _attention_op(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                  cache_seqlens: Optional[torch.Tensor], out: torch.Tensor, lse: torch.Tensor,
                  softmax_scale: Optional[float], causal: bool, backend: str) -> None:
    p = validate(q, k_cache, v_cache, cache_seqlens, softmax_scale, causal, out)
    if tuple(lse.shape) != (p.batch, p.heads_q, p.seqlen_q) or lse.dtype != torch.float32:
        raise ValueError(f"lse: expected float32 [{p.batch}, {p.heads_q}, {p.seqlen_q}], got "
                         f"{lse.dtype} {list(lse.shape)}")
    decision = decide(p, backend)
    registry()[decision.backend].run(p, q, k_cache, v_cache, cache_seqlens, out, lse)


@_attention_op.register_fake
def _(q, k_cache, v_cache, cache_seqlens, out, lse, softmax_scale, causal, backend):
    return None
