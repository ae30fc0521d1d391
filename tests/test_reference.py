"""The reference backend against float64 math written independently (explicit loops)."""
import math

import pytest
import torch

from fmha.reference import attention_reference


def float64_attention(q, k, v, seqlens, scale, causal):
    B, T, Hq, D = q.shape
    S, Hkv = k.shape[1], k.shape[2]
    G = Hq // Hkv
    out = torch.zeros(B, T, Hq, D, dtype=torch.float64)
    lse = torch.full((B, Hq, T), float("-inf"), dtype=torch.float64)
    for b in range(B):
        L = min(max(int(seqlens[b]), 0), S)
        for h in range(Hq):
            for t in range(T):
                last = L - 1 if not causal else min(L - 1, L - T + t)
                if last < 0:
                    continue
                qv = q[b, t, h].double()
                ks = k[b, :last + 1, h // G].double()
                vs = v[b, :last + 1, h // G].double()
                s = (ks @ qv) * scale
                lse[b, h, t] = torch.logsumexp(s, 0)
                out[b, t, h] = torch.softmax(s, 0) @ vs
    return out, lse


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("B,T,Hq,Hkv,S,D,seqlens", [
    (2, 3, 4, 2, 7, 64, [7, 2]),      # row 0 of seq 1 sees no key under causal (L - T + 0 < 0)
    (3, 1, 6, 1, 9, 64, [0, 9, 4]),   # MQA, an empty sequence
    (1, 4, 2, 2, 5, 128, [5]),
])
def test_reference_matches_float64(B, T, Hq, Hkv, S, D, seqlens, causal):
    g = torch.Generator().manual_seed(1)
    q = torch.randn(B, T, Hq, D, generator=g).bfloat16()
    k = torch.randn(B, S, Hkv, D, generator=g).bfloat16()
    v = torch.randn(B, S, Hkv, D, generator=g).bfloat16()
    sl = torch.tensor(seqlens, dtype=torch.int32)
    scale = 1 / math.sqrt(D)
    out, lse = attention_reference(q, k, v, sl, scale, causal)
    ref, ref_lse = float64_attention(q, k, v, sl, scale, causal)
    assert torch.allclose(out.double(), ref, atol=1e-5, rtol=1e-5)
    assert torch.equal(torch.isneginf(lse), torch.isneginf(ref_lse))
    fin = torch.isfinite(ref_lse)
    assert torch.allclose(lse.double()[fin], ref_lse[fin], atol=1e-5)
    # empty rows: zeros, never NaN
    assert not torch.isnan(out).any()
    assert (out.double()[torch.isneginf(ref_lse).permute(0, 2, 1)] == 0).all()
