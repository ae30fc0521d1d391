"""The public entry points: attention, sdpa, explain."""
from __future__ import annotations

import dataclasses
import numbers
import re
import warnings
from typing import Optional

import torch
from torch.autograd.graph import increment_version

from .backends import registry
from .dispatch import (BACKEND_ENV, Decision, backend_env, check_backend_name, decide, decision_memo,
                       requested_backend, why_not)
from .problem import (NO_WINDOW, SUPPORTED_HEAD_DIM_PAIRS, _check_dense, _check_tensor, check_bool,
                      check_out_disjoint, check_softcap, check_softmax_scale, check_softmax_scale_type, check_window,
                      metadata_key, validate, validate_cached)


def attention(q, k_cache, v_cache, cache_seqlens=None, *, block_table=None, softmax_scale=None, causal=True,
              return_lse=False, backend="auto", out=None, sinks=None, window_size=NO_WINDOW, softcap=0.0,
              cache_leftpad=None):
    """Decode attention of a few query tokens against a KV cache.

    q: [B, T, Hq, D]; k_cache: [B, S, Hkv, D], v_cache: [B, S, Hkv, D_v] (flash_attn_with_kvcache
    layout), bf16 or fp16, any strides with stride(-1) == 1. (D, D_v): (D, D) for D in 64, 128,
    256, 512, or (576, 512); v_cache may be k_cache itself or its leading columns
    (k_cache[..., :512]), and a backend may then read the latent once (docs/deepseek.md).
    cache_seqlens: int32 [B] valid cache tokens per sequence (default S; values are clamped to
    [0, S]). causal: bottom-right aligned, query t sees keys j <= cache_seqlens[b] - T + t.
    softmax_scale: 1 / sqrt(D) by default, else a float in [1e-37, 1e38] (the kernels scale in float32, so
    softmax_scale * q.k must stay finite in float32: past that a row's result is undefined).
    Returns out [B, T, Hq, D_v] (into `out` if given: distinct elements, a memory range that meets
    none of the other tensors', and not an inference tensor outside torch.inference_mode(); its version
    counter is bumped, as by torch's out= ops) and, with
    return_lse, lse [B, Hq, T] float32 (natural log; -inf and a zero output for a row with no visible key).
    sinks: float32 [Hq] on q's device, or None (-inf, or finite below 1e38 in magnitude: device data, never
    checked; the kernels take them times log2(e) in float32): one logit per query head that joins every
    row's softmax denominator and attends to nothing,
    p_j = exp(s_j) / (exp(sinks[h]) + sum_k exp(s_k)),
    s_j = softmax_scale * q.k_j (the sink is not scaled). lse is then the log of the whole
    denominator, log(exp(sinks[h]) + sum_k exp(s_k)), so out = sum_j exp(s_j - lse) v_j; a row
    with no visible key gives a zero output and lse = sinks[h].
    block_table: int32 [B, max_blocks_per_seq] for paged caches: k_cache and v_cache are
    then page pools [num_blocks, page_size, Hkv, D] (any strides with stride(-1) == 1),
    token j of sequence b at k_cache[block_table[b, j // page_size], j % page_size];
    cache_seqlens is required and clamped to [0, max_blocks_per_seq * page_size]; every
    page id is clamped into [0, num_blocks) on the device (docs/paged.md).
    window_size: (left, right), FlashAttention's sliding window: query t, at position
    i = cache_seqlens[b] - T + t, sees keys i - left .. i + right (-1: no bound on that side; with
    causal, right is the diagonal: -1 or 0), as FlashAttention documents it (its kernel bounds a left-only
    window's right side at S, which where T > S + 1 hides keys from the first rows). Served by the reference
    and Triton backends (the CUDA kernels attend to the whole cache, so `auto` takes Triton).
    softcap: 0.0, or a cap c in [1e-37, 1e4] on every score: s = c * tanh(softmax_scale * q.k / c) (Gemma 2's).
    cache_leftpad: int32 [B] or None, the index of each sequence's first key (left-padded caches): keys before
    it are not attended, and the causal and window alignment stays on cache_seqlens (device data, not clamped: a
    negative start counts as 0, one at or past cache_seqlens[b] leaves the row no key). Both served by the
    reference and Triton backends only, as windows are.
    backend: "auto" or a name from fmha.available_backends().
    """
    if torch.compiler.is_compiling():
        # Under torch.compile the checks and the choice of backend run inside the custom op,
        # on real tensors, still before any kernel is launched. (q and v_cache first: their shapes size out.)
        _check_tensor("q", q, "[B, T, Hq, D]")
        _check_tensor("v_cache", v_cache, "[B, S, Hkv, D_v] (a page pool with block_table)")
        _check_op_argument_types(k_cache, cache_seqlens, block_table, sinks, cache_leftpad, out, softmax_scale,
                                 backend)  # (else the op's schema refuses them, unnamed by fmha)
        check_bool("causal", causal)  # (the op takes a bool)
        window_left, window_right = check_window(window_size, causal)  # (the op takes two ints)
        softcap = check_softcap(softcap)  # (and a float)
        check_bool("return_lse", return_lse)
        _check_inference_only(q, k_cache, v_cache, sinks, out)  # (the op runs below autograd: it cannot see it)
        B, T, Hq, D = q.shape
        if out is None:
            out = q.new_empty(B, T, Hq, v_cache.shape[-1])
        lse = torch.empty(B, Hq, T, dtype=torch.float32, device=q.device)
        torch.ops.fmha.attention_(q, k_cache, v_cache, cache_seqlens, out, lse,
                                  softmax_scale, causal, backend, block_table, sinks, window_left, window_right,
                                  softcap, cache_leftpad)
        return (out, lse) if return_lse else out
    # Eager: one memo lookup on cheap metadata stands for validate + decide + the LSE scratch.
    try:
        meta = metadata_key(q, k_cache, v_cache, cache_seqlens, softmax_scale, causal, out, block_table, sinks,
                            window_size, softcap, cache_leftpad)
        key = None if meta is None or type(return_lse) is not bool else (  # (1 == True: no key for a non-bool)
            meta, return_lse, backend, backend_env() if backend == "auto" else "")
        call = None if key is None else _CALLS.get(key)
    except Exception:  # not tensors, unhashable arguments, ...: _prepare_call's checks say what is wrong
        key = call = None
    if call is None:
        call = _prepare_call(key, q, k_cache, v_cache, cache_seqlens, softmax_scale, causal, return_lse, backend, out,
                             block_table, sinks, window_size, softcap, cache_leftpad)
    elif torch.is_grad_enabled() and (q.requires_grad or k_cache.requires_grad or v_cache.requires_grad
                                      or (sinks is not None and sinks.requires_grad)
                                      or (out is not None and out.requires_grad)):
        _check_inference_only(q, k_cache, v_cache, sinks, out)  # requires_grad is not part of the key
    p, runner, lse_scratch = call
    given_out = out is not None
    if out is None:  # unpacked sizes: torch.empty parses them ~0.5 us faster than a tuple
        out = torch.empty(p.batch, p.seqlen_q, p.heads_q, p.head_dim_v, dtype=p.dtype, device=p.device)
    else:
        check_out_disjoint(p, q, k_cache, v_cache, out, cache_seqlens, block_table, sinks, cache_leftpad)
    if return_lse:
        lse = torch.empty(p.batch, p.heads_q, p.seqlen_q, dtype=torch.float32, device=p.device)
    else:  # the kernels always write an LSE; nobody reads this one
        lse = _lse_scratch(p) if lse_scratch is None else lse_scratch
    _run(runner, p, q, k_cache, v_cache, cache_seqlens, out, lse, block_table, sinks, cache_leftpad)
    if given_out:  # written through pointers: as torch's out= ops do, so that autograd sees `out` has changed
        increment_version(out)
    return (out, lse) if return_lse else out


