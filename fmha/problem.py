"""Argument validation and the shape-only description of one decode problem.

Every check here runs on the host from shapes, dtypes, strides and devices
alone (never from tensor values), so it is cheap, it never synchronises and it
is safe under CUDA-graph capture. Each error names the argument, what it got
and what is allowed.
"""
from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, field
from typing import Optional

import torch

SUPPORTED_DTYPES = (torch.bfloat16, torch.float16)
SUPPORTED_HEAD_DIMS = (64, 128, 256, 512)  # K = V head dims (D_qk == D_v)
# (D_qk, D_v): equal head dims, and DeepSeek's 576-wide keys (512 latent + 64 rope) whose first 512 columns
# are the values.
SUPPORTED_HEAD_DIM_PAIRS = tuple((d, d) for d in SUPPORTED_HEAD_DIMS) + ((576, 512),)
# softmax_scale times log2(e), the kernels' float32 qk_scale, must stay a normal finite float32 (1.2e-38 to 3.4e38).
MIN_SOFTMAX_SCALE = 1e-37
MAX_SOFTMAX_SCALE = 1e38
# A score cap c enters the kernels as softmax_scale / c (held to the range above) and c log2(e); the Triton
# kernel forms tanh as 1 - 2 / (2^(2x log2 e) + 1), whose ~1e-7 absolute error c multiplies into the score: up
# to this cap the error stays under a bf16 output's rounding.
MAX_SOFTCAP = 1e4
SUPPORTED_QK_DIMS = tuple(sorted({dk for dk, _ in SUPPORTED_HEAD_DIM_PAIRS}))


@dataclass(frozen=True)
class Problem:
    """Shapes and options of one call; what the dispatcher decides from."""

    batch: int
    seqlen_q: int  # T, query tokens per sequence
    heads_q: int
    heads_kv: int
    seqlen_k: int  # S, cache capacity
    head_dim: int
    dtype: torch.dtype
    device: torch.device
    causal: bool
    softmax_scale: float
    has_cache_seqlens: bool
    # True when q, k_cache, v_cache (and out) start on 16-byte boundaries and all
    # their non-unit strides are multiples of 16 bytes, nonzero on dimensions of size > 1
    # (no broadcast views): what TMA descriptors and 16-byte vector accesses need.
    aligned_16b: bool = True
    misalignment: str = ""  # where not aligned_16b: the first tensor at fault and why (the CUDA backend says it)
    # True when k_cache and v_cache keep the KV heads of a token side by side (head stride == head_dim): a
    # kernel may then read two heads as one twice as wide (the cuda backend's KV-head pairs).
    kv_heads_adjacent: bool = False
    # Paged KV caches (a block table): page_size tokens a page, None for a contiguous cache; num_blocks
    # pages in each pool; max_blocks_per_seq columns of the table. seqlen_k is then the capacity of a
    # sequence, max_blocks_per_seq * page_size. block_table_rows_disjoint: the table's rows do not overlap
    # (stride(0) >= max_blocks_per_seq, or one sequence), as the CUDA kernel needs.
    page_size: Optional[int] = None
    # V's (and the output's) head dim: head_dim, or 512 with head_dim 576 (SUPPORTED_HEAD_DIM_PAIRS); None on
    # construction means head_dim.
    head_dim_v: Optional[int] = None
    num_blocks: Optional[int] = None
    max_blocks_per_seq: Optional[int] = None
    block_table_rows_disjoint: bool = True
    # One float32 logit per query head joins every row's softmax denominator (the `sinks` argument).
    has_sinks: bool = False
    # v_cache is k_cache's memory: the same data pointer and strides, so V is K's first head_dim_v columns
    # (k_cache itself, or k_cache[..., :head_dim_v]); a kernel may load each latent tile once for both.
    kv_shared: bool = False
    # A sliding window (the `window_size` argument, FlashAttention's): query t, at position i = L - T + t of its
    # sequence of L keys, sees keys [i - window_left, i + window_right] (and j < L); -1: no bound on that side, also
    # where the bound cannot exclude a key (bounding_window). With causal the right bound is the diagonal
    # (window_right is then -1).
    window_left: int = -1
    window_right: int = -1
    # Scores capped at +-softcap (the `softcap` argument, Gemma 2's): s = softcap * tanh(softmax_scale q.k / softcap);
    # 0: not capped.
    softcap: float = 0.0
    # Each sequence's cache starts at cache_leftpad[b] (the `cache_leftpad` argument: left-padded caches): keys
    # before it are not attended.
    has_leftpad: bool = False
    # Bytes from each tensor's data pointer to one past its last element: q, k_cache, v_cache, out, cache_seqlens,
    # block_table, sinks, cache_leftpad (0: none), for the per-call check that out's memory range meets none of the
    # inputs' (check_out_disjoint).
    spans: Optional[tuple] = field(default=None, compare=False)

    def __post_init__(self):
        if self.head_dim_v is None:
            object.__setattr__(self, "head_dim_v", self.head_dim)

    @property
    def has_window(self) -> bool:
        """Whether a sliding window bounds the keys a query sees (beyond cache_seqlens and causal)."""
        return self.window_left >= 0 or self.window_right >= 0

    @property
    def has_block_table(self) -> bool:
        """Whether the caches are paged pools addressed through a block table."""
        return self.page_size is not None

    @property
    def group_size(self) -> int:
        return self.heads_q // self.heads_kv

    @property
    def kind(self) -> str:
        if self.heads_kv == 1 and self.heads_q > 1:
            return "MQA"
        return "MHA" if self.group_size == 1 else "GQA"

    def bytes_moved(self, kv_tokens: Optional[int] = None) -> int:
        """q + k + v + out, the bytes a decode kernel must move at least: the whole cache, or with `kv_tokens`
        the K and V rows of that many tokens (summed over the sequences: the keys they really have). K and V
        rows count separately even where V shares K's memory (kv_shared), as a kernel that reads them twice
        moves them."""
        e = torch.finfo(self.dtype).bits // 8
        tokens = self.batch * self.seqlen_k if kv_tokens is None else kv_tokens
        q = self.batch * self.seqlen_q * self.heads_q * self.head_dim
        out = self.batch * self.seqlen_q * self.heads_q * self.head_dim_v
        kv = tokens * self.heads_kv * (self.head_dim + self.head_dim_v)
        return e * (q + out + kv)

    def describe(self) -> str:
        paged = ""
        if self.page_size is not None:
            pages = "" if self.num_blocks is None else f", {self.num_blocks} pages"
            paged = f" paged({self.page_size} tokens a page{pages})"
        return (f"B={self.batch} T={self.seqlen_q} Hq={self.heads_q} Hkv={self.heads_kv} "
                f"S={self.seqlen_k} D={self.head_dim}"
                f"{'' if self.head_dim_v == self.head_dim else f' Dv={self.head_dim_v}'}"
                f"{paged}"
                f" {str(self.dtype).replace('torch.', '')}"
                f"{' causal' if self.causal and self.seqlen_q > 1 else ''}"
                f"{' varlen' if self.has_cache_seqlens else ''}"
                f"{' kv-shared' if self.kv_shared else ''}"
                f"{' sinks' if self.has_sinks else ''}"
                f"{f' window=({self.window_left}, {self.window_right})' if self.has_window else ''}"
                f"{f' softcap={self.softcap:g}' if self.softcap else ''}"
                f"{' leftpad' if self.has_leftpad else ''}")


