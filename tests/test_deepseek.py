"""DeepSeek decode: V of its own head dim ((576, 512) and (512, 512)), V as k_cache's own memory (the
latent read once), and attention sinks; against the fp32 reference and direct float64 math.

Under the Triton interpreter (a CPU) the shapes are tiny: D = 576 tiles are slow there.
"""
from __future__ import annotations

import dataclasses
import math
import re

import pytest
import torch

import fmha
from conftest import DEVICE
from _util import (CUDA_KERNEL_SKIP, compare, force_launch_plan, has_cuda_kernel, make_paged, paged_latent,
                   run_poisoned)
from fmha.problem import validate, validate_cached
from fmha.reference import attention_reference
from fmha.cuda.backend import LATENT_NARROW_ROWS

bf16 = torch.bfloat16
# Large magnitudes: the sink dominates a row or vanishes from it; exp(100) overflows fp32 unless the sink takes
# part in the running max.
SINK_VALUES = (20.0, -20.0, 100.0, 1.5, -3.0, -100.0)


def sinks_for(Hq, device=DEVICE):
    return torch.tensor([SINK_VALUES[h % len(SINK_VALUES)] for h in range(Hq)], dtype=torch.float32, device=device)


def latent_inputs(B, T, Hq, Hkv, S, Dqk, Dv, v_mode, seqlens, seed=0, device=DEVICE):
    """q, k, v, cache_seqlens on `device`; v is k itself ("self"), its first Dv columns ("slice") or its own
    tensor ("separate")."""
    g = torch.Generator().manual_seed(seed)

    def rnd(*shape):
        return torch.randn(*shape, generator=g).to(device, bf16)

    q, k = rnd(B, T, Hq, Dqk), rnd(B, S, Hkv, Dqk)
    v = {"self": lambda: k, "slice": lambda: k[..., :Dv], "separate": lambda: rnd(B, S, Hkv, Dv)}[v_mode]()
    return q, k, v, torch.tensor(seqlens, dtype=torch.int32, device=device)


def with_nan_past_lengths(k, v, sl, v_mode):
    """Copies of k and v (v still k's memory where it was) with NaN in every slot at or past each length."""
    k = k.clone()
    v = v.clone() if v_mode == "separate" else k[..., :v.shape[-1]]
    for b, n in enumerate(sl.tolist()):
        k[b, n:] = float("nan")
        v[b, n:] = float("nan")
    return k, v


def case_inputs(Dqk, Dv, v_mode, T, heads, S, page_size, use_sinks, seqlens, seed, device=DEVICE, dtype=bf16):
    """A case's inputs as a kernel sees them (NaN past every length, or page pools with NaN in every slot no
    sequence owns) and the fp32 reference on the clean caches: (q, k_in, v_in, sl, table, sinks, ref, ref_lse, v).
    dtype float16: q and the caches converted after the reference (bf16 values are fp16 values at these
    magnitudes), V still a view of K where v_mode says so."""
    Hq, Hkv = heads
    q, k, v, sl = latent_inputs(len(seqlens), T, Hq, Hkv, S, Dqk, Dv, v_mode, seqlens, seed=seed, device=device)
    sinks = sinks_for(Hq, device=device) if use_sinks else None
    ref, ref_lse = attention_reference(q, k, v, sl, Dqk ** -0.5, True, sinks=sinks)
    if page_size is None:
        k_in, v_in = with_nan_past_lengths(k, v, sl, v_mode)
        table = None
    else:
        k_in, v_in, table = paged_latent(k, v, page_size, sl, v_mode, seed=S)
    if dtype != bf16:
        q, k_in = q.to(dtype), k_in.to(dtype)
        v_in = {"separate": v_in.to(dtype), "slice": k_in[..., :Dv], "self": k_in}[v_mode]
    return q, k_in, v_in, sl, table, sinks, ref, ref_lse, v


# (D_qk, D_v, v_mode, T, (Hq, Hkv), S, page_size, sinks): every value of each axis, the latent modes at both
# head dims, paged at pages of 5 (a page id per key), 16 and 32 (one page id per D = 576 tile).
CASES = [
    (576, 512, "slice", 1, (16, 1), 33, None, True),
    (576, 512, "slice", 3, (4, 1), 7, 5, True),
    (576, 512, "slice", 3, (16, 1), 33, 16, False),
    (576, 512, "slice", 1, (4, 1), 1, 16, False),
    (576, 512, "slice", 3, (4, 1), 40, 32, True),
    (576, 512, "separate", 1, (4, 1), 33, None, False),
    (576, 512, "separate", 3, (4, 1), 33, 5, True),
    (512, 512, "self", 1, (16, 1), 1, None, True),
    (512, 512, "self", 3, (4, 1), 33, 16, True),
    (512, 512, "self", 3, (16, 1), 7, None, False),
    (512, 512, "separate", 3, (4, 1), 33, None, True),
    (64, 64, "self", 3, (8, 2), 33, None, True),
    (128, 128, "separate", 1, (8, 2), 33, 5, True),
    (576, 512, "slice", 4, (6, 2), 33, None, True),  # T = 4 causal, two KV heads of a 576 latent
    (512, 512, "self", 2, (8, 1), 20, 16, False),
    (576, 512, "slice", 2, (28, 4), 129, None, True),  # GQA 28/4 of a 576 latent with sinks, T = 2
    (512, 512, "self", 4, (4, 1), 129, 32, True),
    (256, 256, "separate", 3, (8, 2), 129, None, True),
    (576, 512, "slice", 1, (16, 1), 1000, 64, True),  # S = 1000 through 64-token pages
    # GQA 28/4 at T = 3 with sinks, contiguous and through 64-token pages, at both latent widths
    (576, 512, "slice", 3, (28, 4), 129, None, True),
    (576, 512, "slice", 3, (28, 4), 1000, 64, True),
    (512, 512, "self", 3, (28, 4), 7, 64, True),
    (128, 128, "separate", 3, (28, 4), 129, 64, True),
    # 64 and 128 query heads a KV head (one and several row blocks), S = 1 and 1000 at 512, a V of its own paged
    (512, 512, "self", 1, (64, 1), 129, None, True),
    (576, 512, "slice", 2, (128, 1), 129, 64, True),
    (512, 512, "self", 1, (16, 1), 1000, None, False),
    (576, 512, "slice", 1, (16, 1), 1, None, True),
    (576, 512, "separate", 2, (8, 2), 129, 64, True),
    # GQA 28/4 at T = 3 over one key and over seven (paged); one query head a KV head; 512 with a V of its own, paged
    (576, 512, "slice", 3, (28, 4), 1, None, True),
    (576, 512, "slice", 3, (28, 4), 7, 16, True),
    (576, 512, "slice", 2, (4, 4), 129, 16, True),
    (512, 512, "separate", 3, (28, 4), 129, 32, True),
]


@pytest.mark.parametrize("backend", ["triton", "reference"])
@pytest.mark.parametrize("Dqk,Dv,v_mode,T,heads,S,page_size,use_sinks", CASES)
def test_triton_against_reference(backend, Dqk, Dv, v_mode, T, heads, S, page_size, use_sinks):
    """Poisoned out and LSE, NaN in every cache slot past a sequence's length (or no sequence's page), a
    zero-length sequence and (T = 3) one whose first causal rows see no key: output and LSE against the reference
    on the clean caches; the empty rows give zeros and lse = the sink (-inf without sinks). The reference backend
    too: its page gather and its masking of the NaN slots."""
    Hq, Hkv = heads
    q, k_in, v_in, sl, table, sinks, ref, ref_lse, v = case_inputs(Dqk, Dv, v_mode, T, heads, S, page_size, use_sinks,
                                                                   [S, 0, min(S, 2)], seed=Dqk + S + T)
    p = validate(q, k_in, v_in, sl, block_table=table, sinks=sinks)
    assert (p.head_dim, p.head_dim_v, p.kv_shared, p.has_sinks) == (Dqk, Dv, v_mode != "separate", use_sinks)
    out, lse = run_poisoned(backend, q, k_in, v_in, sl, block_table=table, sinks=sinks)
    compare(out, lse, ref, ref_lse, q.dtype, vmax=v.float().abs().max().item(),
            what=f"{backend} {Dqk}/{Dv} {v_mode} T={T} {Hq}/{Hkv} S={S} page={page_size} sinks={use_sinks}")
    empty = torch.full((Hq, T), float("-inf"), device=DEVICE) if sinks is None else sinks[:, None].expand(Hq, T)
    assert (out[1] == 0).all() and torch.allclose(lse[1], empty, rtol=0, atol=1e-5)
    if T == 3:  # two keys, three queries: the first sees none
        assert (out[2, 0] == 0).all() and torch.allclose(lse[2, :, 0], empty[:, 0], rtol=0, atol=1e-5)


@pytest.mark.parametrize("Dqk,Dv,v_mode,num_splits", [(576, 512, "slice", 3), (64, 64, "separate", 2)])
def test_triton_split_merge_adds_the_sink_once(Dqk, Dv, v_mode, num_splits):
    """Forced split-KV: the partials stay sink-free and the combine kernel adds each sink once, also to a sequence
    with empty splits and to an empty one."""
    from fmha.triton.decode import decode_attention

    Hq, Hkv = (4, 1) if Dqk == 576 else (8, 2)
    q, k, v, sl = latent_inputs(3, 2, Hq, Hkv, 100, Dqk, Dv, v_mode, [100, 0, 30], seed=7)
    sinks = sinks_for(Hq)
    p = validate(q, k, v, sl, sinks=sinks)
    out = torch.full((3, 2, Hq, Dv), float("nan"), dtype=bf16, device=DEVICE)
    lse = torch.full((3, Hq, 2), float("nan"), device=DEVICE)
    assert decode_attention(p, q, k, v, sl, out, lse, num_splits=num_splits, sinks=sinks) == num_splits
    ref, ref_lse = attention_reference(q, k, v, sl, p.softmax_scale, True, sinks=sinks)
    compare(out, lse, ref, ref_lse, q.dtype, vmax=v.float().abs().max().item(), what=f"split={num_splits}")
    assert (out[1] == 0).all() and torch.allclose(lse[1], sinks[:, None].expand(Hq, 2), rtol=0, atol=1e-5)