def _run(runner, p, q, k_cache, v_cache, cache_seqlens, out, lse, block_table, sinks, cache_leftpad=None) -> None:
    """runner.run, looked up per call (tests patch `run`), with block_table, sinks and cache_leftpad only where
    given."""
    if cache_leftpad is not None:
        runner.run(p, q, k_cache, v_cache, cache_seqlens, out, lse, block_table=block_table, sinks=sinks,
                   cache_leftpad=cache_leftpad)
    elif sinks is not None:
        runner.run(p, q, k_cache, v_cache, cache_seqlens, out, lse, block_table=block_table, sinks=sinks)
    elif block_table is None:
        runner.run(p, q, k_cache, v_cache, cache_seqlens, out, lse)
    else:
        runner.run(p, q, k_cache, v_cache, cache_seqlens, out, lse, block_table=block_table)


# (metadata_key, return_lse, backend, FMHA_BACKEND) -> (Problem, Backend, LSE scratch or None).
# A hit means these arguments passed every check before; cleared with the decisions.
_CALLS = decision_memo()
_CALLS_MAX = 4096


def _prepare_call(key, q, k_cache, v_cache, cache_seqlens, softmax_scale, causal, return_lse, backend, out,
                  block_table=None, sinks=None, window_size=NO_WINDOW, softcap=0.0, cache_leftpad=None):
    """The full checks and the choice of backend, in the order their errors are documented; remembered
    under `key` (None: not remembered)."""
    p = validate_cached(q, k_cache, v_cache, cache_seqlens, softmax_scale, causal, out, block_table, sinks,
                        window_size, softcap, cache_leftpad)
    _check_inference_only(q, k_cache, v_cache, sinks, out)
    check_bool("return_lse", return_lse)
    call = (p, _ready_runner(p, backend), None if return_lse else _lse_scratch(p, keep_only=True))
    if key is not None:
        if len(_CALLS) >= _CALLS_MAX:  # full: start over rather than send every new shape the slow way for good
            _CALLS.clear()
        _CALLS[key] = call
    return call