def _shape(t: torch.Tensor) -> str:
    return "[" + ", ".join(str(s) for s in t.shape) + "]"


def token_indices_too_large(p: "Problem", margin: int, twice: str = "") -> Optional[str]:
    """Why a kernel whose int32 token indices pass the capacity S by up to `margin` (2 S + `margin`, for the
    reason `twice`, where it is given) cannot serve p, or None."""
    if (2 if twice else 1) * p.seqlen_k <= 2 ** 31 - 1 - margin:
        return None
    what = "max_blocks_per_seq x page_size" if p.has_block_table else "seqlen_k"
    if twice:
        return (f"{what} {p.seqlen_k} too large {twice}, so the kernel's token indices reach twice the capacity, "
                f"which must stay below 2^31 - {margin}")
    return f"{what} {p.seqlen_k} too large: the kernel's token indices must stay below 2^31 - {margin}"


def check_bool(name: str, value) -> None:
    """A flag must be a Python bool: 1.0 would pass `in (True, False)`, and a tensor would be read with a sync."""
    if not isinstance(value, bool):
        raise TypeError(f"{name}: expected a bool, got {value!r}")


def _check_tensor(name: str, t, layout: str) -> None:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor {layout}, got {type(t).__name__}")
    _check_dense(name, t, f"a dense (torch.strided) tensor {layout}")
    if t.dim() != 4:
        raise ValueError(f"{name}: expected a 4-D tensor {layout}, got {t.dim()}-D shape {_shape(t)}")
    if t.dtype not in SUPPORTED_DTYPES:
        raise TypeError(f"{name}: dtype {t.dtype} is not supported; allowed: torch.bfloat16, torch.float16")
    if t.numel() > 0 and t.stride(-1) != 1:
        raise ValueError(
            f"{name}: the last (head_dim) dimension must be contiguous (stride(-1) == 1), got strides "
            f"{tuple(t.stride())}; fmha never copies a tensor behind your back, pass a view with unit last stride")


