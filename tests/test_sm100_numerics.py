"""The sm_100a kernel's arithmetic, reproduced in PyTorch and checked against the fp32 reference on random
data (issue 25 §3 "Algorithm"): the kernel itself cannot run here, so this checks the algorithm it
implements, step by step as sm100/mainloop_rows.cuh orders it:

* tiles of the configuration's kBlockN keys (sm100/config.h), packed rows on M (64 rows a block);
* S in fp32 (Tensor Memory), scores in the log2 domain: one FMA of qk_scale = scale x log2(e), then ex2;
* an exact running max m_i per row; alpha = 2^(m_old - m_new); O *= alpha in fp32 only where some row of
  a warp's 16 rows raised a finite max (the vote; the others have alpha = 1, or an O row of zeros) and never at tile 0,
  where the first P V overwrites O;
* P rounded to the input dtype once, where it is stored (shared memory), l summed from the fp32 P;
* O / l once, at the end; LSE = (m + log2 l) ln 2.
These are the Hopper 64-row loop's rounding points (common/softmax.cuh), so the sm_90a kernel's GPU tests
check the same numerics on real hardware; what differs on sm_100a is where S and O live and the order of
the tensor core's fp32 additions inside one MMA, which nothing off a B200 can reproduce.
"""
from __future__ import annotations

import math

import pytest
import torch

from fmha.reference import attention_reference
from tests._util import compare

TILE = {64: 128, 128: 64, 256: 64, 512: 32}  # sm100/config.h
LOG2E = 1.4426950408889634


def rows_loop(q, k, v, cache_seqlens, scale, causal, dtype):
    """One KV head at a time, all packed rows of it (T x G) at once; returns out [B, T, Hq, D], lse [B, Hq, T]."""
    B, T, Hq, D = q.shape
    Hkv = k.shape[2]
    G = Hq // Hkv
    n_tile = TILE[D]
    qk_scale = scale * LOG2E
    out = torch.zeros(B, T, Hq, D)
    lse = torch.zeros(B, Hq, T)
    for b in range(B):
        L = int(cache_seqlens[b])
        for h in range(Hkv):
            qq = q[b, :, h * G:(h + 1) * G].reshape(T * G, D).float()  # packed row r = t G + g
            rows = T * G
            t_of = torch.arange(rows) // G
            limit = torch.minimum(torch.full((rows,), L), L - T + t_of + 1) if causal else torch.full((rows,), L)
            m = torch.full((rows,), -math.inf)
            l_i = torch.zeros(rows)
            acc = torch.zeros(rows, D)
            for it, j0 in enumerate(range(0, L, n_tile)):
                kt = k[b, j0:j0 + n_tile, h].float()
                vt = v[b, j0:j0 + n_tile, h].float()
                cols = j0 + torch.arange(kt.shape[0])
                kt = torch.where((cols < L)[:, None], kt, torch.zeros_like(kt))  # rows past L: any value
                vt = torch.where((cols < L)[:, None], vt, torch.zeros_like(vt))  # the V tail, cleared
                s = qq @ kt.T  # S in fp32
                s = torch.where(cols[None, :] < limit[:, None], s, torch.tensor(-math.inf))
                m_prev = m
                m_new = torch.maximum(m, s.max(dim=1).values * qk_scale)
                ref = torch.where(m_new == -math.inf, torch.zeros_like(m_new), m_new)
                alpha = torch.exp2(m - ref)
                p = torch.exp2(s * qk_scale - ref[:, None])
                l_i = l_i * alpha + p.sum(dim=1)
                m = m_new
                if it > 0:
                    # the vote: a warp (16 rows) rescales when one of its rows raised a finite max
                    for w0 in range(0, rows, 16):
                        a = alpha[w0:w0 + 16]
                        if bool(((a != 1) & (m_prev[w0:w0 + 16] != -math.inf)).any()):
                            acc[w0:w0 + 16] *= a[:, None]
                acc = acc + p.to(dtype).float() @ vt if it > 0 else p.to(dtype).float() @ vt
            empty = ~(l_i > 0)
            o = torch.where(empty[:, None], torch.zeros_like(acc), acc / l_i.clamp_min(1e-30)[:, None])
            ls = torch.where(empty, torch.full_like(l_i, -math.inf), (m + torch.log2(l_i.clamp_min(1e-30))) * math.log(2))
            out[b, :, h * G:(h + 1) * G] = o.reshape(T, G, D)
            lse[b, h * G:(h + 1) * G] = ls.reshape(T, G).T
    return out.to(dtype), lse


@pytest.mark.parametrize("B,T,Hq,Hkv,S,D", [
    (2, 1, 28, 4, 1000, 64),
    (2, 3, 28, 4, 129, 128),
    (1, 1, 8, 1, 7, 128),
    (2, 4, 16, 8, 300, 256),
    (1, 2, 16, 1, 97, 512),
])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_sm100_rows_loop_arithmetic(B, T, Hq, Hkv, S, D, dtype):
    g = torch.Generator().manual_seed(B * 1000 + S + D)
    q = torch.randn(B, T, Hq, D, generator=g).to(dtype)
    k = torch.randn(B, S, Hkv, D, generator=g).to(dtype)
    v = torch.randn(B, S, Hkv, D, generator=g).to(dtype)
    # varlen, a zero-length sequence where B > 1, and NaN in every slot past the lengths
    lens = torch.tensor([S] + [0] * (B - 1), dtype=torch.int32) if B > 1 else torch.tensor([S], dtype=torch.int32)
    for b in range(B):
        k[b, int(lens[b]):] = float("nan")
        v[b, int(lens[b]):] = float("nan")
    scale = 1 / math.sqrt(D)
    causal = T > 1
    out, lse = rows_loop(q, k, v, lens, scale, causal, dtype)
    ref, ref_lse = attention_reference(q, k, v, lens, scale, causal)
    valid_v = v[~torch.isnan(v)].float()
    vmax = valid_v.abs().max().item() if valid_v.numel() else 1.0
    compare(out, lse, ref, ref_lse, dtype, vmax, what=f"sm100 rows loop D={D}")


def test_sm100_rows_loop_tiles_are_the_configured_ones():
    """TILE mirrors sm100/config.h (the tile decides where each rescale happens)."""
    import re

    from fmha.cuda import loader

    text = (loader.CSRC / "sm100" / "config.h").read_text()
    for d, tile in TILE.items():
        block = text[text.index(f"case {d}:"):]
        first = re.search(r"return \{(\d+),", block)
        assert first and int(first.group(1)) == tile, (d, tile)