@pytest.mark.parametrize("Dqk,Dv,v_mode,page_size,num_splits,dtype", [
    (576, 512, "slice", 16, 3, torch.bfloat16), (576, 512, "slice", None, 2, torch.float16),
    (512, 512, "self", 64, 2, torch.bfloat16), (128, 128, "separate", 5, 3, torch.float16),
    (128, 128, "separate", None, 2, torch.bfloat16)])
def test_triton_forced_splits_over_nan_caches_with_sinks(Dqk, Dv, v_mode, page_size, num_splits, dtype):
    """The split path (partials + combine) where every slot past a length, or no sequence's, holds NaN: contiguous
    and paged, sinks joined once, an empty sequence and one shorter than T, GQA 28/4, bf16 and fp16."""
    from fmha.triton.decode import decode_attention

    Hq = 28 if Dqk == 128 else 8
    heads, S = (Hq, 4 if Dqk == 128 else 1), 300 if Dqk == 128 else 200  # (at least num_splits Triton tiles)
    q, k_in, v_in, sl, table, sinks, ref, ref_lse, v = case_inputs(Dqk, Dv, v_mode, 3, heads, S, page_size, True,
                                                                   [S, 0, 2, 61], seed=Dqk + num_splits, dtype=dtype)
    p = validate(q, k_in, v_in, sl, block_table=table, sinks=sinks)
    out = torch.full((4, 3, Hq, Dv), float("nan"), dtype=dtype, device=DEVICE)
    lse = torch.full((4, Hq, 3), float("nan"), device=DEVICE)
    assert decode_attention(p, q, k_in, v_in, sl, out, lse, num_splits=num_splits, block_table=table,
                            sinks=sinks) == num_splits
    compare(out, lse, ref, ref_lse, dtype, vmax=v.float().abs().max().item(),
            what=f"{Dqk}/{Dv} {v_mode} page={page_size} splits={num_splits} {dtype}")
    assert (out[1] == 0).all() and torch.allclose(lse[1], sinks[:, None].expand(Hq, 3), rtol=0, atol=1e-5)
    assert (out[2, 0] == 0).all() and torch.allclose(lse[2, :, 0], sinks, rtol=0, atol=1e-5)


def test_shared_latent_is_read_through_k_cache():
    """Where the Problem says V is K's memory, the kernel reads V through k_cache's pointer and strides: a v_cache
    view of the same pointer with broadcast strides (every token reads token 0) does not change the result."""
    from fmha.triton.decode import decode_attention

    q, k, _, sl = latent_inputs(2, 2, 4, 1, 40, 576, 512, "slice", [40, 17], seed=11)
    p = validate(q, k, k[..., :512], sl)
    assert p.kv_shared
    v_alias = k.as_strided((2, 40, 1, 512), (k.stride(0), 0, k.stride(2), 1))
    assert v_alias.data_ptr() == k.data_ptr()
    out = torch.full((2, 2, 4, 512), float("nan"), dtype=bf16, device=DEVICE)
    lse = torch.empty(2, 4, 2, device=DEVICE)
    decode_attention(p, q, k, v_alias, sl, out, lse)
    ref, ref_lse = attention_reference(q, k, k[..., :512], sl, p.softmax_scale, True)
    compare(out, lse, ref, ref_lse, q.dtype, vmax=k.float().abs().max().item(), what="V through K")
    with pytest.raises(ValueError, match=r"v_cache: the problem says it shares k_cache's memory"):
        decode_attention(p, q, k, k[..., :512].clone(), sl, out, lse)


def test_non_causal_fp16_and_explicit_scale():
    q, k, v, sl = latent_inputs(2, 3, 4, 1, 20, 576, 512, "slice", [20, 9], seed=3)
    q, k = q.half(), k.half()
    v = k[..., :512]
    sinks = sinks_for(4)
    out, lse = run_poisoned("triton", q, k, v, sl, causal=False, softmax_scale=0.05, sinks=sinks)
    ref, ref_lse = attention_reference(q, k, v, sl, 0.05, False, sinks=sinks)
    compare(out, lse, ref, ref_lse, q.dtype, vmax=v.float().abs().max().item(), what="fp16 non-causal")


# ---- the reference against direct float64 math ------------------------------------------------------------