def _check_dense(name: str, t: torch.Tensor, expected: str) -> None:
    """t is a plain strided tensor: not sparse, not nested (whose strided layout has no strides to read), not a
    lazily negated view (whose memory holds the values before the negation, which the kernels would read)."""
    if t.is_nested:
        raise TypeError(f"{name}: a nested tensor is not allowed; expected {expected}")
    if t.layout != torch.strided:
        raise TypeError(f"{name}: layout {t.layout} is not allowed; expected {expected}")
    if not torch.compiler.is_compiling() and t.is_neg():  # (not traceable: the op's own validate checks it)
        raise ValueError(f"{name}: a lazily negated view (its negative bit is set), whose memory the kernels would "
                         f"read unnegated; pass {name}.resolve_neg()")


def _pairs() -> str:
    return ", ".join(f"({dk}, {dv})" for dk, dv in SUPPORTED_HEAD_DIM_PAIRS)


def check_cache_seqlens(cache_seqlens, q, name: str = "cache_seqlens") -> None:
    """cache_seqlens (or another per-sequence int32 vector, `name`): a dense, contiguous int32 tensor [B] on q's
    device (q: a 4-D tensor)."""
    B = q.shape[0]
    if not isinstance(cache_seqlens, torch.Tensor):
        raise TypeError(f"{name}: expected an int32 tensor of shape [{B}] or None, "
                        f"got {type(cache_seqlens).__name__}")
    _check_dense(name, cache_seqlens, "a dense (torch.strided) int32 tensor")
    if cache_seqlens.dtype != torch.int32:
        raise TypeError(f"{name}: dtype {cache_seqlens.dtype} is not allowed; expected torch.int32")
    if cache_seqlens.dim() != 1 or cache_seqlens.shape[0] != B:
        raise ValueError(f"{name}: expected shape [{B}] (one per sequence), got {_shape(cache_seqlens)}")
    if cache_seqlens.device != q.device:
        raise ValueError(f"{name}: on device {cache_seqlens.device} but q is on {q.device}")
    if B > 1 and cache_seqlens.stride(0) != 1:
        raise ValueError(f"{name}: must be contiguous, got stride {cache_seqlens.stride(0)}")


def check_softcap(softcap) -> float:
    """softcap: 0 (scores not capped) or a cap in [MIN_SOFTMAX_SCALE, MAX_SOFTCAP], as a float. While torch.compile
    traces, only its type: with dynamic=True it may be symbolic, and the custom op checks its value when the graph
    runs."""
    if isinstance(softcap, bool) or not isinstance(softcap, (numbers.Real, torch.SymFloat)):
        raise TypeError(f"softcap: expected a real number >= 0 (0.0: no cap), got {type(softcap).__name__} "
                        f"{softcap!r}")
    if torch.compiler.is_compiling():
        return float(softcap)  # (traced: a symbolic float stays symbolic)
    try:
        value = float(softcap)
    except OverflowError:
        raise ValueError(f"softcap: got {_shown(softcap)}, beyond a float; expected 0.0 (no cap) or a cap of at "
                         f"most {MAX_SOFTCAP:.3g}") from None
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"softcap: expected a finite real number >= 0 (0.0: no cap), got {softcap!r}")
    if value and not MIN_SOFTMAX_SCALE <= value <= MAX_SOFTCAP:
        raise ValueError(f"softcap: got {value:g}; expected 0.0 (no cap) or a cap in [{MIN_SOFTMAX_SCALE:.3g}, "
                         f"{MAX_SOFTCAP:.3g}] (the kernels form the capped scores in float32, whose error grows "
                         "with the cap: past it, beyond a bf16 output's rounding)")
    return value


def check_scale_over_softcap(softmax_scale: float, softcap: float) -> None:
    """softmax_scale / softcap, the capped kernels' float32 scale, within softmax_scale's own range."""
    if softcap and not MIN_SOFTMAX_SCALE <= softmax_scale / softcap <= MAX_SOFTMAX_SCALE:
        raise ValueError(f"softcap: softmax_scale / softcap = {softmax_scale:g} / {softcap:g} = "
                         f"{softmax_scale / softcap:g}; the capped kernels scale the scores by it in float32, so it "
                         f"must lie in [{MIN_SOFTMAX_SCALE:.3g}, {MAX_SOFTMAX_SCALE:.3g}]")


NO_WINDOW = (-1, -1)


def check_softmax_scale_type(softmax_scale) -> None:
    """softmax_scale (not None) is a real number: not a tensor nor a bool (a symbolic float while torch.compile
    traces with dynamic=True)."""
    if isinstance(softmax_scale, torch.Tensor):
        raise TypeError("softmax_scale: expected a real number (a Python float or int) or None, got a torch.Tensor "
                        "(reading it would need a device sync)")
    if isinstance(softmax_scale, bool) or not isinstance(softmax_scale, (numbers.Real, torch.SymFloat)):
        raise TypeError(f"softmax_scale: expected a real number (a Python float or int; a bool is not one) or None, "
                        f"got {type(softmax_scale).__name__} {softmax_scale!r}")


