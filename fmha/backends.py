"""The registry of backends: reference, triton and cuda (the interface is `fmha.base.Backend`)."""
from __future__ import annotations

import functools

import torch

from .base import Backend, interpreter_enabled
from .problem import token_indices_too_large
from .cuda.backend import CudaBackend, _current_device
from .reference import attention_reference
from .splits import num_sms

__all__ = ["Backend", "CudaBackend", "ReferenceBackend", "TritonBackend", "available_backends", "registry"]


class ReferenceBackend(Backend):
    name = "reference"
    summary = "fp32 PyTorch math, any device (ground truth)"

    def run(self, p, q, k_cache, v_cache, cache_seqlens, out, lse, block_table=None, sinks=None, cache_leftpad=None):
        o, l = attention_reference(q, k_cache, v_cache, cache_seqlens, p.softmax_scale, p.causal,
                                   block_table=block_table, sinks=sinks,
                                   window_size=(p.window_left, p.window_right), softcap=p.softcap,
                                   cache_leftpad=cache_leftpad)
        out.copy_(o)
        lse.copy_(l)


# A split's end and a tile's keys are int32 sums that pass S by up to 64 splits x 128-key tiles, rounded up.
TRITON_TOKEN_MARGIN = 16384


class TritonBackend(Backend):
    name = "triton"
    summary = "Triton FA2 split-KV decode kernel with GQA packing (any CUDA GPU; CPU via TRITON_INTERPRET=1)"
    eager_call_us = 100.0  # host time of an eager call, mostly Triton's Python launcher (perf/overhead.py)

    def reads_shared_kv_once(self, p):
        return p.kv_shared

    def unavailable_reason(self):
        try:
            import triton  # noqa: F401  (is it installed?)
        except Exception as e:  # pragma: no cover - depends on the install
            return f"triton is not importable ({e})"
        if torch.cuda.is_available() or interpreter_enabled():
            return None
        return "no CUDA GPU, and TRITON_INTERPRET=1 is not set (the Triton interpreter runs it on the CPU)"

    def unsupported_reason(self, p):
        if not (p.device.type == "cuda" or (p.device.type == "cpu" and interpreter_enabled())):
            return (f"tensors on {p.device}: the Triton kernel needs CUDA tensors, or CPU tensors "
                    "with TRITON_INTERPRET=1")
        # (a window's or left pad's split starts past its first tile: up to 2 T + 2 tiles more)
        extra = 2 * p.seqlen_q + 256 if p.has_window or p.has_leftpad else 0
        twice = ("for a window with cache_leftpad: a split's keys start at the left pad and span up to the window"
                 if p.has_window and p.has_leftpad else "")
        return token_indices_too_large(p, TRITON_TOKEN_MARGIN + extra, twice)

    # Importing fmha.triton.decode imports triton, which reads TRITON_INTERPRET when the kernels are defined
    # and takes about a second: deferred to the first use, so that `import fmha` does neither.
    def launch_details(self, p):
        from .triton.decode import paged_mode, plan
        if p.device.type == "cuda":
            sms = num_sms(p.device.index if p.device.index is not None else torch.cuda.current_device())
        else:
            sms = 8  # what decode_attention assumes under the interpreter
        (block_m, block_n, warps, stages), m_blocks, splits = plan(p, sms)
        paged = ""
        if p.has_block_table:
            paged = (f"; paged ({p.page_size}-token pages): "
                     + ("one page id per KV tile" if paged_mode(p, block_n) == 2 else "a page id per key (gather)"))
        return (f"BLOCK_M={block_m} BLOCK_N={block_n} num_warps={warps} num_stages={stages}; "
                f"{m_blocks * p.batch * p.heads_kv} programs x {splits} KV split(s)"
                + (" + combine kernel" if splits > 1 else "") + paged)

    def run(self, p, q, k_cache, v_cache, cache_seqlens, out, lse, block_table=None, sinks=None, cache_leftpad=None):
        from .triton.decode import decode_attention
        args = (p, q, k_cache, v_cache, cache_seqlens, out, lse)
        kwargs = dict(block_table=block_table, sinks=sinks, cache_leftpad=cache_leftpad)
        # Triton launches on the current device and its current stream: the tensors' device must be current.
        if p.device.type == "cuda" and p.device.index is not None and p.device.index != _current_device():
            with torch.cuda.device(p.device.index):
                decode_attention(*args, **kwargs)
        else:
            decode_attention(*args, **kwargs)


# The backends' names, in the order `auto` prefers them when no table decides (a constant: torch.compile traces
# the name checks without calling registry()).
BACKEND_NAMES = ("cuda", "triton", "reference")


@functools.lru_cache(maxsize=None)
def registry() -> dict:
    """name -> Backend, in BACKEND_NAMES's order."""
    return dict(zip(BACKEND_NAMES, (CudaBackend(), TritonBackend(), ReferenceBackend())))


def available_backends() -> list:
    """Names of the backends usable on this machine, in the order `auto` prefers them without a table.

    "triton" needs a CUDA GPU, or the Triton interpreter on the CPU: TRITON_INTERPRET=1 set before Triton
    is imported, that is before the first fmha call, which imports it to list the backends (a test vehicle,
    orders of magnitude slower; `python -m fmha` sets it on a machine without a GPU and says so). "cuda" needs
    a GPU of the architecture its library is built for (Hopper) and nvcc or a prebuilt library. `registry()[name].unavailable_reason()` says why one is missing."""
    return [name for name, b in registry().items() if b.unavailable_reason() is None]