def float64_sinks(q, k, v, seqlens, scale, causal, sinks):
    """out_j = sum_j exp(s_j) v_j / (exp(sink_h) + sum_k exp(s_k)), lse = log of that denominator; loops."""
    B, T, Hq, _ = q.shape
    S, Hkv, Dv = k.shape[1], k.shape[2], v.shape[3]
    out = torch.zeros(B, T, Hq, Dv, dtype=torch.float64)
    lse = torch.zeros(B, Hq, T, dtype=torch.float64)
    for b in range(B):
        L = min(max(int(seqlens[b]), 0), S)
        for h in range(Hq):
            for t in range(T):
                n = max(0, L if not causal else min(L, L - T + t + 1))  # keys this row sees
                s = (k[b, :n, h * Hkv // Hq].double() @ q[b, t, h].double()) * scale
                denom = math.exp(float(sinks[h])) + s.exp().sum()
                out[b, t, h] = (s.exp()[:, None] * v[b, :n, h * Hkv // Hq].double()).sum(0) / denom
                lse[b, h, t] = torch.log(denom)
    return out, lse


@pytest.mark.parametrize("causal", (True, False))
def test_reference_sinks_match_the_formula(causal):
    """Head dims of their own (V = K's first columns), GQA, a zero-length sequence: out zero, lse = the sink."""
    g = torch.Generator().manual_seed(2)
    q = torch.randn(3, 2, 4, 12, generator=g).bfloat16()
    k = torch.randn(3, 6, 2, 12, generator=g).bfloat16()
    v = k[..., :8]
    sl = torch.tensor([6, 0, 1], dtype=torch.int32)
    sinks = torch.tensor([2.0, -20.0, 100.0, 0.0])
    out, lse = attention_reference(q, k, v, sl, 0.3, causal, sinks=sinks)
    want, want_lse = float64_sinks(q, k, v, sl, 0.3, causal, sinks)
    assert out.shape == (3, 2, 4, 8)
    assert torch.allclose(out.double(), want, atol=1e-6, rtol=1e-5)
    assert torch.allclose(lse.double(), want_lse, atol=1e-5, rtol=1e-6)
    assert (out[1] == 0).all() and torch.equal(lse[1], sinks[:, None].expand(4, 2))
    # out = sum_j exp(s_j - lse) v_j: the lse is the whole denominator's
    s = torch.einsum("thd,shd->hts", q[0].float(), k[0].float().repeat_interleave(2, dim=1)) * 0.3
    if causal:
        s = s.masked_fill(torch.arange(6)[None, None, :] > torch.arange(4, 6)[None, :, None], float("-inf"))
    recon = torch.einsum("hts,shd->thd", torch.exp(s - lse[0][..., None]), v[0].float().repeat_interleave(2, dim=1))
    assert torch.allclose(recon, out[0], atol=1e-5)


def test_minus_inf_sinks_are_no_sinks():
    g = torch.Generator().manual_seed(4)
    q, k, v = (torch.randn(2, 1, 2, 64, generator=g).bfloat16(), *torch.randn(2, 2, 5, 1, 64, generator=g).bfloat16())
    sl = torch.tensor([5, 0], dtype=torch.int32)
    with_sinks = attention_reference(q, k, v, sl, 0.25, True, sinks=torch.full((2,), float("-inf")))
    plain = attention_reference(q, k, v, sl, 0.25, True)
    assert torch.equal(with_sinks[0], plain[0]) and torch.equal(with_sinks[1], plain[1])
    q, k, v = q.to(DEVICE), k.to(DEVICE), v.to(DEVICE)
    got = fmha.attention(q, k, v, sl.to(DEVICE), sinks=torch.full((2,), float("-inf"), device=DEVICE),
                         softmax_scale=0.25, return_lse=True, backend="triton")
    assert torch.equal(got[0], fmha.attention(q, k, v, sl.to(DEVICE), softmax_scale=0.25, backend="triton"))
    assert torch.allclose(got[1].cpu(), plain[1], atol=1e-5) and torch.isneginf(got[1][1]).all()


# ---- sharing: what the Problem records, the memo, explain --------------------------------------------------

def test_kv_shared_is_detected_from_pointer_and_strides():
    q, k, _, sl = latent_inputs(2, 1, 4, 1, 8, 576, 512, "slice", [8, 8])
    assert validate(q, k, k[..., :512], sl).kv_shared
    assert not validate(q, k, k[..., :512].clone(), sl).kv_shared  # a copy
    assert not validate(q, k, k[..., 64:], sl).kv_shared  # columns 64..575: not K's leading columns
    other = k.as_strided((2, 4, 1, 512), (k.stride(0), 2 * k.stride(1), k.stride(2), 1))  # every other token
    assert not validate(q, k[:, :4], other, sl).kv_shared
    q5, k5, _, _ = latent_inputs(2, 1, 4, 1, 8, 512, 512, "self", [8, 8])
    assert validate(q5, k5, k5).kv_shared and "kv-shared" in validate(q5, k5, k5).describe()
    p = validate(q5, k5, k5.clone(), sinks=sinks_for(4))
    assert not p.kv_shared and p.has_sinks and "sinks" in p.describe()


def test_memo_tells_shared_from_a_copy_of_the_same_metadata():
    """k_cache passed as v_cache, then a copy with the same strides and alignment: the memo keys differ, so the
    Triton kernel never reads a separate V through K's pointer."""
    q, k, _, sl = latent_inputs(2, 1, 4, 1, 9, 512, 512, "self", [9, 5], seed=5)
    v = k.clone()
    v[:, :, :, :] = torch.randn(v.shape).to(bf16)
    assert validate_cached(q, k, k, sl).kv_shared and not validate_cached(q, k, v, sl).kv_shared
    for vv in (k, v, k):
        out, lse = run_poisoned("triton", q, k, vv, sl)
        ref, ref_lse = attention_reference(q, k, vv, sl, 512 ** -0.5, True)
        compare(out, lse, ref, ref_lse, q.dtype, vmax=vv.float().abs().max().item(), what="memo")


def test_memo_tells_meta_k_passed_as_v_from_a_separate_meta_v():
    """Meta tensors (shape-only planning, fmha.explain) all have data pointer 0: K passed as V is shared, a
    separate meta V of the same metadata is not, whichever the memo saw first."""
    q = torch.empty(2, 1, 16, 512, dtype=bf16, device="meta")
    k = torch.empty(2, 64, 1, 512, dtype=bf16, device="meta")
    v = torch.empty_like(k)
    for first, second in (((k, k), (k, v)), ((k, v), (k, k))):
        for kk, vv in (first, second):
            assert validate_cached(q, kk, vv).kv_shared == (vv is kk) == validate(q, kk, vv).kv_shared


def test_explain_says_whether_the_latent_is_read_once():
    q, k, v, sl = latent_inputs(1, 1, 4, 1, 8, 576, 512, "slice", [8])
    text = str(fmha.explain(q, k, v, sl, backend="triton"))
    assert "K/V reads: v_cache is the first 512 columns of k_cache: triton reads the latent once" in text, text
    text = str(fmha.explain(q, k, v.clone(), sl, backend="triton"))
    assert "K and V are read separately" in text, text
    q5, k5, _, _ = latent_inputs(1, 1, 4, 1, 8, 512, 512, "self", [8])
    assert "v_cache is k_cache itself: triton reads the latent once" in str(fmha.explain(q5, k5, k5, backend="triton"))
    ref = str(fmha.explain(q5, k5, k5, backend="reference"))
    assert "reference reads the latent twice" in ref, ref
    assert "K/V reads" not in str(fmha.explain(q5, k5, k5.clone(), backend="triton"))
    # the cuda backend's ring reads a K = V cache twice below D = 512 (what its explain says, on any machine)
    from fmha.api import _kv_reads
    from fmha.backends import registry
    q6, k6, _, _ = latent_inputs(1, 1, 4, 1, 8, 64, 64, "self", [8])
    assert "cuda reads the latent twice" in _kv_reads(validate(q6, k6, k6), "cuda", registry()["cuda"])
    assert "cuda reads the latent once" in _kv_reads(validate(q5, k5, k5), "cuda", registry()["cuda"])


# ---- the cuda backend: the latent ring (sm_90a) and sinks, against the reference ------------------------------

cuda_kernel = pytest.mark.skipif(not has_cuda_kernel(), reason=CUDA_KERNEL_SKIP)
sm90_kernel = pytest.mark.skipif(not (has_cuda_kernel() and torch.cuda.get_device_capability() == (9, 0)),
                                 reason=CUDA_KERNEL_SKIP if not has_cuda_kernel() else "an sm_90a kernel's")


def check_cuda_case(Dqk, Dv, v_mode, T, heads, S, page_size, use_sinks, seed, seqlens=None, dtype=bf16,
                    head_major=False):
    """Poisoned out, NaN past every length (or in every page no sequence owns): output and LSE of the cuda backend
    against the fp32 reference on the clean caches; a zero-length sequence gives zeros and lse = the sink.
    head_major: the shared latent's page pool stored [page, head, row, D] (its view keeps the pool's shape)."""
    Hq, Hkv = heads
    q, k_in, v_in, sl, table, sinks, ref, ref_lse, v = case_inputs(Dqk, Dv, v_mode, T, heads, S, page_size, use_sinks,
                                                                   seqlens or [S, 0, min(S, 2)], seed, device="cuda",
                                                                   dtype=dtype)
    if head_major:
        assert page_size is not None and v_mode != "separate"
        k_in = k_in.transpose(1, 2).contiguous().transpose(1, 2)
        assert k_in.stride(1) < k_in.stride(2)
        v_in = k_in if v_mode == "self" else k_in[..., :Dv]
    out, lse = run_poisoned("cuda", q, k_in, v_in, sl, block_table=table, sinks=sinks)
    what = (f"cuda {Dqk}/{Dv} {v_mode} T={T} {Hq}/{Hkv} S={S} page={page_size} sinks={use_sinks} {dtype}"
            f"{' head-major' if head_major else ''}")
    compare(out, lse, ref, ref_lse, q.dtype, vmax=v.float().abs().max().item(), what=what)
    if sl[1].item() == 0:
        empty = torch.full((Hq, T), float("-inf"), device="cuda") if sinks is None else sinks[:, None].expand(Hq, T)
        assert (out[1] == 0).all() and torch.allclose(lse[1], empty, rtol=0, atol=1e-5), what


def static_schedule(monkeypatch):
    """FMHA_CUDA_SCHEDULE=static, with the cuda backend's planned launches forgotten (it reads the variable when it
    first plans a shape)."""
    from fmha.backends import registry

    monkeypatch.setenv("FMHA_CUDA_SCHEDULE", "static")
    monkeypatch.setattr(registry()["cuda"], "_launches", {})


# (config, num_splits) x (D_qk, v_mode, T, (Hq, Hkv), S, page_size, sinks): both latent loops, unsplit and split
# through the combine kernel, at 576 and 512, GQA 28/4, awkward lengths, paged by TMA (64, 32) and gathered
# (16, 5, 1); the 64-key seesaw's splits also inside clusters (contiguous and TMA-paged: two splits merged from
# registers, rows dealt 22, 22, 20 to three ranks, 16 to each of four), with and without sinks; the same loop on
# 48-key tiles (paged in 16-row boxes; more page sizes in test_cuda_seesaw48_paged; at 576 the rope ring).
LATENT_PLANS = [("latent_split_qk", 1), ("latent_split_qk", 3), ("latent_seesaw", 1), ("latent_seesaw", 2),
                ("latent_narrow", 1), ("latent_narrow", 3), ("latent_seesaw64", 1), ("latent_seesaw64", 2),
                ("latent_seesaw64", 3), ("latent_seesaw64", 4), ("latent_seesaw48", 1), ("latent_seesaw48", 2),
                ("latent_seesaw48", 3), ("latent_seesaw48", 4)]
LATENT_CUDA_CASES = [
    (576, "slice", 1, (16, 1), 1000, None, True),
    (576, "slice", 3, (28, 4), 129, None, False),
    (576, "slice", 1, (128, 1), 7, None, True),
    (576, "slice", 2, (64, 1), 1, 16, True),
    (576, "slice", 3, (16, 1), 129, 5, False),
    (512, "self", 1, (16, 1), 1000, None, True),
    (512, "self", 3, (28, 4), 129, 32, False),
    (512, "slice", 4, (16, 1), 7, 5, True),
    (576, "slice", 1, (16, 1), 129, 64, True),
    (576, "slice", 2, (8, 1), 1000, None, False),
    (512, "self", 1, (4, 1), 129, 1, True),
    # two and four 64-row blocks of one KV head (causal blocks that see different numbers of keys), paged by
    # TMA boxes (64, 32)
    (576, "slice", 2, (64, 1), 1000, None, True),
    (512, "self", 4, (64, 1), 129, 64, False),
    (576, "slice", 1, (128, 1), 1000, 32, False),
    # 32 packed rows: the narrow loop's N = 32 (one token of 16 heads past T = 1, and 8 heads of four tokens)
    (576, "slice", 2, (16, 1), 1000, 64, True),
    (512, "self", 4, (8, 1), 129, None, False),
    # GQA 28/4 at T = 3 with sinks through 64-token pages; the 512-wide latent of one key
    (576, "slice", 3, (28, 4), 1000, 64, True),
    (512, "self", 1, (16, 1), 1, None, True),
    # GQA 28/4 at T = 3 over one key and over seven (gathered pages); one query head a KV head
    (576, "slice", 3, (28, 4), 1, None, True),
    (576, "slice", 3, (28, 4), 7, 16, True),
    (576, "slice", 2, (4, 4), 129, 16, True),
]


def _rows(case):
    return case[2] * case[3][0] // case[3][1]


def _serves(config, case):
    """Whether a forced configuration has a kernel for the case: the narrow loop's rows."""
    return config != "latent_narrow" or _rows(case) <= LATENT_NARROW_ROWS


@sm90_kernel
@pytest.mark.gpu
@pytest.mark.parametrize("config,num_splits,Dqk,v_mode,T,heads,S,page_size,use_sinks", [
    (*plan, *case) for plan in LATENT_PLANS for case in LATENT_CUDA_CASES if _serves(plan[0], case)])
def test_cuda_latent_ring_against_reference(monkeypatch, config, num_splits, Dqk, v_mode, T, heads, S, page_size,
                                            use_sinks):
    force_launch_plan(monkeypatch, config, num_splits)
    check_cuda_case(Dqk, 512, v_mode, T, heads, S, page_size, use_sinks, seed=Dqk + S + T + num_splits)


# 48-key tiles read through pages of 16 to 128 tokens in 16-row TMA boxes (pages of 48 and 80 tokens among them),
# unsplit, in clusters and through the combine kernel, a pool whose KV heads are its outer dimension (head-major
# boxes); S = 1020 leaves the last tile running past the table's last page (those rows come back as zeros). At 576
# the rope boxes go through the same pages into their own ring.
@sm90_kernel
@pytest.mark.gpu
@pytest.mark.parametrize("Dqk", [512, 576])
@pytest.mark.parametrize("page_size,num_splits,T,heads,S,head_major", [
    (16, 1, 1, (64, 1), 1000, False), (32, 1, 4, (16, 1), 129, False), (48, 2, 2, (64, 1), 1000, False),
    (64, 1, 1, (128, 1), 1020, False), (64, 2, 1, (64, 1), 7, False), (80, 3, 3, (28, 4), 1000, True),
    (64, 1, 2, (28, 4), 1020, True), (128, 4, 1, (64, 1), 1020, False)])
def test_cuda_seesaw48_paged(monkeypatch, Dqk, page_size, num_splits, T, heads, S, head_major):
    """LATENT_SEESAW48 forced onto a shuffled page pool (NaN in every slot no sequence owns), sinks: out and LSE as
    the reference, a zero-length sequence gives zeros and the sink."""
    force_launch_plan(monkeypatch, "latent_seesaw48", num_splits)
    check_cuda_case(Dqk, 512, "self" if Dqk == 512 else "slice", T, heads, S, page_size, True, seed=page_size + S + T,
                    head_major=head_major)


@sm90_kernel
@pytest.mark.gpu
@pytest.mark.parametrize("use_sinks", [False, True])
@pytest.mark.parametrize("config,Dqk,num_splits,page_size", [
    ("latent_seesaw64", 576, 4, None), ("latent_seesaw64", 512, 4, 64), ("latent_seesaw64", 576, 2, None),
    ("latent_seesaw64", 512, 2, 64), ("latent_seesaw64", 512, 3, None), ("latent_seesaw48", 512, 4, None),
    ("latent_seesaw48", 512, 2, None), ("latent_seesaw48", 512, 3, 64)])
def test_cuda_seesaw64_splits_merge_inside_clusters(monkeypatch, config, Dqk, num_splits, page_size, use_sinks):
    """The 64-key seesaw's splits (on 64- and 48-key tiles) merge inside clusters (no combine kernel, no workspace)
    where the GPU holds every cluster at once, sinks or not, the 512-wide ring's receive buffer included; results as
    the reference."""
    force_launch_plan(monkeypatch, config, num_splits)
    v_mode = "slice" if Dqk == 576 else "self"
    q, k, v, sl = latent_inputs(2, 1, 128, 1, 1000, Dqk, 512, v_mode, [1000, 0], device="cuda")
    sinks = sinks_for(128, device="cuda") if use_sinks else None
    assert f"merged inside clusters of {num_splits} CTAs" in str(fmha.explain(q, k, v, sl, sinks=sinks,
                                                                             backend="cuda"))
    check_cuda_case(Dqk, 512, v_mode, 1, (128, 1), 1000, page_size, use_sinks, seed=Dqk + num_splits)


@sm90_kernel
@pytest.mark.gpu
@pytest.mark.parametrize("config,Dqk,T,heads,page_size", [
    ("latent_seesaw64", 576, 1, (128, 1), None), ("latent_seesaw64", 576, 4, (64, 1), 64),
    ("latent_seesaw64", 576, 3, (64, 1), None), ("latent_seesaw48", 512, 1, (128, 1), None),
    ("latent_seesaw48", 512, 3, (64, 1), 64)])
def test_cuda_seesaw64_row_block_pairs(monkeypatch, config, Dqk, T, heads, page_size):
    """Unsplit 64-key seesaw grids (64- and 48-key tiles) of an even number of row blocks launch them as clusters of
    two (two and four row blocks; three do not pair); results as the reference either way."""
    force_launch_plan(monkeypatch, config, 1)
    v_mode = "slice" if Dqk == 576 else "self"
    q, k, v, sl = latent_inputs(2, T, heads[0], heads[1], 1000, Dqk, 512, v_mode, [1000, 0], device="cuda")
    said = str(fmha.explain(q, k, v, sl, backend="cuda"))
    assert ("launched in clusters of 2" in said) == (-(-T * heads[0] // 64) % 2 == 0), said
    check_cuda_case(Dqk, 512, v_mode, T, heads, 1000, page_size, False, seed=T + 7)


@sm90_kernel
@pytest.mark.gpu
@pytest.mark.parametrize("config,layout,T,heads,num_splits", [
    ("latent_seesaw64", "wide", 3, (32, 1), 1),  # rows 1280 B apart: Q by TMA, boxes of 32 heads x 2 tokens, token 3
    ("latent_seesaw64", "wide", 2, (48, 1), 3),  # 48 heads: a row block is no box of (heads, tokens), consumers load Q
    ("latent_seesaw64", "token_major", 2, (128, 1), 1),  # [T, B, Hq, D] memory as [B, T, Hq, D]: any stride order
    ("latent_seesaw64", "wide", 1, (16, 1), 4),  # 16 heads x 4 tokens a box, tokens 1-3 past T
    ("latent_seesaw64", "wide", 5, (32, 2), 1),  # two KV heads: boxes from head 16 kvh, tokens 5-7 past T
    ("latent_seesaw64", "wide", 2, (256, 2), 3),  # two KV heads of 128: boxes from head 128 kvh + 64 (row block % 2)
    # the narrow loop's 32-row boxes (N = 16 below 17 rows, 32 above)
    ("latent_narrow", "wide", 1, (16, 1), 1),  # 16 heads x 2 tokens, token 1 past T
    ("latent_narrow", "wide", 3, (4, 1), 3),  # 4 heads x 8 tokens, tokens 3-7 past T
    ("latent_narrow", "token_major", 2, (16, 2), 1),  # two KV heads of 8: 8 heads x 4 tokens from head 8 kvh
    ("latent_narrow", "wide", 1, (12, 1), 1),  # 12 heads: no box of (heads, tokens), the consumers load Q
    ("latent_narrow", "wide", 4, (1, 1), 1),  # one head x 32 tokens, tokens 4-31 past T
    ("latent_narrow", "wide", 3, (4, 2), 3),  # two KV heads of 2: 2 heads x 16 tokens from head 2 kvh
    ("latent_narrow", "wide", 1, (32, 1), 1),  # 32 heads of one token (N = 32)
    ("latent_narrow", "wide", 3, (8, 1), 1),  # 8 heads x 4 tokens, token 3 past T: 24 rows by TMA (N = 32)
    ("latent_narrow", "token_major", 2, (16, 1), 3),  # 32 rows of a strided view, split (N = 32)
])
def test_cuda_latent_q_views(monkeypatch, config, layout, T, heads, num_splits):
    """The 64-key seesaw's and the narrow loop's Q as views whose rows are not dense: read by TMA where its rows
    are one box of (heads, tokens), else by the consumers; results as the reference, poisoned output, NaN past
    every length."""
    force_launch_plan(monkeypatch, config, num_splits)
    Hq, Hkv = heads
    B, S, Dqk = 2, 129, 576
    q, k, v, sl = latent_inputs(B, T, Hq, Hkv, S, Dqk, 512, "slice", [S, 70], seed=T + Hq, device="cuda")
    if layout == "token_major":
        view = q.transpose(0, 1).contiguous().transpose(0, 1)
    else:
        view = torch.full((B, T, Hq, 640), float("nan"), dtype=q.dtype, device="cuda")[..., :Dqk]
        view.copy_(q)
    assert torch.equal(view, q) and not view.is_contiguous()
    ref, ref_lse = attention_reference(q, k, v, sl, Dqk ** -0.5, True)
    k_in, v_in = with_nan_past_lengths(k, v, sl, "slice")
    out, lse = run_poisoned("cuda", view, k_in, v_in, sl)
    compare(out, lse, ref, ref_lse, q.dtype, vmax=v.float().abs().max().item(),
            what=f"{config}: Q {layout} T={T} {Hq}/{Hkv} splits={num_splits}")


@pytest.mark.parametrize("layout,T,heads", [("wide", 3, (28, 4)), ("token_major", 2, (16, 1))])
def test_triton_latent_q_and_out_views(layout, T, heads):
    """Triton's 576/512 latent with q and out as views whose rows are not dense (a wider buffer, or token-major
    memory), sinks, NaN past every length: results as the reference, and the buffer's columns past D_v
    untouched."""
    Hq, Hkv = heads
    B, S, Dqk = 2, 129, 576
    q, k, v, sl = latent_inputs(B, T, Hq, Hkv, S, Dqk, 512, "slice", [S, 70], seed=T + Hq)
    sinks = sinks_for(Hq)
    if layout == "token_major":
        q_view = q.transpose(0, 1).contiguous().transpose(0, 1)
        buf = torch.full((T, B, Hq, 512), float("nan"), dtype=q.dtype, device=DEVICE)
        out = buf.transpose(0, 1)
    else:
        q_view = torch.full((B, T, Hq, 640), float("nan"), dtype=q.dtype, device=DEVICE)[..., :Dqk]
        q_view.copy_(q)
        buf = torch.full((B, T, Hq, 640), float("nan"), dtype=q.dtype, device=DEVICE)
        out = buf[..., :512]
    assert torch.equal(q_view, q) and not q_view.is_contiguous() and not out.is_contiguous()
    ref, ref_lse = attention_reference(q, k, v, sl, Dqk ** -0.5, True, sinks=sinks)
    k_in, v_in = with_nan_past_lengths(k, v, sl, "slice")
    res, lse = fmha.attention(q_view, k_in, v_in, sl, return_lse=True, backend="triton", out=out, sinks=sinks)
    assert res.data_ptr() == out.data_ptr()
    compare(out, lse, ref, ref_lse, q.dtype, vmax=v.float().abs().max().item(), what=f"triton views {layout}")
    if layout == "wide":
        assert torch.isnan(buf[..., 512:]).all(), "columns past D_v were written"


@sm90_kernel
@pytest.mark.gpu
@pytest.mark.parametrize("config,Dqk,layout,T,heads,use_sinks,dtype", [
    ("latent_seesaw64", 576, "wide", 3, (28, 4), True, bf16),  # 21 rows: the copy-out stops at the padding rows
    ("latent_seesaw64", 576, "token_major", 2, (64, 1), False, torch.float16),  # [T, B, Hq, Dv] memory
    ("latent_seesaw64", 576, "wide", 1, (256, 2), True, bf16),  # two row blocks of each of two KV heads (pairs)
    # 48-key tiles: each warpgroup's rows staged across its halves of two stages
    ("latent_seesaw48", 512, "wide", 3, (28, 4), True, bf16),
    ("latent_seesaw48", 512, "token_major", 2, (64, 1), False, torch.float16),
    ("latent_seesaw48", 512, "wide", 1, (256, 2), True, bf16),
])
def test_cuda_seesaw64_out_views(monkeypatch, config, Dqk, layout, T, heads, use_sinks, dtype):
    """The unsplit 64-key seesaw's output, staged in shared memory and copied out a row at a time, into views of
    `out` whose rows are not dense: results as the reference, and the buffer's columns past D_v untouched."""
    force_launch_plan(monkeypatch, config, 1)
    Hq, Hkv = heads
    B, S = 2, 129
    v_mode = "slice" if Dqk == 576 else "self"
    q, k, _, sl = latent_inputs(B, T, Hq, Hkv, S, Dqk, 512, v_mode, [S, 70], seed=T + Hq, device="cuda")
    q, k = q.to(dtype), k.to(dtype)
    v = k[..., :512]
    sinks = sinks_for(Hq, device="cuda") if use_sinks else None
    ref, ref_lse = attention_reference(q, k, v, sl, Dqk ** -0.5, True, sinks=sinks)
    k_in, v_in = with_nan_past_lengths(k, v, sl, v_mode)
    if layout == "token_major":
        buf = torch.full((T, B, Hq, 512), float("nan"), dtype=q.dtype, device="cuda")
        out = buf.transpose(0, 1)
    else:
        buf = torch.full((B, T, Hq, 640), float("nan"), dtype=q.dtype, device="cuda")
        out = buf[..., :512]
    res, lse = fmha.attention(q, k_in, v_in, sl, return_lse=True, backend="cuda", out=out, sinks=sinks)
    assert res.data_ptr() == out.data_ptr()
    compare(out, lse, ref, ref_lse, q.dtype, vmax=v.float().abs().max().item(),
            what=f"{config} out {layout} T={T} {Hq}/{Hkv} sinks={use_sinks}")
    if layout == "wide":
        assert torch.isnan(buf[..., 512:]).all(), "columns past D_v were written"


@sm90_kernel
@pytest.mark.gpu
@pytest.mark.parametrize("config,Dqk,T,heads,page_size,use_sinks", [
    ("latent_seesaw64", 576, 1, (64, 1), None, True),  # one full row block a sequence (V4-Flash's rows)
    ("latent_seesaw64", 512, 3, (28, 4), 64, False),   # 21 rows: the copy-out stops at the padding rows; TMA-paged
    ("latent_seesaw64", 576, 2, (128, 1), None, True),  # two row blocks a KV head
    ("latent_seesaw64", 576, 2, (12, 1), None, False),  # 24 rows of one KV head, 12 heads of two tokens
    ("latent_seesaw64", 512, 2, (32, 2), None, True),   # two KV heads of 32 rows
    ("latent_seesaw48", 512, 1, (64, 1), None, True),
    ("latent_seesaw48", 512, 3, (28, 4), 64, False),
    ("latent_seesaw48", 512, 2, (128, 1), None, True),
    ("latent_seesaw48", 576, 3, (28, 4), 64, True),
    ("latent_seesaw48", 576, 2, (128, 1), None, False),
])
def test_cuda_seesaw64_partials_for_the_combine_kernel(monkeypatch, config, Dqk, T, heads, page_size, use_sinks):
    """Four splits of the 64-key seesaw (64- and 48-key tiles) on 160 clusters, more than the GPU holds at once, so
    that each CTA writes its partials (fp16 ones: the output is bf16) to the workspace and the combine kernel merges
    them: splits with one, two and no tiles, padding rows, a zero-length sequence; results and LSE as the reference.
    (The static schedule: by default a grid this far past one wave deals its tiles instead.)"""
    static_schedule(monkeypatch)
    force_launch_plan(monkeypatch, config, 4)
    Hq, Hkv = heads
    B = 160 // (Hkv * -(-T * Hq // Hkv // 64))
    seqlens = [(37 * i) % 300 + 1 for i in range(B)]
    seqlens[1] = 0
    v_mode = "slice" if Dqk == 576 else "self"
    q, k, v, sl = latent_inputs(B, T, Hq, Hkv, 300, Dqk, 512, v_mode, seqlens, device="cuda")
    assert "combine kernel" in str(fmha.explain(q, k, v, sl, backend="cuda"))
    check_cuda_case(Dqk, 512, v_mode, T, heads, 300, page_size, use_sinks, seed=Dqk + T, seqlens=seqlens)


@sm90_kernel
@pytest.mark.gpu
@pytest.mark.parametrize("Dqk,use_sinks,dtype", [(576, True, bf16), (512, False, bf16), (576, True, torch.float16)])
def test_cuda_combine_rows_past_the_last_cta(monkeypatch, Dqk, use_sinks, dtype):
    """The combine kernel at D_v = 512 merges four rows a CTA (32 threads a row; fp16 partials for a bf16 output,
    fp32 for an fp16 one): 165 sequences of 7 query heads are 1155 rows, so its last CTA has three, beside a
    zero-length sequence and splits of no tiles (the static schedule, as above)."""
    static_schedule(monkeypatch)
    force_launch_plan(monkeypatch, "latent_seesaw64", 4)
    seqlens = [(53 * i) % 260 + 1 for i in range(165)]
    seqlens[1] = 0
    v_mode = "slice" if Dqk == 576 else "self"
    q, k, v, sl = latent_inputs(165, 1, 7, 1, 260, Dqk, 512, v_mode, seqlens, device="cuda")
    assert "+ combine kernel" in str(fmha.explain(q, k, v, sl, backend="cuda"))
    check_cuda_case(Dqk, 512, v_mode, 1, (7, 1), 260, None, use_sinks, seed=Dqk + 1, seqlens=seqlens, dtype=dtype)


@sm90_kernel
@pytest.mark.gpu
@pytest.mark.parametrize("schedule", ["static", "balanced"])
@pytest.mark.parametrize("config,Dqk", [("latent_seesaw48", 576), ("latent_seesaw64", 512)])
def test_cuda_fp16_partials_keep_every_magnitude(monkeypatch, config, Dqk, schedule):
    """Four splits merged by the combine kernel (160 clusters of four, more than the GPU holds; static schedule), or
    the same plan's tiles dealt by length (balanced: pieces of the sequences several CTAs share), write fp16 partials
    where the output is bf16, each row scaled by a power of two: latents of magnitude 1e8 (past fp16's range), 1e-8
    (below its normal numbers) and 64-column blocks alternating 1e4 and 1e-4 within a row come back within the bf16
    bound of each block (2u of the block's max|v|, plus u / 8 for the fp16 rounding), NaN past the lengths, a
    zero-length sequence among them; an fp16 output keeps fp32 partials."""
    static_schedule(monkeypatch)
    monkeypatch.setenv("FMHA_CUDA_SCHEDULE", schedule)
    force_launch_plan(monkeypatch, config, 4)
    B, Hq, S = 160, 64, 300
    seqlens = [(37 * i) % S + 1 for i in range(B)]
    seqlens[4] = 0
    v_mode = "slice" if Dqk == 576 else "self"
    q, k, _, sl = latent_inputs(B, 1, Hq, 1, S, Dqk, 512, v_mode, seqlens, seed=11, device="cuda")
    f = torch.ones(3, Dqk, device="cuda")
    f[0, :512], f[1, :512] = 1e8, 1e-8
    f[2, :512] = torch.tensor([1e4, 1e-4], device="cuda").repeat(4).repeat_interleave(64)
    f = f[torch.arange(B, device="cuda") % 3]  # sequence b takes pattern b % 3
    # the latent's columns scaled by f and q's by 1 / f: the scores stay those of unit-scale inputs
    k = (k.float() * f[:, None, None, :]).to(bf16)
    q = (q.float() / f[:, None, None, :]).to(bf16)
    v = k if v_mode == "self" else k[..., :512]
    what = "+ combine kernel (fp16 partials" if schedule == "static" else "kernel) (fp16 pieces"
    assert what in str(fmha.explain(q, k, v, sl, backend="cuda"))
    kh = k.half()
    explained = str(fmha.explain(q.half(), kh, kh if v_mode == "self" else kh[..., :512], sl, backend="cuda"))
    assert "combine kernel" in explained and "fp16 p" not in explained
    ref, ref_lse = attention_reference(q, k, v, sl, Dqk ** -0.5, True)
    k_in, v_in = with_nan_past_lengths(k, v, sl, v_mode)
    out, lse = run_poisoned("cuda", q, k_in, v_in, sl)
    assert not torch.isnan(out).any() and (out[4] == 0).all()
    # max |v| of each sequence's visible keys by 64-column block, against the error of each (sequence, block)
    keys = torch.arange(S, device="cuda")[None, :] < sl[:, None]
    vmax = torch.where(keys[..., None, None], v.float().abs(), 0.0).amax(dim=(1, 2)).view(B, 8, 64).amax(-1)
    err = (out.float() - ref.float()).abs().amax(dim=(1, 2)).view(B, 8, 64).amax(-1)
    ratio = err / torch.where(vmax > 0, vmax, 1.0)
    worst = divmod(int(ratio.argmax()), 8)
    assert ratio.max().item() <= 2.125 * 2.0 ** -8, \
        f"{config}: max abs error {ratio.max().item():.3e} of max|v| at (sequence, block) {worst}"
    finite = torch.isfinite(ref_lse)
    assert torch.equal(torch.isneginf(lse), torch.isneginf(ref_lse))
    assert (lse[finite] - ref_lse[finite]).abs().max().item() <= 1e-3


def climbing_scores(B, T, Hq, S, dtype, device, D=576):
    """q and a [B, S, 1, D] latent whose scores climb along the sequence, by about 0.2 x 15 (log2 units) a
    64-key tile in sequence 0 and 1.5 x 15 in sequence 1, so that the rows' max moves on every tile."""
    g = torch.Generator().manual_seed(7)
    u = torch.full((D,), D ** -0.5)
    q = (4 * u + 0.3 * torch.randn(B, T, Hq, D, generator=g)).to(dtype)
    step = torch.tensor([0.2, 1.5])[:, None, None, None]
    r = step * torch.arange(S, dtype=torch.float32)[None, :, None, None]
    k = (0.3 * torch.randn(B, S, 1, D, generator=g) + r * u).to(dtype)
    return q.to(device), k.to(device)


@sm90_kernel
@pytest.mark.gpu
@pytest.mark.parametrize("config,D,num_splits,page_size,dtype", [
    ("latent_seesaw64", 576, 1, None, bf16), ("latent_seesaw64", 576, 3, None, bf16),
    ("latent_seesaw64", 576, 1, 64, bf16), ("latent_seesaw64", 576, 3, None, torch.float16),
    ("latent_seesaw64", 576, 2, None, torch.float16), ("latent_seesaw64", 576, 1, None, torch.float16),
    ("latent_seesaw48", 512, 1, None, bf16), ("latent_seesaw48", 512, 3, None, torch.float16),
    ("latent_seesaw48", 512, 1, 64, bf16), ("latent_seesaw48", 576, 1, None, bf16),
    ("latent_seesaw48", 576, 2, 64, torch.float16)])
def test_cuda_seesaw64_running_max_that_keeps_moving(monkeypatch, config, D, num_splits, page_size, dtype):
    """Scores that climb along the sequence, so that each row's max moves on every tile: by about 3 (log2
    units) a 64-key tile in sequence 0, which the 64-key seesaw's lazy reference follows only every few tiles (P
    up to 2^8), and by about 23 a tile in sequence 1, past the slack every time (D wide)."""
    force_launch_plan(monkeypatch, config, num_splits)
    S = 1000
    q, k = climbing_scores(2, 2, 64, S, dtype, "cuda", D=D)
    sl = torch.tensor([S, 700], dtype=torch.int32, device="cuda")
    ref, ref_lse = attention_reference(q, k, k[..., :512], sl, D ** -0.5, True)
    if page_size is None:
        k_in, _ = with_nan_past_lengths(k, k[..., :512], sl, "slice")
        table = None
    else:
        k_in, _, table = paged_latent(k, k[..., :512], page_size, sl, "slice", seed=1)
    out, lse = run_poisoned("cuda", q, k_in, k_in[..., :512], sl, block_table=table)
    for b, n in enumerate(sl.tolist()):  # each sequence on its own tolerance: their magnitudes differ 8x
        compare(out[b], lse[b], ref[b], ref_lse[b], dtype, vmax=k[b, :n, ..., :512].float().abs().max().item(),
                what=f"climbing scores, sequence {b}, {num_splits} splits, page {page_size}, {dtype}")


@sm90_kernel
@pytest.mark.gpu
@pytest.mark.parametrize("config,Dqk,B,T,heads,S,num_splits,page_size", [
    ("latent_seesaw48", 512, 4, 1, (128, 1), 4096, 1, None), ("latent_seesaw48", 512, 8, 1, (64, 1), 8192, 4, None),
    ("latent_seesaw48", 512, 2, 3, (28, 4), 1000, 2, None), ("latent_seesaw48", 512, 4, 4, (128, 1), 129, 1, 64),
    ("latent_seesaw48", 576, 4, 1, (128, 1), 4096, 1, None), ("latent_seesaw48", 576, 2, 3, (28, 4), 1000, 2, 64),
    ("latent_seesaw64", 576, 4, 1, (128, 1), 4096, 1, None), ("latent_seesaw64", 576, 2, 2, (64, 1), 1000, 3, 64)])
def test_cuda_seesaw_hand_off_same_bits_every_call(monkeypatch, config, Dqk, B, T, heads, S, num_splits, page_size):
    """The seesaws' hand-off of P and the row state between warpgroups, over many tiles: 40 calls with the same
    bits as the first (a P box or state slot written before its last reader finished would move them), the first
    right against the reference; mixed lengths with NaN past each, sinks."""
    force_launch_plan(monkeypatch, config, num_splits)
    seqlens = [S] + [max(1, S * (b + 1) // (B + 1) - b) for b in range(B - 1)]
    q, k_in, v_in, sl, table, sinks, ref, ref_lse, v = case_inputs(Dqk, 512, "slice" if Dqk == 576 else "self", T,
                                                                   heads, S, page_size, True, seqlens, seed=S + B,
                                                                   device="cuda")
    out, lse = run_poisoned("cuda", q, k_in, v_in, sl, block_table=table, sinks=sinks)
    what = f"{config} B{B} T{T} {heads} S{S} x{num_splits} page={page_size}"
    compare(out, lse, ref, ref_lse, bf16, vmax=v.float().abs().max().item(), what=what)
    moved = 0
    for _ in range(40):
        again, lse_again = fmha.attention(q, k_in, v_in, sl, block_table=table, sinks=sinks, return_lse=True,
                                          backend="cuda")
        moved += not (torch.equal(again, out) and torch.equal(lse_again, lse))
    assert moved == 0, f"{what}: {moved} of 40 calls differ from the first"


@pytest.mark.parametrize("num_splits", [1, 3])
def test_triton_running_max_that_keeps_moving(num_splits):
    """The same climbing scores through Triton's online softmax and its split merge, poisoned out and LSE."""
    from fmha.triton.decode import decode_attention
    S = 300
    q, k = climbing_scores(2, 2, 4, S, bf16, DEVICE)
    sl = torch.tensor([S, 200], dtype=torch.int32, device=DEVICE)
    k_in, _ = with_nan_past_lengths(k, k[..., :512], sl, "slice")
    out = torch.full((2, 2, 4, 512), float("nan"), dtype=bf16, device=DEVICE)
    lse = torch.full((2, 4, 2), float("nan"), device=DEVICE)
    used = decode_attention(validate(q, k_in, k_in[..., :512], sl, out=out), q, k_in, k_in[..., :512], sl, out, lse,
                            num_splits=num_splits)
    assert used == num_splits
    ref, ref_lse = attention_reference(q, k, k[..., :512], sl, 576 ** -0.5, True)
    for b, n in enumerate(sl.tolist()):
        compare(out[b], lse[b], ref[b], ref_lse[b], bf16, vmax=k[b, :n, ..., :512].float().abs().max().item(),
                what=f"climbing scores, sequence {b}, {num_splits} splits")


@cuda_kernel
@pytest.mark.gpu
@pytest.mark.parametrize("Dqk,v_mode,T,heads,S,page_size,use_sinks", LATENT_CUDA_CASES)
def test_cuda_plan_reads_the_latent_once(Dqk, v_mode, T, heads, S, page_size, use_sinks):
    """The backend's own plan: a LATENT configuration (sm_90a's narrow loop or 64-key seesaw, sm_100a's one
    latent kernel), and the same results."""
    from fmha.cuda.backend import Config

    q, k, v, sl = latent_inputs(2, T, *heads, S, Dqk, 512, v_mode, [S, S // 2], device="cuda")
    p = validate(q, k, v, sl)
    from fmha.backends import registry

    config, _ = registry()["cuda"].launch_plan(p, 0)
    sm90 = torch.cuda.get_device_capability() == (9, 0)
    seesaw = Config.LATENT_SEESAW48  # (planned on the contiguous cache)
    assert config in ((seesaw, Config.LATENT_NARROW) if sm90 else (Config.LATENT_SPLIT_QK,)), config
    assert "reads the latent once" in str(fmha.explain(q, k, v, sl, backend="cuda"))
    check_cuda_case(Dqk, 512, v_mode, T, heads, S, page_size, use_sinks, seed=S + 1)


# The balanced schedule (FMHA_CUDA_SCHEDULE=balanced: the latent narrow loop with cache lengths), on grids of one to
# four CTAs a sequence: mixed lengths with empty sequences, one long sequence among short ones (shared by many CTAs:
# many pieces), GQA 32/4 at T = 3 (N = 32, Q boxes of 4 tokens of 8 heads), all sequences empty, paged by TMA boxes
# (64), sinks; the static schedule instead where pages are gathered (16) or Q's 32-row box does not fit 7 heads
# (GQA 28/4).
BALANCED_CASES = [
    (576, "slice", 1, (16, 1), None, True, [1000, 0, 1, 3000, 64, 65, 7, 2048, 0, 129], 1),
    (512, "self", 2, (16, 1), 64, False, [4000] + [64] * 15, 1),
    (576, "slice", 3, (32, 4), None, False, [129, 0, 700, 1, 2500], 3),
    (512, "self", 1, (16, 1), None, True, [0, 0, 0], 2),
    (576, "slice", 4, (8, 1), 16, True, [300, 0, 1000, 5], 1),
    (576, "slice", 1, (16, 1), 64, True, [64 * 40, 1, 1, 1, 1, 1, 1, 1], 4),
    (576, "slice", 1, (16, 1), 64, True, [700] * 6 + [0] * 10, 1),  # padded with empty sequences: spread
    (512, "self", 2, (28, 4), None, False, [0] * 5 + [300, 0, 0, 1, 0], 2),
    # plans of more CTAs than an H200 holds (200, 256): the grid capped at one wave, units sharing CTAs
    (576, "slice", 1, (16, 1), None, True, [(37 * i) % 301 for i in range(200)], 1),
    (512, "self", 1, (16, 1), 64, False, [(53 * i) % 900 for i in range(16)], 16),
]

# The balanced schedule of the 64-key seesaw (FMHA_CUDA_SCHEDULE=balanced): 64 and 128 query heads a KV head at T = 1
# to 4 (one to eight row blocks, each dealt by the same shares), mixed lengths with empty sequences, one long sequence
# among short ones, all empty, two KV heads, paged by TMA boxes (64), sinks, a plan larger than one wave; 16 heads at
# T = 2 (32 rows padded to 64); the static schedule where Q's 64-row box does not fit 28 heads, or pages are gathered.
BALANCED_SEESAW_CASES = [
    (576, "slice", 1, (128, 1), None, True, [1000, 0, 1, 3000, 64, 65, 7, 2048, 0, 129], 1),
    (512, "self", 2, (64, 1), 64, False, [4000] + [64] * 15, 1),
    (576, "slice", 3, (64, 1), None, True, [129, 0, 700, 1, 2500], 2),
    (576, "slice", 4, (128, 1), 64, True, [300, 0, 1000, 5], 1),
    (512, "self", 1, (64, 1), None, True, [0, 0, 0], 1),
    (512, "self", 1, (128, 2), None, True, [700, 0, 1, 1500, 63, 64], 3),
    (576, "slice", 2, (16, 1), None, False, [1000, 0, 1, 3000, 7], 1),
    (576, "slice", 1, (128, 1), None, False, [(37 * i) % 1201 for i in range(150)], 1),
    (512, "self", 2, (28, 4), None, True, [300, 0, 5, 1000], 1),
    (576, "slice", 1, (64, 1), 16, True, [300, 0, 5, 1000], 1),
    (576, "slice", 9, (4, 1), None, True, [300, 0, 5, 1000, 129], 1),  # 36 rows: pieces row-major (rows % 8)
]


@sm90_kernel
@pytest.mark.gpu
@pytest.mark.parametrize("config,Dqk,v_mode,T,heads,page_size,use_sinks,seqlens,num_splits",
                         [("latent_narrow", *case) for case in BALANCED_CASES]
                         + [("latent_seesaw64", *case) for case in BALANCED_SEESAW_CASES]
                         + [("latent_seesaw48", *case) for case in BALANCED_SEESAW_CASES])
def test_cuda_balanced_schedule(monkeypatch, config, Dqk, v_mode, T, heads, page_size, use_sinks, seqlens,
                                num_splits):
    """The tiles dealt by cache length (or the static schedule where the launch cannot deal them, and explain does not
    claim them dealt), by the latent narrow loop or the 64-key seesaw: right against the reference (out and LSE, NaN
    past every length, a zero-length sequence gives zeros and the sink), and the same bits on every call."""
    monkeypatch.setenv("FMHA_CUDA_SCHEDULE", "balanced")
    force_launch_plan(monkeypatch, config, num_splits)
    S = max(seqlens) + 3
    q, k_in, v_in, sl, table, sinks, ref, ref_lse, v = case_inputs(Dqk, 512, v_mode, T, heads, S, page_size,
                                                                   use_sinks, seqlens, seed=S + T, device="cuda")
    said = str(fmha.explain(q, k_in, v_in, sl, block_table=table, sinks=sinks, backend="cuda"))
    G = heads[0] // heads[1]
    from fmha.backends import registry
    from fmha.cuda.backend import Config
    tile = registry()["cuda"]._tile_n[(Dqk, Config[config.upper()])]
    min_box = 16 if tile == 48 else 32  # (LATENT_SEESAW48's 48-key tiles: sm90/config.h paged_tma_min_rows)
    tma_pages = page_size is None or (page_size & -page_size) >= min_box
    rows = 32 if config == "latent_narrow" else 64  # (Q's box: fmha_balanced_deals)
    dealt = tma_pages and (G % rows == 0 or rows % G == 0)
    assert ("balanced schedule" in said) == dealt, said
    out, lse = run_poisoned("cuda", q, k_in, v_in, sl, block_table=table, sinks=sinks)
    what = f"balanced {config} {Dqk} {v_mode} T={T} {heads} page={page_size} sinks={use_sinks} {seqlens} x{num_splits}"
    compare(out, lse, ref, ref_lse, q.dtype, vmax=v.float().abs().max().item(), what=what)
    for b, n in enumerate(seqlens):
        if n == 0:
            empty = torch.full((heads[0], T), float("-inf"), device="cuda") if sinks is None else \
                sinks[:, None].expand(heads[0], T)
            assert (out[b] == 0).all() and torch.allclose(lse[b], empty, rtol=0, atol=1e-5), what
    for _ in range(3):
        again, lse_again = run_poisoned("cuda", q, k_in, v_in, sl, block_table=table, sinks=sinks)
        assert torch.equal(again, out) and torch.equal(lse_again, lse), what


@sm90_kernel
@pytest.mark.gpu
@pytest.mark.parametrize("B,env,balanced,Hq", [(136, None, True, 16), (136, "static", False, 16),
                                                (128, None, False, 16), (96, None, True, 16), (136, None, False, 12)])
def test_cuda_balanced_schedule_by_default_past_one_wave(monkeypatch, B, env, balanced, Hq):
    """By default (FMHA_CUDA_SCHEDULE unset) the latent narrow loop deals the tiles by cache length where its
    static grid has more CTAs than the GPU's SMs (B136 unsplit; B96 in 4 splits), and keeps one CTA a sequence where
    it has no more, or where Q's 32-row box does not fit 12 heads (the C API runs static, and explain does not
    claim it); right either way (lengths from 0 to 300, sinks)."""
    from fmha.backends import registry

    if env is None:
        monkeypatch.delenv("FMHA_CUDA_SCHEDULE", raising=False)
    else:
        monkeypatch.setenv("FMHA_CUDA_SCHEDULE", env)
    monkeypatch.setattr(registry()["cuda"], "_launches", {})  # (launches cached per call shape: planned afresh)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    if not 128 <= sms < 136:
        pytest.skip(f"batches of 128 and 136 straddle one wave of 128-135 SMs; this GPU has {sms}")
    seqlens = [(37 * i) % 301 for i in range(B)]
    q, k, v, sl = latent_inputs(B, 1, Hq, 1, 303, 576, 512, "slice", seqlens, device="cuda")
    said = str(fmha.explain(q, k, v, sl, backend="cuda"))
    assert ("balanced schedule" in said) == balanced, said
    assert f"{B} CTAs x {4 if B < 100 else 1} KV split(s)" in said, said
    check_cuda_case(576, 512, "slice", 1, (Hq, 1), 303, None, True, seed=B, seqlens=seqlens)


@sm90_kernel
@pytest.mark.gpu
@pytest.mark.parametrize("env", [None, "static"])
@pytest.mark.parametrize("Dqk,B,Hq,S,page_size", [(576, 67, 128, 4096, None), (512, 140, 64, 4096, 64),
                                                  (512, 140, 64, 4096, None)])
def test_cuda_seesaw64_splits_grids_past_one_wave(monkeypatch, Dqk, B, Hq, S, page_size, env):
    """A 64-key seesaw grid just past one wave of 132 SMs: by default its tiles dealt by cache length over one wave
    (the balanced schedule), with FMHA_CUDA_SCHEDULE=static the plan's own splits (several waves of split CTAs, their
    partials merged): right against the reference, mixed lengths from 0 to S, sinks, NaN past every length."""
    from fmha.backends import registry
    from fmha.cuda.backend import Config

    sms = torch.cuda.get_device_properties(0).multi_processor_count
    if sms != 132:
        pytest.skip(f"grids planned for 132 SMs; this GPU has {sms}")
    if env is None:
        monkeypatch.delenv("FMHA_CUDA_SCHEDULE", raising=False)
    else:
        monkeypatch.setenv("FMHA_CUDA_SCHEDULE", env)
    monkeypatch.setattr(registry()["cuda"], "_launches", {})
    v_mode = "slice" if Dqk == 576 else "self"
    seqlens = [S, 0, 1, S - 1] + [(97 * i) % (S + 1) for i in range(B - 4)]
    q, k, v, sl = latent_inputs(B, 1, Hq, 1, S, Dqk, 512, v_mode, seqlens, device="cuda")
    config, splits = registry()["cuda"].launch_plan(validate(q, k, v, sl), 0)
    seesaw = Config.LATENT_SEESAW48  # (planned on the contiguous cache)
    assert config == seesaw and splits > 1, (config, splits)
    said = str(fmha.explain(q, k, v, sl, backend="cuda"))
    assert f"{B * Hq // 64} CTAs x {splits} KV split(s)" in said and ("balanced schedule" in said) == (env is None)
    check_cuda_case(Dqk, 512, v_mode, 1, (Hq, 1), S, page_size, True, seed=B, seqlens=seqlens)


@sm90_kernel
@pytest.mark.gpu
def test_cuda_balanced_deals_paged():
    """fmha_balanced_deals on the device (the contiguous cases: tests/test_cuda_build.py): 64-token pages are read
    by TMA boxes and dealt; 16-token pages are gathered, and their launch runs the static schedule."""
    from fmha.backends import registry

    b = registry()["cuda"]
    if b._fn is None:
        b._bind()
    deals = b._balanced_deals
    assert deals is not None
    assert deals(576, 8, 160, 16, 1, 4096, 64, 160) == 1 and deals(512, 8, 160, 16, 1, 4096, 256, 160) == 1
    assert deals(576, 8, 160, 16, 1, 4096, 16, 160) == 0 and deals(576, 8, 160, 16, 1, 4096, 1, 160) == 0


@sm90_kernel
@pytest.mark.gpu
def test_cuda_balanced_schedule_in_a_graph(monkeypatch):
    """Captured in a CUDA graph and replayed with new lengths and values (the shares are dealt on the device)."""
    monkeypatch.setenv("FMHA_CUDA_SCHEDULE", "balanced")
    force_launch_plan(monkeypatch, "latent_narrow", 1)
    S, heads = 2100, (16, 1)
    q, k, v, sl = latent_inputs(6, 1, *heads, S, 576, 512, "slice", [S, 0, 5, 1000, 64, 2000], device="cuda")
    out = torch.empty(6, 1, 16, 512, dtype=bf16, device="cuda")
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        fmha.attention(q, k, v, sl, backend="cuda", out=out)  # warm-up (the library's one-time setup)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=stream):
            _, lse = fmha.attention(q, k, v, sl, backend="cuda", out=out, return_lse=True)
    for lengths, seed in (([S, 0, 5, 1000, 64, 2000], 1), ([1, 2000, 0, 3, S, 700], 2)):
        q2, k2, _, sl2 = latent_inputs(6, 1, *heads, S, 576, 512, "slice", lengths, seed=seed, device="cuda")
        q.copy_(q2), k.copy_(k2), sl.copy_(sl2)
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        ref, ref_lse = attention_reference(q, k, v, sl, 576 ** -0.5, True)
        compare(out, lse, ref, ref_lse, q.dtype, vmax=v.float().abs().max().item(), what=f"graph replay {lengths}")


@pytest.mark.parametrize("backend", ["triton", pytest.param("cuda", marks=[cuda_kernel, pytest.mark.gpu])])
def test_latent_views_of_one_kv_head(backend):
    """k and v as unsqueezed views of one [B, S, 576] latent: the single head's strides differ (576 vs 512) but
    address nothing, so the latent is still shared, and the backend reads it once."""
    device = "cuda" if backend == "cuda" else DEVICE
    q, kv, _, sl = latent_inputs(2, 1, 16, 1, 300, 576, 512, "slice", [300, 129], device=device)
    flat = kv[:, :, 0]
    k, v = flat.unsqueeze(2), flat[..., :512].unsqueeze(2)
    assert k.stride(2) != v.stride(2) and validate(q, k, v, sl).kv_shared
    assert "reads the latent once" in str(fmha.explain(q, k, v, sl, backend=backend))
    out, lse = run_poisoned(backend, q, k, v, sl)
    ref, ref_lse = attention_reference(q, k, v, sl, 576 ** -0.5, True)
    compare(out, lse, ref, ref_lse, q.dtype, vmax=v.float().abs().max().item(), what="unsqueezed latent")


# Sinks in every other loop and merge: the narrow loop (D <= 256, <= 16 rows), the 64-row loops, KV-head pairs,
# D = 512 with a V of its own, splits merged by the combine kernel or inside clusters of dealt rows (the backend's
# own split plans; test_cuda_sinks_merge_inside_clusters names the merge).
@cuda_kernel
@pytest.mark.gpu
@pytest.mark.parametrize("D,T,heads,S,seqlens,page_size", [
    (64, 1, (8, 2), 1000, None, None), (64, 1, (64, 64), 129, [129] * 70, None),  # pairs: many KV heads side by side
    (128, 3, (28, 4), 1000, None, None), (128, 1, (8, 8), 65536, [65536, 0, 7], None),  # split-KV
    (256, 3, (16, 8), 129, None, None), (512, 1, (16, 1), 7, None, None), (512, 2, (128, 1), 129, None, None),
    (64, 4, (8, 2), 1, None, None), (128, 2, (28, 4), 7, None, None),  # one key and seven, T = 4 and 2
    # paged: TMA boxes (64) and gathered (5, 16)
    (128, 3, (28, 4), 1000, None, 64), (64, 1, (8, 2), 129, None, 5), (256, 3, (16, 8), 129, None, 64),
    (512, 1, (16, 1), 7, None, 16)])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_cuda_sinks_against_reference(D, T, heads, S, seqlens, page_size, dtype):
    check_cuda_case(D, D, "separate", T, heads, S, page_size, True, seed=D + T + S, seqlens=seqlens, dtype=dtype)


@sm90_kernel
@pytest.mark.gpu
@pytest.mark.parametrize("D,T,heads,splits,merge", [
    (128, 1, (8, 8), 4, "merged inside clusters of 4 CTAs"), (256, 1, (16, 8), 4, "merged inside clusters of 4 CTAs"),
    (128, 3, (28, 4), 2, "+ combine kernel")])  # 21 rows, two splits: a cluster pair without sinks
def test_cuda_sinks_merge_inside_clusters(monkeypatch, D, T, heads, splits, merge):
    """Split launches with sinks merge inside clusters of dealt rows, which join the sinks as the combine kernel
    does; the pair merge has no sinks, so its launches take the combine kernel instead."""
    force_launch_plan(monkeypatch, "deep", splits)
    Hq, Hkv = heads
    q, k, v, sl = latent_inputs(3, T, Hq, Hkv, 1000, D, D, "separate", [1000, 0, 7], device="cuda")
    assert merge in str(fmha.explain(q, k, v, sl, sinks=sinks_for(Hq, device="cuda"), backend="cuda"))
    if T == 3:
        assert "merged inside clusters of 2 CTAs as each finishes" in str(fmha.explain(q, k, v, sl, backend="cuda"))
    check_cuda_case(D, D, "separate", T, heads, 1000, None, True, seed=D + splits)


def test_cuda_refuses_a_576_value_of_its_own_and_auto_takes_triton(cuda_as_if_present):
    from fmha.dispatch import decide

    q, k, v, sl = latent_inputs(1, 1, 4, 1, 8, 576, 512, "separate", [8])
    p = dataclasses.replace(validate(q, k, v, sl), device=torch.device("cuda", 0))
    expect = (r"head dims \(D_qk, D_v\) = \(576, 512\) with a V tensor of its own: the CUDA kernel reads V as K's "
              r"first 512 columns")
    assert re.search(expect, cuda_as_if_present.unsupported_reason(p))
    with pytest.raises(NotImplementedError, match=r"backend 'cuda' cannot serve .*: " + expect):
        decide(p, "cuda")
    d = decide(p, "auto")
    assert d.backend == "triton" and dict(d.considered)["cuda"] is not None
    # shared (a slice of k_cache), or with sinks: the cuda backend serves it
    q, k, v, sl = latent_inputs(1, 1, 4, 1, 8, 576, 512, "slice", [8])
    shared = dataclasses.replace(validate(q, k, v, sl, sinks=sinks_for(4)), device=torch.device("cuda", 0))
    if cuda_as_if_present.capability == (9, 0):
        assert cuda_as_if_present.unsupported_reason(shared) is None


def test_cuda_run_needs_the_sinks_of_its_problem():
    from fmha.backends import registry

    p = validate(*latent_inputs(1, 1, 4, 1, 8, 64, 64, "separate", [8]))
    with pytest.raises(ValueError, match=r"sinks: given for a problem without sinks"):
        registry()["cuda"].run(p, None, None, None, None, None, None, sinks=torch.zeros(4))


# ---- refusals, before anything runs ---------------------------------------------------------------------

def _bad_calls():
    # CPU tensors on any machine: every refusal comes before a backend is chosen
    q, k, v, sl = latent_inputs(2, 1, 4, 1, 8, 576, 512, "slice", [8, 8], device="cpu")
    q5, k5, _, _ = latent_inputs(2, 1, 4, 1, 8, 512, 512, "self", [8, 8], device="cpu")
    q2 = torch.randn(2, 1, 4, 128, dtype=bf16)
    k2 = torch.randn(2, 8, 1, 128, dtype=bf16)
    s = sinks_for(4, "cpu")
    return [
        ((q, k, k), {}, ValueError, r"v_cache: head_dim 576 with k_cache's head_dim 576 is not a supported pair; "
                                    r"allowed \(D_qk, D_v\): \(64, 64\), .*\(512, 512\), \(576, 512\)"),
        ((q2, k2, k2[..., :64]), {}, ValueError, r"v_cache: head_dim 64 with k_cache's head_dim 128 is not a "
                                                 r"supported pair"),
        ((q5, k5, torch.randn(2, 8, 1, 576, dtype=bf16)), {}, ValueError,
         r"v_cache: head_dim 576 is wider than k_cache's 512; V's head dim must not exceed K's"),
        ((q, k5, k5), {}, ValueError, r"k_cache: head_dim 512 differs from q's head_dim 576"),
        ((q[..., :96], k[..., :96], k[..., :96]), {}, ValueError,
         r"q: head_dim 96 is not supported; allowed: 64, 128, 256, 512, 576"),
        ((q, torch.randn(2, 8, 2, 576, dtype=bf16), v), {}, ValueError,
         r"v_cache: shape \[2, 8, 1, 512\] differs from k_cache's \[2, 8, 2, 576\]; .*\(here Hkv differs"),
        ((q, k, v[:, :5]), {}, ValueError, r"v_cache: shape \[2, 5, 1, 512\] differs .*\(here S differs"),
        ((q, k, v), {"out": torch.empty(2, 1, 4, 576, dtype=bf16)}, ValueError,
         r"out: expected shape \[2, 1, 4, 512\] \(q's \[B, T, Hq\] and v_cache's head_dim 512\), got \[2, 1, 4, 576\]"),
        ((q, k, v), {"sinks": [0.0] * 4}, TypeError,
         r"sinks: expected a contiguous float32 tensor \[Hq=4\].* got list"),
        ((q, k, v), {"sinks": s.bfloat16()}, TypeError,
         r"sinks: dtype torch.bfloat16 is not allowed; expected torch.float32"),
        ((q, k, v), {"sinks": s[:3]}, ValueError, r"sinks: expected shape \[4\] \(one logit per query head, q's Hq\), "
                                                  r"got \[3\]"),
        ((q, k, v), {"sinks": s[None]}, ValueError, r"sinks: expected shape \[4\] .* got \[1, 4\]"),
        ((q, k, v), {"sinks": torch.zeros(8)[::2]}, ValueError, r"sinks: must be contiguous, got stride 2"),
        ((q, k, v), {"sinks": torch.zeros(4, device="meta")}, ValueError, r"sinks: on device meta but q is on cpu"),
        ((q, k, v), {"sinks": torch.zeros(4).to_sparse()}, TypeError, r"sinks: layout torch.sparse_coo is not allowed"),
        ((q, k, v), {"sinks": torch.zeros(4, requires_grad=True)}, ValueError,
         r"sinks: requires_grad=True, but fmha computes no gradients"),
    ]


@pytest.mark.parametrize("backend", ["auto", "reference", "triton", "cuda"])
@pytest.mark.parametrize("case", range(len(_bad_calls())))
def test_refusals_name_the_argument(case, backend, monkeypatch):
    from fmha.backends import registry

    args, kwargs, exc, match = _bad_calls()[case]
    for b in registry().values():  # nothing may run, whichever backend is named
        monkeypatch.setattr(b, "run", lambda *a, **k: pytest.fail("a backend ran"))
    with pytest.raises(exc, match=match):
        fmha.attention(*args, backend=backend, **kwargs)
    if "sinks" not in kwargs or "requires_grad" not in match:  # explain runs the same checks
        with pytest.raises(exc, match=match):
            fmha.explain(*args, backend=backend, **kwargs)


def test_paged_pools_must_hold_the_same_pages():
    q, k, v, sl = latent_inputs(2, 1, 4, 1, 16, 576, 512, "separate", [16, 3])
    kp, vp, bt = paged_latent(k, v, 8, sl, "separate", seed=1)
    with pytest.raises(ValueError, match=r"v_cache: num_blocks \(pages in the pool\) 6 differs from k_cache's 7"):
        fmha.attention(q, kp, vp[:6], sl, block_table=bt)


# ---- the other entry points: sdpa, compare, torch.compile -------------------------------------------------

def test_sdpa_with_a_narrower_value():
    import torch.nn.functional as F

    q, k, v, _ = latent_inputs(2, 1, 4, 1, 9, 576, 512, "slice", [9, 9], seed=6)
    ours = fmha.sdpa(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), enable_gqa=True, backend="reference")
    theirs = F.scaled_dot_product_attention(q.transpose(1, 2).float(), k.transpose(1, 2).float(),
                                            v.transpose(1, 2).float(), enable_gqa=True)
    assert ours.shape == (2, 4, 1, 512)
    assert (ours.float() - theirs).abs().max().item() < 2 * 2 ** -8 * v.float().abs().max().item() + 1e-3
    with pytest.raises(ValueError, match=r"value: head_dim 576 with key's head_dim 576 is not a supported pair"):
        fmha.sdpa(q.transpose(1, 2), k.transpose(1, 2), k.transpose(1, 2), enable_gqa=True)


def test_compare_with_sinks_and_a_shared_latent():
    q, k, v, sl = latent_inputs(2, 2, 4, 1, 12, 576, 512, "slice", [12, 0], seed=8)
    report = fmha.compare(q, k, v, sl, sinks=sinks_for(4), backends=["triton", "reference"], timing=False)
    assert report.ok, str(report)
    assert "Dv=512" in report.problem and "kv-shared" in report.problem and "sinks" in report.problem


def test_torch_compile_fullgraph_with_sinks_and_head_dims_of_their_own():
    q, k, v, sl = latent_inputs(2, 2, 4, 1, 10, 576, 512, "slice", [10, 3], seed=9)
    sinks = sinks_for(4)

    def step(q, k, sl, sinks):
        out, lse = fmha.attention(q, k, k[..., :512], sl, return_lse=True, sinks=sinks, backend="reference")
        return out.float().sum(-1), lse

    torch._dynamo.reset()
    compiled = torch.compile(step, fullgraph=True, backend="eager" if DEVICE == "cpu" else "inductor")
    got, got_lse = compiled(q, k, sl, sinks)
    want, want_lse = step(q, k, sl, sinks)
    assert torch.allclose(got, want, atol=1e-2, rtol=1e-3) and torch.allclose(got_lse, want_lse, atol=1e-5)


def test_meta_tensors_share_memory_only_when_one_tensor():
    """Meta tensors have no memory (every data pointer is 0): two of them are separate caches, one passed
    twice is shared (the perf suite describes its problems with meta tensors)."""
    import torch

    from fmha.problem import shares_memory

    k = torch.empty(2, 8, 1, 64, device="meta", dtype=torch.bfloat16)
    v = torch.empty(2, 8, 1, 64, device="meta", dtype=torch.bfloat16)
    assert not shares_memory(k, v) and shares_memory(k, k)