def _shown(value) -> str:
    """repr(value), its middle cut where it is long (an int of hundreds of digits)."""
    r = repr(value)
    return r if len(r) <= 40 else f"{r[:16]}...{r[-8:]} ({len(r)} characters)"


def check_softmax_scale(softmax_scale, D: int) -> float:
    """softmax_scale: None (1 / sqrt(D)) or a real number in [MIN_SOFTMAX_SCALE, MAX_SOFTMAX_SCALE], as a float."""
    if softmax_scale is None:
        return 1.0 / math.sqrt(D)
    check_softmax_scale_type(softmax_scale)
    try:
        softmax_scale = float(softmax_scale)
    except OverflowError:
        raise ValueError(f"softmax_scale: got {_shown(softmax_scale)}, beyond a float; expected a finite positive "
                         f"float of at most {MAX_SOFTMAX_SCALE:.3g}") from None
    if not math.isfinite(softmax_scale) or softmax_scale <= 0:
        raise ValueError(f"softmax_scale: expected a finite positive float, got {softmax_scale}")
    if not MIN_SOFTMAX_SCALE <= softmax_scale <= MAX_SOFTMAX_SCALE:
        raise ValueError(f"softmax_scale: got {softmax_scale:g}; the kernels scale the scores in float32 "
                         f"(times log2(e)), so it must lie in [{MIN_SOFTMAX_SCALE:.3g}, {MAX_SOFTMAX_SCALE:.3g}]")
    return softmax_scale


def check_window(window_size, causal: bool) -> tuple:
    """window_size (left, right): ints >= -1 (-1: no bound), as FlashAttention's; with causal the right edge is
    the diagonal, so right must be -1 or 0. Returns (left, right) with right = -1 where causal, each at most
    2^31 - 1 (no cache has that many keys, so a larger bound excludes nothing more)."""
    if not (isinstance(window_size, (tuple, list)) and len(window_size) == 2
            and all(isinstance(w, numbers.Integral) and not isinstance(w, bool) for w in window_size)):
        raise TypeError(f"window_size: expected a pair of ints (left, right), -1 for no bound, got {window_size!r}")
    left, right = (int(w) for w in window_size)
    if left < -1 or right < -1:
        raise ValueError(f"window_size: expected (left, right) each >= -1 (-1: no bound), got {window_size!r}")
    if causal and right not in (-1, 0):
        raise ValueError(f"window_size: the right edge of a causal window is the diagonal; allowed right = -1 or 0, "
                         f"got {window_size!r} (for keys past the diagonal pass causal=False)")
    return min(left, 2 ** 31 - 1), -1 if causal else min(right, 2 ** 31 - 1)


def bounding_window(left: int, right: int, S: int, T: int) -> tuple:
    """(left, right) with each side that cannot exclude a key set to -1: query t sits at i = L - T + t with
    L <= S, so i - left <= 0 once left >= S - 1, and i + right >= L - 1 once right >= T - 1."""
    return (-1 if left >= S - 1 else left), (-1 if right >= T - 1 else right)


def check_qk_head_dims(k_dim: int, q_dim: int) -> None:
    """k_cache's head dim is q's (D_qk)."""
    if k_dim != q_dim:
        raise ValueError(f"k_cache: head_dim {k_dim} differs from q's head_dim {q_dim}; K's head dim must equal Q's "
                         f"(D_qk; allowed: {', '.join(map(str, SUPPORTED_QK_DIMS))})")


