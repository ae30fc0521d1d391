"""Caches whose element offsets pass 2^31 (GPU only: about 18 GB of device memory).

Both kernels must form K/V addresses in 64 bits: the Triton kernel's batch and head offsets always, its
token offsets when token stride x S reaches 2^31 (OFFS_64); the CUDA kernel's TMA descriptors take 64-bit
byte strides."""
from __future__ import annotations

import pytest
import torch

from _util import check_backend, has_cuda_kernel

HEADS_ALLOCATED = 64  # the cache is heads 0-1 of a 64-head allocation: a token stride of 64 x 128 elements
S = 2 ** 18 + 1000    # tokens >= 2^18 lie past 2^31 elements from the start of their sequence


def _big_gpu():
    return torch.cuda.is_available() and torch.cuda.get_device_properties(0).total_memory >= 40e9


pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not _big_gpu(), reason="needs a CUDA GPU with at least 40 GB of memory")]


def test_offsets_past_2_31_elements():
    """Two sequences of 2^18 + 1000 and 2^18 + 223 keys in a [2, S, 64, 128] allocation (2^32 + 16M
    elements each for K and V, 2^31 + 8M a sequence) read as a 2-head cache: the last 1000 keys of
    sequence 0 and all of sequence 1 lie past 2^31 elements. One test (not parametrised) so that parallel workers do not
    hold several such caches at once."""
    g = torch.Generator(device="cuda").manual_seed(31)

    def cache():
        buf = torch.empty(2, S, HEADS_ALLOCATED, 128, dtype=torch.bfloat16, device="cuda")
        view = buf[:, :, :2]
        view.normal_(generator=g)
        return view

    k, v = cache(), cache()
    assert k.stride(1) * S >= 2 ** 31 and k.stride(0) >= 2 ** 31
    sl = torch.tensor([S, S - 777], dtype=torch.int32, device="cuda")
    backends = ["triton"] + (["cuda"] if has_cuda_kernel() else [])
    for T in (1, 3):
        q = torch.randn(2, T, 16, 128, generator=g, device="cuda", dtype=torch.bfloat16)
        for backend in backends:
            check_backend(backend, q, k, v, sl, causal=True, what=f"offsets past 2^31 T={T}")