def _ready_runner(p, backend):
    """The backend decide() takes for p, loaded. Where auto took one that cannot load (the CUDA library's first
    build failing), it warns and takes the next: the failure is that backend's unavailable_reason from then on."""
    decision = decide(p, backend)
    runner = registry()[decision.backend]
    if decision.source in ("explicit", "env"):  # asked for by name: its failure is the call's
        return runner
    try:
        runner.prepare()
    except RuntimeError as e:
        again = decide(p, backend)
        if again.backend == decision.backend:  # (a failure the backend does not report as unavailable)
            raise
        warnings.warn(f"fmha: backend {decision.backend!r} could not be loaded, auto takes {again.backend!r}: {e}",
                      RuntimeWarning, stacklevel=2)
        runner = registry()[again.backend]
    return runner


def _check_op_argument_types(k_cache, cache_seqlens, block_table, sinks, cache_leftpad, out, softmax_scale,
                             backend) -> None:
    """The types the custom op's schema takes, refused by name while torch.compile traces (their values are checked
    inside the op, as in an eager call)."""
    _check_tensor("k_cache", k_cache, "[B, S, Hkv, D] (a page pool with block_table)")
    for name, t, what in (("cache_seqlens", cache_seqlens, "an int32 tensor [B]"),
                          ("block_table", block_table, "an int32 tensor [B, max_blocks_per_seq] of page ids"),
                          ("sinks", sinks, "a contiguous float32 tensor [Hq]"),
                          ("cache_leftpad", cache_leftpad, "an int32 tensor [B]"),
                          ("out", out, "a tensor [B, T, Hq, D_v]")):
        if t is not None and not isinstance(t, torch.Tensor):
            raise TypeError(f"{name}: expected {what} or None, got {type(t).__name__}")
    if softmax_scale is not None:
        check_softmax_scale_type(softmax_scale)
    check_backend_name(backend)


def _check_inference_only(q, k_cache, v_cache, sinks=None, out=None, k=None, v=None, rotary_cos=None,
                          rotary_sin=None) -> None:
    """Inputs, and an `out` written in place, that require grad are refused under grad mode (k, v: new tokens that
    fmha.compat writes into the caches; rotary_cos / rotary_sin: its rotation's tables)."""
    named = (("q", q), ("k_cache", k_cache), ("v_cache", v_cache), ("sinks", sinks), ("out", out), ("k", k), ("v", v),
             ("rotary_cos", rotary_cos), ("rotary_sin", rotary_sin))
    if torch.is_grad_enabled() and any(t is not None and t.requires_grad for _, t in named):
        name = next(n for n, t in named if t is not None and t.requires_grad)
        raise ValueError(f"{name}: requires_grad=True, but fmha computes no gradients (an inference library); "
                         "call it under torch.no_grad() / torch.inference_mode(), or pass detached tensors")


