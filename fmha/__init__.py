"""fmha: fused multi-head attention kernels for LLM decode.

    out = fmha.attention(q, k_cache, v_cache, cache_seqlens)   # q [B,T,Hq,D], cache [B,S,Hkv,D]
    out = fmha.attention(q, k_pool, v_pool, cache_seqlens, block_table=bt)  # paged (docs/paged.md)
    out = fmha.flash_attn_with_kvcache(q, k_cache, v_cache, k, v, cache_seqlens=lens)  # FlashAttention 2's call
    out, lse = fmha.flash_mla_with_kvcache(q, latent_pool, bt, lens, 512, *fmha.get_mla_metadata())  # FlashMLA's

Backends: "reference" (fp32 PyTorch, ground truth), "triton" (portable FA2
split-KV kernel), "cuda" (hand-written sm_90a TMA + WGMMA kernel).
"""
from .api import attention, explain, sdpa
from .compat import flash_attn_with_kvcache, flash_mla_with_kvcache, get_mla_metadata
from .compare import compare
from .backends import available_backends
from .dispatch import Decision
from .problem import Problem

__all__ = ["attention", "sdpa", "flash_attn_with_kvcache", "flash_mla_with_kvcache", "get_mla_metadata", "explain",
           "compare", "available_backends", "Decision", "Problem"]
__version__ = "0.1.0"