def validate(q, k_cache, v_cache, cache_seqlens=None, softmax_scale=None, causal=True,
             out=None, block_table=None, sinks=None, window_size=NO_WINDOW, softcap=0.0,
             cache_leftpad=None) -> Problem:
    """Check the arguments of `fmha.attention` and return the Problem they describe."""
    paged = block_table is not None
    layout = "[num_blocks, page_size, Hkv, D] (a page pool, with block_table)" if paged else "[B, S, Hkv, D]"
    layout_v = ("[num_blocks, page_size, Hkv, D_v] (a page pool, with block_table)" if paged
                else "[B, S, Hkv, D_v]")
    _check_tensor("q", q, "[B, T, Hq, D]")
    _check_tensor("k_cache", k_cache, layout)
    _check_tensor("v_cache", v_cache, layout_v)
    for name, t in (("k_cache", k_cache), ("v_cache", v_cache)):
        if t.dtype != q.dtype:
            raise TypeError(f"{name}: dtype {t.dtype} differs from q's {q.dtype}; q, k_cache and v_cache "
                            "must share one dtype (bfloat16 or float16)")
        if t.device != q.device:
            raise ValueError(f"{name}: on device {t.device} but q is on {q.device}; all tensors must share a device")
    B, T, Hq, D = q.shape
    if paged:
        for i, what in ((0, "num_blocks (pages in the pool)"), (1, "page_size (tokens a page)")):
            if k_cache.shape[i] != v_cache.shape[i]:
                raise ValueError(f"v_cache: {what} {v_cache.shape[i]} differs from k_cache's {k_cache.shape[i]} "
                                 f"(shapes {_shape(v_cache)} and {_shape(k_cache)}); the K and V pools must hold the "
                                 "same pages: [num_blocks, page_size, Hkv, D] both")
    if k_cache.shape[:3] != v_cache.shape[:3]:
        dims = ("num_blocks", "page_size", "Hkv") if paged else ("B", "S", "Hkv")
        differ = " and ".join(n for n, a, b in zip(dims, k_cache.shape, v_cache.shape) if a != b)
        raise ValueError(f"v_cache: shape {_shape(v_cache)} differs from k_cache's {_shape(k_cache)}; both must be "
                         f"{layout.split(' (')[0]} with the same {', '.join(dims)} (here {differ} differs; only "
                         "v_cache's head dim may be its own, D_v)")
    Bk, S, Hkv, Dk = k_cache.shape
    Dv = v_cache.shape[3]
    if not paged and Bk != B:
        raise ValueError(f"k_cache: batch {Bk} differs from q's batch {B}")
    check_qk_head_dims(Dk, D)
    if D not in SUPPORTED_QK_DIMS:
        raise ValueError(f"q: head_dim {D} is not supported; allowed: {', '.join(map(str, SUPPORTED_QK_DIMS))}")
    if Dv > D:
        raise ValueError(f"v_cache: head_dim {Dv} is wider than k_cache's {D}; V's head dim must not exceed K's. "
                         f"Allowed (D_qk, D_v) pairs: {_pairs()}")
    if (D, Dv) not in SUPPORTED_HEAD_DIM_PAIRS:
        raise ValueError(f"v_cache: head_dim {Dv} with k_cache's head_dim {D} is not a supported pair; allowed "
                         f"(D_qk, D_v): {_pairs()}")
    if B < 1 or T < 1 or Hq < 1:
        raise ValueError(f"q: every dimension of [B, T, Hq, D] must be >= 1, got {_shape(q)}")
    if paged and (Bk < 1 or S < 1 or Hkv < 1):
        raise ValueError(f"k_cache: num_blocks, page_size and Hkv must be >= 1, got shape {_shape(k_cache)}")
    elif S < 1 or Hkv < 1:
        raise ValueError(f"k_cache: S and Hkv must be >= 1, got shape {_shape(k_cache)}")
    if Hq % Hkv != 0:
        raise ValueError(f"q: Hq={Hq} query heads is not a multiple of k_cache's Hkv={Hkv} KV heads; "
                         "Hq must be divisible by Hkv (MHA, GQA or MQA)")
    max_blocks = None
    if paged:
        max_blocks = _check_block_table(block_table, B, q.device)
        if cache_seqlens is None:
            raise ValueError(f"cache_seqlens: got None with a block_table; paged caches need cache_seqlens (int32 "
                             f"[{B}], the tokens each sequence holds): the table only bounds them "
                             f"(capacity {max_blocks} blocks x {S} tokens)")
    if cache_seqlens is not None:
        check_cache_seqlens(cache_seqlens, q)
    if cache_leftpad is not None:
        check_cache_seqlens(cache_leftpad, q, "cache_leftpad")
    check_bool("causal", causal)
    window_left, window_right = check_window(window_size, causal)
    softcap = check_softcap(softcap)
    softmax_scale = check_softmax_scale(softmax_scale, D)
    check_scale_over_softcap(softmax_scale, softcap)
    if out is not None:
        if not isinstance(out, torch.Tensor):
            raise TypeError(f"out: expected a torch.Tensor [B, T, Hq, D_v] or None, got {type(out).__name__}")
        _check_dense("out", out, "a dense (torch.strided) tensor [B, T, Hq, D_v] or None")
        if tuple(out.shape) != (B, T, Hq, Dv):
            what = "q's shape" if Dv == D else f"q's [B, T, Hq] and v_cache's head_dim {Dv}"
            raise ValueError(f"out: expected shape [{B}, {T}, {Hq}, {Dv}] ({what}), got {_shape(out)}")
        if out.dtype != q.dtype:
            raise TypeError(f"out: dtype {out.dtype} differs from q's {q.dtype}")
        if out.device != q.device:
            raise ValueError(f"out: on device {out.device} but q is on {q.device}")
        if out.stride(-1) != 1:
            raise ValueError(f"out: the last dimension must be contiguous (stride(-1) == 1), got strides "
                             f"{tuple(out.stride())}")
        if _elements_share_memory(out):
            raise ValueError(f"out: strides {tuple(out.stride())} for shape {_shape(out)} make several output "
                             "elements share memory (an expanded or overlapping view); expected a tensor whose "
                             "elements are distinct, e.g. torch.empty of that shape or a slice of one")
    if sinks is not None:
        _check_sinks(sinks, Hq, q.device)
    named = (("q", q), ("k_cache", k_cache), ("v_cache", v_cache)) + ((("out", out),) if out is not None else ())
    misalignment = next((m for m in (_misalignment(n, t) for n, t in named) if m), "")
    aligned = not misalignment
    paged_fields = {}
    if paged:  # seqlen_k: a sequence's capacity through the table
        paged_fields = dict(page_size=S, num_blocks=Bk, max_blocks_per_seq=max_blocks,
                            block_table_rows_disjoint=B == 1 or block_table.stride(0) >= max_blocks)
        S = max_blocks * S
    window_left, window_right = bounding_window(window_left, window_right, S, T)
    return Problem(batch=B, seqlen_q=T, heads_q=Hq, heads_kv=Hkv, seqlen_k=S, head_dim=D,
                   dtype=q.dtype, device=q.device, causal=bool(causal),
                   softmax_scale=softmax_scale, has_cache_seqlens=cache_seqlens is not None,
                   aligned_16b=aligned, misalignment=misalignment, head_dim_v=Dv,
                   kv_heads_adjacent=all(t.stride(2) == t.shape[3] or Hkv == 1 for t in (k_cache, v_cache)),
                   has_sinks=sinks is not None, kv_shared=shares_memory(k_cache, v_cache),
                   window_left=window_left, window_right=window_right, softcap=softcap,
                   has_leftpad=cache_leftpad is not None,
                   spans=tuple(_span_bytes(t) if t is not None else 0
                               for t in (q, k_cache, v_cache, out, cache_seqlens, block_table, sinks, cache_leftpad)),
                   **paged_fields)