_LSE_SCRATCH: dict = {}


def _lse_scratch(p, keep_only: bool = False) -> Optional[torch.Tensor]:
    """A float32 [B, Hq, T] buffer the kernels may write an unwanted LSE into (never read).

    One per (device, shape), kept for the process so that CUDA-graph replays of a captured
    call still own it; concurrent writers only race on values nobody reads. Past 256 shapes a
    fresh buffer per call, or None with keep_only (for memos, which must not keep one alive)."""
    key = (p.device, p.batch, p.heads_q, p.seqlen_q)
    buf = _LSE_SCRATCH.get(key)
    if buf is None:
        if keep_only and len(_LSE_SCRATCH) >= 256:
            return None
        with torch.inference_mode(False):  # a normal tensor: an inference one refuses writes outside the mode
            buf = torch.empty(p.batch, p.heads_q, p.seqlen_q, dtype=torch.float32, device=p.device)
        if len(_LSE_SCRATCH) < 256:  # never evict: a captured graph may still write into an entry
            buf = _LSE_SCRATCH.setdefault(key, buf)  # racing threads end up with one buffer
    return buf


def explain(q, k_cache, v_cache, cache_seqlens=None, *, block_table=None, softmax_scale=None, causal=True,
            return_lse=False, backend="auto", out=None, sinks=None, window_size=NO_WINDOW, softcap=0.0,
            cache_leftpad=None) -> Decision:
    """Which backend `attention` would use for these arguments, and why (print it); where V is K's
    memory, whether that backend reads the latent once or twice."""
    # (the memoised Problem that attention's calls of these arguments use, so that explain sees their launch plan)
    p = validate_cached(q, k_cache, v_cache, cache_seqlens, softmax_scale, causal, out, block_table, sinks,
                        window_size, softcap, cache_leftpad)
    if out is not None:
        check_out_disjoint(p, q, k_cache, v_cache, out, cache_seqlens, block_table, sinks, cache_leftpad)
    _check_inference_only(q, k_cache, v_cache, sinks, out)  # what attention refuses, explain refuses too
    check_bool("return_lse", return_lse)
    runner = _ready_runner(p, backend)  # (loaded as attention loads it: a backend that fails to load is passed over)
    d = decide(p, backend)
    launch = runner.launch_details(p)
    return dataclasses.replace(d, launch=launch or d.launch, kv_reads=_kv_reads(p, d.backend, runner))


def _kv_reads(p, name: str, runner) -> str:
    """What explain says of how `name` reads K and V: where V is K's memory, once or twice; where the head
    dims differ and V is a tensor of its own, that both are read; else nothing."""
    columns = "k_cache itself" if p.head_dim_v == p.head_dim else f"the first {p.head_dim_v} columns of k_cache"
    if p.kv_shared and runner.reads_shared_kv_once(p):
        return f"v_cache is {columns}: {name} reads the latent once (one load of each tile serves Q K^T and P V)"
    if p.kv_shared:
        return f"v_cache is {columns}, but {name} reads the latent twice (as K and as V)"
    if p.head_dim_v != p.head_dim:
        return ("v_cache is a tensor of its own (not k_cache's memory with k_cache's strides): K and V are read "
                "separately")
    return ""


