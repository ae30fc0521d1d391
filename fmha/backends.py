"""The backend interface and the registry of backends.

A backend says whether it can run on this machine at all (`unavailable_reason`)
and whether it can serve one problem (`unsupported_reason`), both from host
information only, and `run`s into caller-allocated `out` and `lse`.
"""
from __future__ import annotations

import functools
import os
from typing import Optional

import torch

from .problem import Problem
from .reference import attention_reference


class Backend:
    name: str = ""
    summary: str = ""

    def unavailable_reason(self) -> Optional[str]:
        """None when usable on this machine, else why not."""
        return None

    def unsupported_reason(self, p: Problem) -> Optional[str]:
        """None when this backend can serve `p`, else why not."""
        return None

    def launch_details(self, p: Problem) -> Optional[str]:
        """How this backend would launch `p` (kernel configuration, split count), for explain()."""
        return None

    def run(self, p: Problem, q, k_cache, v_cache, cache_seqlens, out, lse) -> None:
        raise NotImplementedError


class ReferenceBackend(Backend):
    name = "reference"
    summary = "fp32 PyTorch math, any device (ground truth)"

    def run(self, p, q, k_cache, v_cache, cache_seqlens, out, lse):
        o, l = attention_reference(q, k_cache, v_cache, cache_seqlens, p.softmax_scale, p.causal)
        out.copy_(o)
        lse.copy_(l)


class TritonBackend(Backend):
    name = "triton"
    summary = "Triton FA2 split-KV decode kernel with GQA packing (any CUDA GPU; CPU via TRITON_INTERPRET=1)"

    def unavailable_reason(self):
        try:
            import triton  # noqa: F401  (is it installed?)
        except Exception as e:  # pragma: no cover - depends on the install
            return f"triton is not importable ({e})"
        if torch.cuda.is_available() or interpreter_enabled():
            return None
        return "no CUDA GPU, and TRITON_INTERPRET=1 is not set (the Triton interpreter runs it on the CPU)"

    def unsupported_reason(self, p):
        if p.device.type == "cuda":
            return None
        if p.device.type == "cpu" and interpreter_enabled():
            return None
        return (f"tensors on {p.device}: the Triton kernel needs CUDA tensors, or CPU tensors "
                "with TRITON_INTERPRET=1")

    def launch_details(self, p):
        from .splits import num_sms
        from .triton.decode import plan
        if p.device.type == "cuda":
            sms = num_sms(p.device.index if p.device.index is not None else torch.cuda.current_device())
        else:
            sms = 8  # what decode_attention assumes under the interpreter
        (block_m, block_n, warps, stages), m_blocks, splits = plan(p, sms)
        return (f"BLOCK_M={block_m} BLOCK_N={block_n} num_warps={warps} num_stages={stages}; "
                f"{m_blocks * p.batch * p.heads_kv} programs x {splits} KV split(s)"
                + (" + combine kernel" if splits > 1 else ""))

    def run(self, p, q, k_cache, v_cache, cache_seqlens, out, lse):
        from .triton.decode import decode_attention
        decode_attention(p, q, k_cache, v_cache, cache_seqlens, out, lse)


def interpreter_enabled() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


@functools.lru_cache(maxsize=None)
def registry() -> dict:
    """name -> Backend, in the order `auto` prefers them when no table decides."""
    backends = {}
    try:
        from .cuda.backend import CudaSm90Backend
        backends["cuda"] = CudaSm90Backend()
    except ImportError:  # the CUDA sources are not part of this install
        pass
    backends["triton"] = TritonBackend()
    backends["reference"] = ReferenceBackend()
    return backends


def available_backends() -> list:
    """Names of the backends usable on this machine."""
    return [name for name, b in registry().items() if b.unavailable_reason() is None]