def _span_bytes(t: torch.Tensor) -> int:
    """Bytes from t's data pointer to one past its last element (strides are never negative)."""
    return (sum((n - 1) * st for n, st in zip(t.shape, t.stride())) + 1) * t.element_size()


def check_writable_in_place(name: str, t: torch.Tensor, fix: str) -> None:
    """t is written in place: not an inference tensor outside inference mode, which torch forbids writing (`fix`:
    what the caller can do instead)."""
    if t.is_inference() and not torch.is_inference_mode_enabled():
        raise ValueError(f"{name}: an inference tensor (made under torch.inference_mode()), which torch lets nobody "
                         f"write in place outside inference mode; {fix}")


def check_out_disjoint(p: Problem, q, k_cache, v_cache, out, cache_seqlens=None, block_table=None,
                       sinks=None, cache_leftpad=None) -> None:
    """out is written while q, k_cache, v_cache (and cache_seqlens, block_table, sinks, cache_leftpad) are read: their
    memory ranges must not meet (out=q included). Per call (the data pointers are not part of the validation memo's
    key); ranges, so an out interleaved with an input without sharing an element is refused too. Nor may out be
    an inference tensor outside inference mode."""
    check_writable_in_place("out", out, "call under torch.inference_mode(), or pass an out made outside it")
    o, s = out.data_ptr(), p.spans
    o_end = o + s[3]
    qa, ka, va = q.data_ptr(), k_cache.data_ptr(), v_cache.data_ptr()
    meets = (qa < o_end and o < qa + s[0]) or (ka < o_end and o < ka + s[1]) or (va < o_end and o < va + s[2])
    if not meets and cache_seqlens is not None:  # (unrolled: this runs on every eager call with an out)
        a = cache_seqlens.data_ptr()
        meets = a < o_end and o < a + s[4]
    if not meets and block_table is not None:
        a = block_table.data_ptr()
        meets = a < o_end and o < a + s[5]
    if not meets and sinks is not None:
        a = sinks.data_ptr()
        meets = a < o_end and o < a + s[6]
    if not meets and cache_leftpad is not None:
        a = cache_leftpad.data_ptr()
        meets = a < o_end and o < a + s[7]
    if not meets or out.is_meta:  # (meta: no memory, every data pointer is 0)
        return
    named = (("q", q, s[0]), ("k_cache", k_cache, s[1]), ("v_cache", v_cache, s[2]),
             ("cache_seqlens", cache_seqlens, s[4]), ("block_table", block_table, s[5]), ("sinks", sinks, s[6]),
             ("cache_leftpad", cache_leftpad, s[7]))
    for name, t, span in named:
        if t is None:
            continue
        a = t.data_ptr()
        if a < o_end and o < a + span:
            raise ValueError(f"out: its memory [{o:#x}, {o_end:#x}) overlaps {name}'s [{a:#x}, {a + span:#x}); "
                             f"out is written while {name} is read, so it must be a buffer of its own (not {name} "
                             "itself, nor a view into its memory)")