def sdpa(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
         enable_gqa=False, *, backend="auto"):
    """`F.scaled_dot_product_attention` for decode-shaped calls, [B, H, L, E] layout.

    Serves query [B, Hq, L, E], key [B, Hkv, S, E] and value [B, Hkv, S, Ev] without copies
    (Ev = E, or (E, Ev) = (576, 512)); returns [B, Hq, L, Ev]. As in SDPA, key and value of one
    KV head serve every query head (MQA) without enable_gqa, and of batch 1 serve every sequence
    (broadcast views, no copy); an empty query, or S = 0, gives an empty result or zeros.
    What it cannot honour is an error: attn_mask, dropout, is_causal with L != S (SDPA's
    causal mask is top-left aligned; for decode use fmha.attention(causal=True), bottom-right
    aligned), and what fmha.attention refuses: dtypes other than bfloat16 / float16, a last
    dimension that is not contiguous (stride 1), head dims outside fmha's, a scale outside
    [1e-37, 1e38] (finite and positive), inputs that require grad under grad mode, and a backend named (by
    `backend` or FMHA_BACKEND) that cannot serve the call here, also when it is empty.
    """
    for name, t in (("query", query), ("key", key), ("value", value)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name}: expected a torch.Tensor [B, H, L, E], got {type(t).__name__}")
        _check_dense(name, t, "a dense (torch.strided) tensor [B, H, L, E]")
        if t.dim() != 4:
            raise ValueError(f"{name}: expected a 4-D tensor [B, H, L, E], got {t.dim()}-D")
        if t.dtype != query.dtype:
            raise TypeError(f"{name}: dtype {t.dtype} differs from query's {query.dtype}")
        if t.shape[-1] > 1 and t.stride(-1) != 1:
            raise ValueError(f"{name}: the last (E) dimension must be contiguous (stride(-1) == 1), got strides "
                             f"{tuple(t.stride())} for shape {list(t.shape)}")
    if key.shape[0] == 1 and value.shape[0] == 1 and query.shape[0] > 1:  # SDPA broadcasts a batch of one
        key, value = key.expand(query.shape[0], -1, -1, -1), value.expand(query.shape[0], -1, -1, -1)
    if value.shape[:3] != key.shape[:3] or value.shape[3] > key.shape[3]:
        raise ValueError(f"value: shape {list(value.shape)} differs from key's {list(key.shape)}; fmha.sdpa "
                         "needs key [B, Hkv, S, E] and value [B, Hkv, S, Ev] with Ev <= E")
    if key.shape[0] != query.shape[0] or key.shape[3] != query.shape[3]:
        raise ValueError(f"key: shape {list(key.shape)} does not match query's {list(query.shape)} in B or E")
    if attn_mask is not None:
        got = "a tensor" if isinstance(attn_mask, torch.Tensor) else f"{type(attn_mask).__name__} {attn_mask!r}"
        raise ValueError(f"attn_mask: fmha.sdpa does not take an explicit mask (got {got}); allowed: None. "
                         "For a padded batch or a decode-aligned causal mask use fmha.attention, whose "
                         "cache_seqlens gives each sequence's length and causal=True aligns the mask bottom-right")
    if isinstance(dropout_p, bool) or not isinstance(dropout_p, numbers.Real):
        raise TypeError(f"dropout_p: expected a float, got {type(dropout_p).__name__} {dropout_p!r}; allowed: 0.0")
    if dropout_p != 0.0:
        raise ValueError(f"dropout_p: got {dropout_p}; fmha is an inference library, allowed: 0.0")
    check_bool("is_causal", is_causal)
    check_bool("enable_gqa", enable_gqa)
    L, S = query.shape[2], key.shape[2]
    if is_causal and L != S:
        raise ValueError(f"is_causal: SDPA's causal mask is top-left aligned, which for L={L} != S={S} is not "
                         "decode attention; use fmha.attention(..., causal=True) (bottom-right aligned)")
    if query.shape[1] != key.shape[1] and key.shape[1] != 1 and not enable_gqa:  # (one KV head: SDPA broadcasts it)
        raise ValueError(f"key: {key.shape[1]} heads differ from query's {query.shape[1]}; pass enable_gqa=True "
                         "for grouped-query attention, as with F.scaled_dot_product_attention")
    B, Hq, L, E = query.shape
    nothing = query.numel() == 0 or S == 0  # (attention would name the empty dimension, not the heads)
    if nothing and key.shape[1] and Hq % key.shape[1]:
        raise ValueError(f"query: Hq={Hq} query heads is not a multiple of key's Hkv={key.shape[1]} KV heads")
    empty = (nothing and query.dtype in (torch.bfloat16, torch.float16)
             and (E, value.shape[3]) in SUPPORTED_HEAD_DIM_PAIRS
             and (key.shape[1] > 0 or Hq == 0))
    result = torch.empty(B, Hq, L, value.shape[3], dtype=query.dtype, device=query.device)
    try:
        if empty:  # nothing to attend to: SDPA's zeros (attention refuses empty dims), after its other checks
            for name, t in (("key", key), ("value", value)):
                if t.device != query.device:
                    raise ValueError(f"{name}: on device {t.device} but query is on {query.device}; all tensors "
                                     "must share a device")
            check_softmax_scale(scale, E)
            _check_inference_only(query, key, value)
            _refuse_named_backend_that_cannot_serve(backend, query, value)
            return result.zero_()
        attention(query.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2), None,
                  softmax_scale=scale, causal=is_causal, backend=backend, out=result.transpose(1, 2))
    except (ValueError, TypeError) as e:  # name the SDPA arguments, not attention's
        msg = str(e)
        for ours, theirs in (("q:", "query:"), ("q's", "query's"), ("q is on", "query is on"), ("k_cache", "key"),
                             ("v_cache", "value"), ("softmax_scale", "scale")):
            msg = msg.replace(ours, theirs)
        if _MENTIONS_SHAPES.search(msg):  # a shape or strides listed in attention's [B, L, H, E] order
            msg += (" (shapes above are in the [B, L, H, E] order fmha uses internally, S in place of L for key and "
                    "value)")
        raise type(e)(msg) from None
    return result


