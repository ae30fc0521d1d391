"""The "cuda" backend: the hand-written sm_90a TMA + WGMMA decode kernel."""
from __future__ import annotations

import functools
from typing import Optional

import torch

from ..backends import Backend
from ..problem import Problem
from ..splits import cdiv, choose_num_splits, num_sms
from . import loader

SUPPORTED_HEAD_DIMS = (64, 128, 256, 512)
BLOCK_M = 64  # packed query rows per CTA (one WGMMA M)
_DTYPE_CODE = {torch.float16: 0, torch.bfloat16: 1}


@functools.lru_cache(maxsize=16)
def _capability(index: int):
    return torch.cuda.get_device_capability(index)


def _device_index(dev: torch.device) -> int:
    return dev.index if dev.index is not None else torch.cuda.current_device()


class CudaSm90Backend(Backend):
    name = "cuda"
    summary = ("hand-written sm_90a decode kernel: TMA K/V ring, WGMMA QK^T and PV, GQA rows packed into M, "
               "split-KV with a CUDA combine (Hopper only; built with nvcc on first use)")

    def __init__(self):
        self._fn = None
        self._tile_n = None
        self._ws_bytes = None
        self._last_error = None

    # -- availability -----------------------------------------------------
    def unavailable_reason(self) -> Optional[str]:
        if not torch.cuda.is_available():
            return "no CUDA GPU (torch.cuda.is_available() is False)"
        caps = [_capability(i) for i in range(torch.cuda.device_count())]
        if (9, 0) not in caps:
            return (f"needs a Hopper GPU (compute capability 9.0, sm_90a); found "
                    f"{', '.join(f'{a}.{b}' for a, b in caps)}")
        return loader.buildable()

    def unsupported_reason(self, p: Problem) -> Optional[str]:
        if p.device.type != "cuda":
            return f"tensors on {p.device}: the sm_90a kernel needs CUDA tensors"
        cap = _capability(_device_index(p.device))
        if cap != (9, 0):
            return f"device {p.device} has compute capability {cap[0]}.{cap[1]}; the kernel is built for sm_90a (9.0)"
        if p.dtype not in _DTYPE_CODE:
            return f"dtype {p.dtype} not supported (bfloat16, float16)"
        if p.head_dim not in SUPPORTED_HEAD_DIMS:
            return f"head_dim {p.head_dim} not supported (64, 128, 256, 512)"
        if not p.aligned_16b:
            return ("q/k_cache/v_cache/out must start on 16-byte boundaries with every non-unit stride a multiple "
                    "of 16 bytes (TMA and 16-byte loads)")
        if p.batch > 65535 or p.heads_kv > 65535:
            return f"batch {p.batch} or heads_kv {p.heads_kv} above the grid limit 65535"
        if p.seqlen_k >= 2 ** 31 - 256:
            return f"seqlen_k {p.seqlen_k} too large for 32-bit TMA coordinates"
        return None

    # -- execution --------------------------------------------------------
    def _bind(self):
        lib = loader.load()
        self._tile_n = {d: lib.fmha_sm90_tile_n(d) for d in SUPPORTED_HEAD_DIMS}
        self._ws_bytes = lib.fmha_sm90_workspace_bytes
        self._last_error = lib.fmha_last_error
        self._fn = lib.fmha_sm90_decode
        return self._fn

    def run(self, p: Problem, q, k_cache, v_cache, cache_seqlens, out, lse) -> None:
        fn = self._fn or self._bind()
        B, T, Hq, Hkv, S, D = p.batch, p.seqlen_q, p.heads_q, p.heads_kv, p.seqlen_k, p.head_dim
        dev = q.device
        index = dev.index if dev.index is not None else torch.cuda.current_device()
        ctas = B * Hkv * cdiv(T * (Hq // Hkv), BLOCK_M)
        num_splits = choose_num_splits(ctas, S, self._tile_n[D], num_sms(index))
        workspace, ws_ptr, ws_bytes = None, None, 0
        if num_splits > 1:
            ws_bytes = self._ws_bytes(B, T, Hq, D, num_splits)
            workspace = torch.empty(ws_bytes, dtype=torch.uint8, device=dev)
            ws_ptr = workspace.data_ptr()
        qs, ks, vs, os_ = q.stride(), k_cache.stride(), v_cache.stride(), out.stride()
        if index != torch.cuda.current_device():
            with torch.cuda.device(index):
                status = self._call(fn, p, q, k_cache, v_cache, cache_seqlens, out, lse, qs, ks, vs, os_,
                                    num_splits, ws_ptr, ws_bytes, index)
        else:
            status = self._call(fn, p, q, k_cache, v_cache, cache_seqlens, out, lse, qs, ks, vs, os_,
                                num_splits, ws_ptr, ws_bytes, index)
        if status != 0:
            msg = self._last_error().decode(errors="replace")
            raise RuntimeError(f"fmha cuda backend: {msg} ({p.describe()})")

    @staticmethod
    def _call(fn, p, q, k, v, seqlens, out, lse, qs, ks, vs, os_, num_splits, ws_ptr, ws_bytes, index):
        return fn(q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr(), lse.data_ptr(),
                  seqlens.data_ptr() if seqlens is not None else None,
                  p.batch, p.seqlen_q, p.heads_q, p.heads_kv, p.seqlen_k, p.head_dim, _DTYPE_CODE[p.dtype],
                  qs[0], qs[1], qs[2], ks[0], ks[1], ks[2], vs[0], vs[1], vs[2], os_[0], os_[1], os_[2],
                  p.softmax_scale, 1 if p.causal else 0, num_splits, ws_ptr, ws_bytes,
                  torch.cuda.current_stream(index).cuda_stream)