def shares_memory(k_cache: torch.Tensor, v_cache: torch.Tensor) -> bool:
    """Whether v_cache is K's leading columns: one data pointer and, on every dimension of more than one
    element, one stride (shapes already checked: the same first three dimensions, V no wider than K). Equal
    pointers mean one allocation, so element (i, j, h, d < D_v) of both is the same memory."""
    if k_cache.is_meta or v_cache.is_meta:  # no memory: every meta tensor's data pointer is 0
        return k_cache is v_cache
    if k_cache.data_ptr() != v_cache.data_ptr():
        return False
    return all(a == b or n == 1 for a, b, n in zip(k_cache.stride()[:3], v_cache.stride()[:3], k_cache.shape[:3]))


def _check_sinks(sinks, Hq: int, device) -> None:
    what = f"a contiguous float32 tensor [Hq={Hq}] (one logit per query head) on {device}"
    if not isinstance(sinks, torch.Tensor):
        raise TypeError(f"sinks: expected {what} or None, got {type(sinks).__name__}")
    _check_dense("sinks", sinks, what)
    if sinks.dtype != torch.float32:
        raise TypeError(f"sinks: dtype {sinks.dtype} is not allowed; expected torch.float32 (pass sinks.float())")
    if sinks.dim() != 1 or sinks.shape[0] != Hq:
        raise ValueError(f"sinks: expected shape [{Hq}] (one logit per query head, q's Hq), got {_shape(sinks)}")
    if sinks.device != device:
        raise ValueError(f"sinks: on device {sinks.device} but q is on {device}; all tensors must share a device")
    if Hq > 1 and sinks.stride(0) != 1:
        raise ValueError(f"sinks: must be contiguous, got stride {sinks.stride(0)}; pass sinks.contiguous()")


def _check_block_table(block_table, B: int, device) -> int:
    """Check a block table's metadata (never its ids: device data) and return max_blocks_per_seq."""
    what = f"an int32 tensor [B={B}, max_blocks_per_seq] of page ids"
    if not isinstance(block_table, torch.Tensor):
        raise TypeError(f"block_table: expected {what} or None, got {type(block_table).__name__}")
    _check_dense("block_table", block_table, f"a dense (torch.strided) {what[3:]}")
    if block_table.dtype != torch.int32:
        raise TypeError(f"block_table: dtype {block_table.dtype} is not allowed; expected torch.int32")
    if block_table.dim() != 2:
        raise ValueError(f"block_table: expected a 2-D tensor [B={B}, max_blocks_per_seq], got "
                         f"{block_table.dim()}-D shape {_shape(block_table)}")
    if block_table.shape[0] != B:
        raise ValueError(f"block_table: expected {B} rows (one per sequence, q's batch), got shape "
                         f"{_shape(block_table)}")
    if block_table.shape[1] < 1:
        raise ValueError(f"block_table: expected at least one column (max_blocks_per_seq >= 1), got shape "
                         f"{_shape(block_table)}")
    if block_table.device != device:
        raise ValueError(f"block_table: on device {block_table.device} but q is on {device}; all tensors must "
                         "share a device")
    if block_table.shape[1] > 1 and block_table.stride(1) != 1:
        raise ValueError(f"block_table: the last dimension must be contiguous (stride(-1) == 1), got strides "
                         f"{tuple(block_table.stride())}; any row stride is fine")
    if B > 1 and block_table.stride(0) < 0:
        raise ValueError(f"block_table: negative row stride {block_table.stride(0)}; expected >= 0")
    return block_table.shape[1]


_VALIDATED: dict = {}
_VALIDATED_MAX = 4096
_IMMUTABLE_SCALARS = (float, int)  # a scale of another type might change after it became part of a key