def _refuse_named_backend_that_cannot_serve(backend, query, value):
    """An empty sdpa call (nothing to attend to: no Problem to plan) whose backend is named, by `backend` or
    FMHA_BACKEND, is refused as a call with data would be where that backend cannot serve its dtype, head dims
    and device here: the backend's reason for a one-token stand-in of the same, whose V is K's leading columns (an
    empty V's memory cannot tell whether it is a view of K's, and a shared latent is what 576 / 512 needs)."""
    name, source = requested_backend(backend)
    if name == "auto":
        return
    E, Ev = query.shape[3], value.shape[3]
    k = torch.empty(1, 1, 1, E, dtype=query.dtype, device=query.device)
    p = validate(torch.empty_like(k), k, k[..., :Ev])
    why = why_not(name, p)
    if why is not None:
        origin = "" if source == "explicit" else f" (asked for by the environment variable {BACKEND_ENV})"
        raise NotImplementedError(f"backend {name!r}{origin} cannot serve this call ({query.dtype}, head dims "
                                  f"({E}, {Ev}), tensors on {query.device}): {why}")


_MENTIONS_SHAPES = re.compile(r"shape|stride|\[\d+, \d")  # (a list of sizes, not a range such as [1e-37, 1e+38])


# ---- torch.library custom op: what torch.compile sees -------------------------------------

@torch.library.custom_op("fmha::attention_", mutates_args=("out", "lse"))
def _attention_op(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                  cache_seqlens: Optional[torch.Tensor], out: torch.Tensor, lse: torch.Tensor,
                  softmax_scale: Optional[float], causal: bool, backend: str,
                  block_table: Optional[torch.Tensor] = None, sinks: Optional[torch.Tensor] = None,
                  window_left: int = -1, window_right: int = -1, softcap: float = 0.0,
                  cache_leftpad: Optional[torch.Tensor] = None) -> None:
    p = validate_cached(q, k_cache, v_cache, cache_seqlens, softmax_scale, causal, out, block_table, sinks,
                        (window_left, window_right), softcap, cache_leftpad)  # (the eager calls' memo)
    check_out_disjoint(p, q, k_cache, v_cache, out, cache_seqlens, block_table, sinks, cache_leftpad)
    if (tuple(lse.shape) != (p.batch, p.heads_q, p.seqlen_q) or lse.dtype != torch.float32
            or not lse.is_contiguous() or lse.device != q.device):
        raise ValueError(f"lse: expected a contiguous float32 [{p.batch}, {p.heads_q}, {p.seqlen_q}] tensor on "
                         f"{q.device}, got {lse.dtype} {list(lse.shape)} strides {tuple(lse.stride())} on {lse.device}")
    _run(_ready_runner(p, backend), p, q, k_cache, v_cache, cache_seqlens, out, lse, block_table, sinks, cache_leftpad)


@_attention_op.register_fake
def _(q, k_cache, v_cache, cache_seqlens, out, lse, softmax_scale, causal, backend, block_table=None, sinks=None,
      window_left=-1, window_right=-1, softcap=0.0, cache_leftpad=None):
    return None