def metadata_key(q, k_cache, v_cache, cache_seqlens=None, softmax_scale=None, causal=True, out=None,
                 block_table=None, sinks=None, window_size=NO_WINDOW, softcap=0.0, cache_leftpad=None):
    """Everything `validate` decides from, as one hashable tuple, or None where no key is safe.

    Per tensor: its type, shape, strides, dtype, device and data_ptr mod 16 (the 16-byte alignment), and
    whether k_cache and v_cache start at one address (shares_memory; meta tensors have none, so for them
    whether v_cache is k_cache); then the scalars; cache_seqlens, a block table and sinks by their metadata
    alone, layout included (a sparse tensor has strides too; their values are device data). Equal keys mean
    equal verdicts, so a memo on it may skip `validate`. Built flat from attribute reads (a sixth of
    the checks' host time); raises for arguments that are not tensors or not
    hashable, and the caller then runs `validate`, which says what is wrong."""
    if softmax_scale is not None and type(softmax_scale) not in _IMMUTABLE_SCALARS:
        return None
    if type(causal) is not bool:  # 1 == True: it would find True's entry and skip the check
        return None
    if window_size is not NO_WINDOW and not (type(window_size) is tuple and len(window_size) == 2
                                             and type(window_size[0]) is int and type(window_size[1]) is int):
        return None
    if type(softcap) not in _IMMUTABLE_SCALARS:
        return None
    if (q.is_neg() or k_cache.is_neg() or v_cache.is_neg()  # (refused by validate: never remembered)
            or (cache_seqlens is not None and cache_seqlens.is_neg()) or (out is not None and out.is_neg())
            or (block_table is not None and block_table.is_neg()) or (sinks is not None and sinks.is_neg())
            or (cache_leftpad is not None and cache_leftpad.is_neg())):
        return None
    return (window_size, softcap,
            None if cache_leftpad is None else (type(cache_leftpad), cache_leftpad.shape, cache_leftpad.stride(),
                                                cache_leftpad.dtype, cache_leftpad.device, cache_leftpad.layout),
            type(q), q.shape, q.stride(), q.dtype, q.device, q.data_ptr() & 15,
            type(k_cache), k_cache.shape, k_cache.stride(), k_cache.dtype, k_cache.device, k_cache.data_ptr() & 15,
            type(v_cache), v_cache.shape, v_cache.stride(), v_cache.dtype, v_cache.device, v_cache.data_ptr() & 15,
            # (every meta tensor's pointer is 0: there only K passed as V itself shares, as in shares_memory)
            k_cache.data_ptr() == v_cache.data_ptr() and (k_cache is v_cache or not k_cache.is_meta),
            softmax_scale, causal,
            # nested, so that a tensor passed as cache_seqlens never reads like the same tensor passed as out
            None if cache_seqlens is None else (type(cache_seqlens), cache_seqlens.shape, cache_seqlens.stride(),
                                                cache_seqlens.dtype, cache_seqlens.device, cache_seqlens.layout),
            None if out is None else (type(out), out.shape, out.stride(), out.dtype, out.device, out.data_ptr() & 15),
            None if block_table is None else (type(block_table), block_table.shape, block_table.stride(),
                                              block_table.dtype, block_table.device, block_table.layout),
            None if sinks is None else (type(sinks), sinks.shape, sinks.stride(), sinks.dtype, sinks.device,
                                        sinks.layout))


def validate_cached(q, k_cache, v_cache, cache_seqlens=None, softmax_scale=None, causal=True,
                    out=None, block_table=None, sinks=None, window_size=NO_WINDOW, softcap=0.0,
                    cache_leftpad=None) -> Problem:
    """`validate`, memoised on `metadata_key`: a decode loop calls with the same metadata every
    step. Anything unusual takes the full path, which raises. Equal keys give the same Problem
    object, so later memos may key on its identity."""
    try:
        key = metadata_key(q, k_cache, v_cache, cache_seqlens, softmax_scale, causal, out, block_table, sinks,
                           window_size, softcap, cache_leftpad)
        p = None if key is None else _VALIDATED.get(key)
    except Exception:  # not tensors, unhashable, no storage: the full checks say what is wrong
        key = p = None
    if p is None:
        p = validate(q, k_cache, v_cache, cache_seqlens, softmax_scale, causal, out, block_table, sinks, window_size,
                     softcap, cache_leftpad)
        if key is not None:
            if len(_VALIDATED) >= _VALIDATED_MAX:  # full: start over rather than check every new shape in full
                _VALIDATED.clear()
            p = _VALIDATED.setdefault(key, p)  # a racing thread's entry wins: one object per key
    return p


def _elements_share_memory(t: torch.Tensor) -> bool:
    """Whether two elements of t may be one memory location: a zero stride, or a dimension's stride not beyond
    the largest offset the dimensions of smaller stride reach (conservative: a few exotic interleavings count
    as sharing)."""
    reach = 0
    for stride, n in sorted((st, n) for st, n in zip(t.stride(), t.shape) if n > 1):
        if stride <= reach:
            return True
        reach += (n - 1) * stride
    return False


def _misalignment(name: str, t: torch.Tensor) -> str:
    """Why `t` (named `name`) breaks the CUDA kernels' layout rule, in words, or "": a 16-byte aligned start, and
    every stride a multiple of 16 bytes below 2^40 elements, positive unless its dimension is 1 (the C API checks
    q's and out's unit dimensions too)."""
    e = t.element_size()
    if t.data_ptr() % 16:
        return f"{name} starts {t.data_ptr() % 16} bytes past a 16-byte boundary"
    for dim, (st, n) in enumerate(zip(t.stride()[:-1], t.shape[:-1])):
        if not ((st * e) % 16 == 0 and (st > 0 or n == 1) and st < 1 << 40):
            return f"{name} has stride {st} ({st * e} bytes) on dim {dim} of size {n}"
    return ""
