"""Backend "cuda" (the sm_90a TMA + WGMMA kernel, or sm_100a's) against the fp32 reference, and against Triton.

GPU only: skipped unless a device of compute capability 9.0 or 10.0 is present (tests of sm_90a's own kernels
are marked sm90_only).
"""
from __future__ import annotations

import itertools
import os

import pytest
import torch

from _util import (CUDA_KERNEL_SKIP, check_backend, compare, force_launch_plan, has_cuda_kernel, make_inputs,
                   poisoned_out, tolerance)

import fmha


pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not has_cuda_kernel(), reason=CUDA_KERNEL_SKIP),
]

# The sm_90a kernel's own configurations (the narrow loop, KV-head pairs, cluster merges): the sm_100a kernel
# has none of them, and its plan never asks for them.
sm90_only = pytest.mark.skipif(has_cuda_kernel() and torch.cuda.get_device_capability() != (9, 0),
                               reason="an sm_90a configuration (narrow loop, KV-head pairs or cluster merge)")

DEV = "cuda"


def _heads(D):
    return (16, 1) if D == 512 else (8, 8)  # D=512: MQA (DeepSeek latent) shape


# The 72-config grid: D x T x S (bf16, causal, B=2), for MHA, GQA and MQA (D=512: MQA only,
# the DeepSeek latent case).
@pytest.mark.parametrize("D,T,S", list(itertools.product((64, 128, 256, 512), (1, 4, 32, 128),
                                                        (128, 256, 384, 512))))
def test_grid(D, T, S):
    for Hq, Hkv in ([(16, 1)] if D == 512 else [(8, 8), (32, 8), (16, 1)]):
        q, k, v, sl = make_inputs(2, T, Hq, Hkv, S, D, device=DEV, seed=D + T + S)
        check_backend("cuda", q, k, v, sl, causal=True, what=f"D={D} T={T} S={S} {Hq}/{Hkv}")


@pytest.mark.parametrize("D", (64, 128, 256, 512))
@pytest.mark.parametrize("Hq,Hkv", ((32, 8), (28, 4), (16, 1)))
@pytest.mark.parametrize("S", (1, 7, 129, 1000))
@pytest.mark.parametrize("T", (1, 3))
def test_gqa_mqa(D, Hq, Hkv, S, T):
    q, k, v, sl = make_inputs(2, T, Hq, Hkv, S, D, device=DEV, seed=S * 7 + T)
    check_backend("cuda", q, k, v, sl, causal=True, what=f"GQA {Hq}/{Hkv} D={D} S={S} T={T}")


@pytest.mark.parametrize("D", (64, 128, 256, 512))
@pytest.mark.parametrize("causal", (True, False))
def test_varlen_with_empty_row(D, causal):
    Hq, Hkv = (16, 1) if D == 512 else (8, 2)
    q, k, v, sl = make_inputs(4, 3, Hq, Hkv, 300, D, device=DEV, seqlens=[0, 1, 150, 300], seed=D)
    for b, n in enumerate(sl.tolist()):  # slots nobody may read
        k[b, n:] = float("nan")
        v[b, n:] = float("nan")
    out, lse = check_backend("cuda", q, k, v, sl, causal=causal, what=f"varlen D={D}")
    assert torch.isneginf(lse[0]).all() and (out[0] == 0).all()
    if causal:  # seqlen 1, T=3: queries 0, 1 see no key
        assert torch.isneginf(lse[1, :, :2]).all()


@pytest.mark.parametrize("D", (64, 128, 256, 512))
def test_fp16(D):
    Hq, Hkv = _heads(D)
    q, k, v, sl = make_inputs(2, 4, Hq, Hkv, 384, D, dtype=torch.float16, device=DEV)
    check_backend("cuda", q, k, v, sl, causal=True, what=f"fp16 D={D}")


@pytest.mark.parametrize("T", (1, 2))
def test_d512_128_heads(T):
    """The DeepSeek latent shape: 128 query heads on one KV head, two 64-row blocks per sequence
    (Q partly in registers, three V stages), odd and one-tile sequence lengths, causal T=2."""
    q, k, v, sl = make_inputs(2, T, 128, 1, 300, 512, device=DEV, seqlens=[300, 33], seed=5 + T)
    check_backend("cuda", q, k, v, sl, causal=True, what=f"D=512 Hq=128 T={T}")


@pytest.mark.parametrize("D", (64, 128, 256, 512))
def test_non_contiguous_q_and_out(D):
    Hq, Hkv = (16, 1) if D == 512 else (8, 2)
    q, k, v, sl = make_inputs(2, 2, Hq, Hkv, 200, D, device=DEV, fused_qkv=True)
    assert not q.is_contiguous()
    check_backend("cuda", q, k, v, sl, causal=True, what=f"fused qkv D={D}")
    # strided out: a [B, T, Hq, D] view of a wider buffer
    wide = torch.full((2, 2, Hq + 3, D), float("nan"), dtype=q.dtype, device=DEV)
    out = wide[:, :, 1:Hq + 1]
    res, lse = fmha.attention(q, k, v, sl, causal=True, return_lse=True, backend="cuda", out=out)
    ref, ref_lse = fmha.attention(q, k, v, sl, causal=True, return_lse=True, backend="reference")
    compare(out, lse, ref, ref_lse, q.dtype, vmax=v.abs().max().item(), what=f"strided out D={D}")
    assert torch.isnan(wide[:, :, 0]).all() and torch.isnan(wide[:, :, Hq + 1:]).all(), "wrote outside out"


@pytest.mark.parametrize("D", (64, 128, 256, 512))
def test_forced_split_kv(D):
    Hq, Hkv = (16, 1) if D == 512 else (8, 8)
    q, k, v, sl = make_inputs(1, 1, Hq, Hkv, 65536, D, device=DEV, seed=3)
    check_backend("cuda", q, k, v, sl, causal=True, what=f"split-KV D={D}")
    # varlen inside the split path: one row much shorter than the capacity
    q, k, v, sl = make_inputs(2, 2, Hq, Hkv, 65536, D, device=DEV, seqlens=[65536, 1000], seed=4)
    check_backend("cuda", q, k, v, sl, causal=True, what=f"split-KV varlen D={D}")


@pytest.mark.parametrize("D,config,num_splits", [(D, c, n) for D in (64, 128, 256) for c in ("wide", "deep")
                                                 for n in (1, 3, 20)]
                         + [(512, c, n) for c in ("seesaw", "split_qk") for n in (1, 3, 20)]
                         + [(128, "stream", n) for n in (1, 3, 20)])
def test_each_configuration(D, config, num_splits, monkeypatch):
    """Every configuration (wide: several CTAs per SM; deep: one CTA per SM, deeper ring; stream, D = 128:
    wide's ring with the narrow loop; D = 512's seesaw, here on one row block, and split-QK loops), split
    and unsplit, whatever the shape-based plan would pick: GQA 28/4 (21 rows: stream runs
    its 64-row loop), causal T=3, varlen. At 21 packed rows both split counts go through the workspace and
    the combine kernel (twenty, most of them empty at S=1000, also above the 16-CTA cluster limit); the
    in-cluster merge serves at most 16 rows: test_cluster_merge."""
    force_launch_plan(monkeypatch, config, num_splits)
    Hq, Hkv = (16, 1) if D == 512 else (28, 4)
    q, k, v, sl = make_inputs(3, 3, Hq, Hkv, 1000, D, device=DEV, seqlens=[1000, 0, 129], seed=D + num_splits)
    check_backend("cuda", q, k, v, sl, causal=True, what=f"{config} splits={num_splits} D={D}")


@pytest.mark.parametrize("config", ("wide", "deep"))
def test_d512_refuses_the_other_head_dims_configurations(config, monkeypatch):
    """WIDE and DEEP are not D = 512's configurations: the C API says so before any kernel runs."""
    force_launch_plan(monkeypatch, config, 1)
    q, k, v, _ = make_inputs(1, 1, 16, 1, 128, 512, device=DEV)
    out = poisoned_out(q)
    with pytest.raises(RuntimeError, match="fmha cuda backend"):
        fmha.attention(q, k, v, backend="cuda", out=out)
    torch.cuda.synchronize()
    assert torch.isnan(out).all()


@pytest.mark.parametrize("num_splits", (1, 3, 20))
@sm90_only
def test_stream_narrow_loop(num_splits, monkeypatch):
    """The stream instantiation's narrow loop forced on a grid the plan would not give it (3 sequences, 4
    packed rows), unsplit and split (3: merged inside clusters; 20: above the cluster limit, the combine
    kernel); sequences of 1000, 0 and 129 keys."""
    force_launch_plan(monkeypatch, "stream", num_splits)
    q, k, v, sl = make_inputs(3, 1, 32, 8, 1000, 128, device=DEV, seqlens=[1000, 0, 129], seed=num_splits)
    assert "narrow loop" in fmha.explain(q, k, v, sl, backend="cuda").launch
    check_backend("cuda", q, k, v, sl, causal=True, what=f"stream narrow splits={num_splits}")


@pytest.mark.parametrize("Hq,Hkv,T", ((8, 2, 1), (8, 2, 2), (16, 4, 1), (32, 4, 1), (14, 2, 1), (6, 6, 2)))
@pytest.mark.parametrize("S", (1, 7, 129, 1000))
@sm90_only
def test_head_pairs(Hq, Hkv, T, S, monkeypatch):
    """D = 64 KV heads read in pairs as one 128-wide head by the D = 128 stream kernel (KV_HEAD_PAIRS),
    forced on grids the plan would not give it: 1 to 8 query heads per KV head (up to 16 rows a pair), causal
    T=2, the awkward lengths, varlen with an empty sequence."""
    force_launch_plan(monkeypatch, "kv_head_pairs", 1)
    q, k, v, sl = make_inputs(3, T, Hq, Hkv, S, 64, device=DEV, seqlens=[S, 0, max(1, S // 2)], seed=S + Hq + T)
    assert "KV-head pairs" in fmha.explain(q, k, v, sl, causal=True, backend="cuda").launch
    out, lse = check_backend("cuda", q, k, v, sl, causal=True, what=f"head pairs {Hq}/{Hkv} T={T} S={S}")
    assert torch.isneginf(lse[1]).all() and (out[1] == 0).all()


@sm90_only
def test_head_pairs_fp16_noncontiguous_q(monkeypatch):
    force_launch_plan(monkeypatch, "kv_head_pairs", 1)
    q, k, v, sl = make_inputs(2, 2, 8, 4, 300, 64, dtype=torch.float16, device=DEV, fused_qkv=True, seed=2)
    check_backend("cuda", q, k, v, sl, causal=True, what="head pairs fp16 fused qkv")


@sm90_only
def test_head_pairs_refused(monkeypatch):
    """KV_HEAD_PAIRS forced where it cannot serve: the C API says why before any kernel runs."""
    force_launch_plan(monkeypatch, "kv_head_pairs", 1)
    q, k, v, _ = make_inputs(2, 1, 8, 2, 100, 64, device=DEV)
    k_hs, v_hs = (t.transpose(1, 2).contiguous().transpose(1, 2) for t in (k, v))  # [B, Hkv, S, D] storage
    with pytest.raises(RuntimeError, match="side by side"):
        fmha.attention(q, k_hs, v_hs, backend="cuda")
    q, k, v, _ = make_inputs(2, 1, 9, 3, 100, 64, device=DEV)
    with pytest.raises(RuntimeError, match="even Hkv"):
        fmha.attention(q, k, v, backend="cuda")
    q, k, v, _ = make_inputs(2, 1, 32, 2, 100, 64, device=DEV)
    with pytest.raises(RuntimeError, match="packed rows"):
        fmha.attention(q, k, v, backend="cuda")


@pytest.mark.parametrize("D,Hkv", ((64, 2), (128, 2), (512, 1)))
def test_caches_stored_token_major_across_the_batch(D, Hkv):
    """Caches stored [S, B, Hkv, D] and read as [B, S, Hkv, D], so that the batch stride is below the token
    stride (the K/V tensor maps' outer dimensions out of order): right, at awkward lengths."""
    q, k, v, sl = make_inputs(3, 3, 8 * Hkv, Hkv, 300, D, device=DEV, seqlens=[300, 129, 7], seed=D)
    k_t, v_t = (t.transpose(0, 1).contiguous().transpose(0, 1) for t in (k, v))
    assert k_t.stride(0) < k_t.stride(1)
    check_backend("cuda", q, k_t, v_t, sl, causal=True, what=f"token-major storage D={D}")


@pytest.mark.parametrize("num_splits", (1, 2, 3))
def test_deep_64_rows(num_splits, monkeypatch):
    """64 packed rows on the deep instantiation (the T=16 plan): T=16 with 4 query heads per KV head,
    causal, sequences of 8, 2 and 0 tiles (D=128) and 1-3 splits; repeated runs are bit-identical."""
    force_launch_plan(monkeypatch, "deep", num_splits)
    q, k, v, sl = make_inputs(3, 16, 32, 8, 1000, 128, device=DEV, seqlens=[1000, 129, 0], seed=11 + num_splits)
    out, lse = check_backend("cuda", q, k, v, sl, causal=True, what=f"deep 64 rows splits={num_splits}")
    again = fmha.attention(q, k, v, sl, causal=True, return_lse=True, backend="cuda", out=poisoned_out(q))
    assert torch.equal(again[0], out) and torch.equal(again[1], lse)


@pytest.mark.parametrize("D", (64, 128, 256))
@pytest.mark.parametrize("num_splits", (2, 3, 4))
def test_combine_many_rows(D, num_splits, monkeypatch):
    """The combine kernel on 2184 output rows (B=6, T=13, 28 query heads: 273 to 1092 CTAs, the last one
    partly past the end at D=64 and 256) with 2-4 splits, varlen with an empty row."""
    force_launch_plan(monkeypatch, "deep", num_splits)
    q, k, v, sl = make_inputs(6, 13, 28, 4, 700, D, device=DEV, seqlens=[700, 0, 13, 650, 129, 700],
                              seed=D + 5 * num_splits)
    check_backend("cuda", q, k, v, sl, causal=True, what=f"combine many rows D={D} splits={num_splits}")


@pytest.mark.parametrize("D,config,num_splits", [(D, c, n) for D in (64, 128, 256) for c in ("wide", "deep")
                                                 for n in (2, 5, 16)] + [(128, "stream", n) for n in (2, 5, 16)])
@sm90_only
def test_cluster_merge(D, config, num_splits, monkeypatch):
    """Split-KV partials merged inside thread-block clusters (at most 16 packed rows, here 8: T=2
    with 4 query heads per KV head), with 2, 5 (two merge chunks) and 16 splits (the cluster limit),
    on every instantiation; one sequence is short, so some splits of its clusters are empty. The grid (4 x
    num_splits CTAs) fits one wave, so the C API runs it one CTA per SM: 4 clusters of 16 need 16 SMs in each
    of 4 GPCs, which the 132-SM H200 has (other Hopper parts may not)."""
    force_launch_plan(monkeypatch, config, num_splits)
    q, k, v, sl = make_inputs(2, 2, 8, 2, 4000, D, device=DEV, seqlens=[4000, 100], seed=D + num_splits)
    launch = fmha.explain(q, k, v, sl, causal=True, backend="cuda").launch
    if "merged inside clusters" not in launch and torch.cuda.get_device_properties(0).multi_processor_count != 132:
        pytest.skip(f"this GPU does not hold the clusters at once: {launch}")
    assert "merged inside clusters" in launch, launch
    check_backend("cuda", q, k, v, sl, causal=True, what=f"cluster merge {config} splits={num_splits} D={D}")


@pytest.mark.parametrize("D", (64, 128))
@pytest.mark.parametrize("T,Hq,Hkv", ((1, 32, 8), (3, 40, 8)))
@sm90_only
def test_shallow_ring_plan(D, T, Hq, Hkv):
    """Unsplit narrow grids of one wave (16 sequences x 8 KV heads = 128 CTAs; 4 and 15 packed rows) run the
    shallow ring (fmha/cuda/backend.py SHALLOW_RING_MIN_FILL: stream at D = 128, wide at D = 64) with the
    narrow loop: sequences of 1000, 0, 129 and 64 keys (a tail tile, an empty row, a single tile), causal."""
    if not 128 <= torch.cuda.get_device_properties(0).multi_processor_count <= 160:
        pytest.skip("needs a GPU of 128-160 SMs for a 128-CTA grid to fill at least 0.8 of one wave")
    seqlens = [1000, 0, 129, 64] * 4  # a cache of 8192 keys (the rule counts the cache's), sequences much shorter
    q, k, v, sl = make_inputs(16, T, Hq, Hkv, 8192, D, device=DEV, seqlens=seqlens, seed=D + T)
    launch = fmha.explain(q, k, v, sl, causal=True, backend="cuda").launch
    kind = "stream (the wide configuration's K/V ring, several CTAs per SM)" if D == 128 else "wide (several CTAs per SM)"
    assert launch.startswith(f"config {kind}, shallow ring for an unsplit grid of one wave") and \
        "narrow loop" in launch and "128 CTAs x 1 KV split(s)" in launch, launch
    check_backend("cuda", q, k, v, sl, causal=True, what=f"shallow ring D={D} T={T}")


@pytest.mark.parametrize("B,T,Hq,Hkv,S,D,splits", [
    (30, 1, 8, 1, 8192, 128, 4),   # 30 CTAs: 13 splits in three waves by the plain rule
    (40, 1, 8, 1, 8192, 64, 3),
    (5, 3, 16, 8, 8192, 256, 3),   # 40 CTAs, causal T = 3
])
@sm90_only
def test_split_plan_of_one_wave(B, T, Hq, Hkv, S, D, splits):
    """A grid whose plain split count would run several waves takes the most splits of one wave
    (fmha.splits, one_wave): the plan says so, and out and LSE are the reference's on awkward lengths (an empty
    sequence, one of 7 keys, one ending inside a tile)."""
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    ctas = B * Hkv * -(-T * Hq // Hkv // 64)
    if sms != 132:
        pytest.skip(f"split counts of a 132-SM GPU; this one has {sms}")
    seqlens = [S - 37 * i for i in range(B)]
    seqlens[1], seqlens[2] = 0, 7
    q, k, v, sl = make_inputs(B, T, Hq, Hkv, S, D, device=DEV, seqlens=seqlens, seed=B + D)
    launch = fmha.explain(q, k, v, sl, causal=True, backend="cuda").launch
    assert f"{ctas} CTAs x {splits} KV split(s)" in launch, launch
    check_backend("cuda", q, k, v, sl, causal=True, what=f"one-wave split plan B{B} D={D}")


@pytest.mark.parametrize("D", (64, 128))
@pytest.mark.parametrize("T,Hq,Hkv", ((1, 32, 8), (3, 40, 8)))
@sm90_only
def test_shallow_ring_split_plan(D, T, Hq, Hkv):
    """A split grid of one wave (8 KV heads x 16 splits = 128 CTAs, 4096 keys a split) runs the shallow ring too,
    one CTA per SM (capi.cu exclusive_sms); the sequence ends inside the last split (60000 of 65536 keys)."""
    from fmha.splits import choose_num_splits

    sms = torch.cuda.get_device_properties(0).multi_processor_count
    splits = choose_num_splits(8, 65536, 128, sms, one_wave=True)  # the deep plan's (128-token tiles, a CTA an SM)
    if not 0.8 * sms <= 8 * splits <= sms:
        pytest.skip(f"on {sms} SMs the plan's {splits} splits of 8 CTAs are not 0.8-1 wave")
    q, k, v, sl = make_inputs(1, T, Hq, Hkv, 65536, D, device=DEV, seqlens=[60000], seed=D + T)
    launch = fmha.explain(q, k, v, sl, causal=True, backend="cuda").launch
    kind = "stream (the wide configuration's K/V ring, one CTA per SM)" if D == 128 else "wide (one CTA per SM)"
    assert launch.startswith(f"config {kind}, shallow ring for a split grid of one wave") and \
        "narrow loop" in launch and f"8 CTAs x {splits} KV split(s)" in launch, launch
    check_backend("cuda", q, k, v, sl, causal=True, what=f"shallow ring split D={D} T={T}")


@pytest.mark.parametrize("B,T,Hq,Hkv,S,D,splits", ((1, 1, 32, 8, 8192, 128, 8), (2, 1, 32, 8, 4096, 128, 4),
                                                    (4, 1, 32, 8, 4096, 128, 2), (1, 4, 32, 8, 8192, 128, 8),
                                                    (1, 1, 16, 8, 8192, 256, 8)))
@sm90_only
def test_clustered_plan(B, T, Hq, Hkv, S, D, splits):
    """The default plan of short split-KV problems: 64 CTAs whose splits merge inside clusters where
    the ~128-CTA plan would need the combine kernel (fmha/cuda/backend.py CLUSTER_PLAN_CTAS); the
    last sequence is short (its later splits are empty) where B > 1."""
    seqlens = [S] * (B - 1) + [S // 3 + 1] if B > 1 else None
    q, k, v, sl = make_inputs(B, T, Hq, Hkv, S, D, device=DEV, seqlens=seqlens, seed=B + T + D)
    launch = fmha.explain(q, k, v, sl, causal=True, backend="cuda").launch
    assert f"{B * Hkv} CTAs x {splits} KV split(s), merged inside clusters of {splits} CTAs" in launch, launch
    assert "fewer splits than the" in launch and "need the combine kernel" in launch, launch
    check_backend("cuda", q, k, v, sl, causal=True, what=f"clustered plan B={B} T={T} S={S} D={D}")


@pytest.mark.parametrize("dtype", (torch.bfloat16, torch.float16))
@sm90_only
def test_workspace_only_for_the_combine_kernel(dtype, monkeypatch):
    """The clustered plan (fp16 as bf16: the merge-mode query names the dtype) launches with no workspace;
    a split launch merged by the combine kernel without one is refused by the C API, naming what it needs,
    before any kernel runs (the poisoned output stays as it was)."""
    from fmha.backends import registry
    from fmha.cuda import backend as cb

    q, k, v, _ = make_inputs(1, 1, 32, 8, 8192, 128, dtype=dtype, device=DEV, seed=3)
    assert "8 CTAs x 8 KV split(s), merged inside clusters of 8" in fmha.explain(q, k, v, backend="cuda").launch
    check_backend("cuda", q, k, v, None, causal=True, what=f"clustered plan {dtype}")
    b = registry()["cuda"]
    shape = (1, 1, 32, 8, 8192, 128, dtype)
    launches = [c for c in b._launches.values() if (c[0].batch, c[0].seqlen_q, c[0].heads_q, c[0].heads_kv,
                                                   c[0].seqlen_k, c[0].head_dim, c[0].dtype) == shape]
    assert launches and all(c[3:5] == (8, 0) for c in launches), [c[3:5] for c in launches]
    force_launch_plan(monkeypatch, "deep", 16)
    assert "combine kernel" in fmha.explain(q, k, v, backend="cuda").launch
    monkeypatch.setattr(b, "_ws_bytes", lambda *shape: 0)
    out = poisoned_out(q)
    with pytest.raises(RuntimeError, match="workspace of 0 bytes is too small: num_splits=16 merged by the "
                                           "combine kernel needs"):
        fmha.attention(q, k, v, backend="cuda", out=out)
    torch.cuda.synchronize()
    assert torch.isnan(out).all()  # still the poison (NaN): no kernel ran


@pytest.mark.parametrize("D", (64, 128))
@pytest.mark.parametrize("T,Hq,Hkv", ((16, 32, 8), (16, 28, 4), (3, 28, 4)))
def test_pair_merge(D, T, Hq, Hkv, monkeypatch):
    """Two splits of the 64-row loop merged as cluster pairs, each CTA pushing the rows its partner
    merges as soon as its own loop is done: 64 rows (the T=16 plan), 112 (two row blocks, the second
    partly padding) and 21; sequences of 3000, 129 and 0 keys (an empty split, an empty row). Against
    the reference and the combine kernel (the wide configuration with the same split), and bit-identical
    across repeats (the 129-key sequence leaves split 1 empty, so its CTA finishes first; in the
    3000-key one the two race)."""
    force_launch_plan(monkeypatch, "deep", 2)
    q, k, v, sl = make_inputs(3, T, Hq, Hkv, 3000, D, device=DEV, seqlens=[3000, 129, 0], seed=D + T + Hq)
    launch = fmha.explain(q, k, v, sl, causal=True, backend="cuda").launch
    assert "clusters of 2 CTAs as each finishes" in launch, launch
    out, lse = check_backend("cuda", q, k, v, sl, causal=True, what=f"pair merge D={D} T={T} {Hq}/{Hkv}")
    for _ in range(5):
        again = fmha.attention(q, k, v, sl, causal=True, return_lse=True, backend="cuda", out=poisoned_out(q))
        assert torch.equal(again[0], out) and torch.equal(again[1], lse)
    force_launch_plan(monkeypatch, "wide", 2)
    assert "combine kernel" in fmha.explain(q, k, v, sl, causal=True, backend="cuda").launch
    combined, combined_lse = fmha.attention(q, k, v, sl, causal=True, return_lse=True, backend="cuda",
                                            out=poisoned_out(q))
    # the same two fp32 partials merged in a different order of operations, then rounded to bf16
    assert (combined.float() - out.float()).abs().max().item() <= 2 * tolerance(q.dtype, v.abs().max().item())
    assert torch.equal(torch.isneginf(combined_lse), torch.isneginf(lse))
    fin = torch.isfinite(lse)
    assert (combined_lse[fin] - lse[fin]).abs().max().item() <= 1e-5


@pytest.mark.parametrize("D", (64, 128, 256, 512))
@pytest.mark.parametrize("T,S", ((1, 4096), (4, 777)))
def test_matches_triton(D, T, S):
    Hq, Hkv = (16, 1) if D == 512 else (32, 8)
    q, k, v, sl = make_inputs(3, T, Hq, Hkv, S, D, device=DEV, seqlens=[S, S // 2, 5], seed=11)
    o_c, l_c = fmha.attention(q, k, v, sl, causal=True, return_lse=True, backend="cuda", out=poisoned_out(q))
    o_t, l_t = fmha.attention(q, k, v, sl, causal=True, return_lse=True, backend="triton", out=poisoned_out(q))
    assert not torch.isnan(o_c).any()
    # each is within tolerance() of the reference, so they are within twice that of each other
    assert (o_c.float() - o_t.float()).abs().max().item() <= 2 * tolerance(q.dtype, v.abs().max().item())
    assert torch.equal(torch.isneginf(l_c), torch.isneginf(l_t))
    fin = torch.isfinite(l_t)
    assert (l_c[fin] - l_t[fin]).abs().max().item() <= 1e-3


@pytest.mark.parametrize("D", (64, 128, 256, 512))
def test_garbage_past_seqlen_is_ignored(D):
    Hq, Hkv = (16, 1) if D == 512 else (8, 2)
    q, k, v, sl = make_inputs(2, 3, Hq, Hkv, 300, D, device=DEV, seqlens=[37, 300], seed=D)
    v[0, 37:] = float("nan")
    k[0, 37:] = float("nan")
    check_backend("cuda", q, k, v, sl, causal=True, what=f"NaN past seqlen D={D}")


@pytest.mark.parametrize("D", (128, 512))
def test_split_kv_is_deterministic(D):
    """Split-KV (partials merged inside clusters, or by the combine kernel launched behind the decode
    grid) gives bit-identical results on every run: a race in the merge or in the programmatic
    dependent launch would move them."""
    Hq, Hkv = (16, 1) if D == 512 else (32, 8)
    q, k, v, sl = make_inputs(2, 2, Hq, Hkv, 20000, D, device=DEV, seqlens=[20000, 777], seed=5)
    runs = [fmha.attention(q, k, v, sl, causal=True, return_lse=True, backend="cuda", out=poisoned_out(q))
            for _ in range(5)]
    for o, l in runs[1:]:
        assert torch.equal(o, runs[0][0]) and torch.equal(l, runs[0][1])
    check_backend("cuda", q, k, v, sl, causal=True, what=f"split-KV repeated D={D}")


def test_cuda_graph_replays_split_kv_captured_on_a_side_stream():
    """Warm-up and capture on one side stream, as serving loops do; replays stay correct."""
    q, k, v, sl = make_inputs(1, 1, 32, 8, 16384, 128, device=DEV, seqlens=[16000], seed=9)
    out = torch.empty_like(q)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        fmha.attention(q, k, v, sl, causal=True, backend="cuda", out=out)  # build + warm up on s
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=s):
        _, lse = fmha.attention(q, k, v, sl, causal=True, return_lse=True, backend="cuda", out=out)
    ref, ref_lse = fmha.attention(q, k, v, sl, causal=True, return_lse=True, backend="reference")
    for _ in range(3):
        out.fill_(float("nan"))
        lse.fill_(float("nan"))
        g.replay()
        torch.cuda.synchronize()
        compare(out, lse, ref, ref_lse, q.dtype, vmax=v.abs().max().item(), what="graph replay, side stream")


def test_first_call_inside_graph_capture():
    """A fresh process whose first fmha call on a split-KV shape is made inside torch.cuda.graph
    capture (no warm-up): the launch then sets the kernel's attributes and asks the driver how many
    clusters fit during capture; the capture must stay valid and the replay correct. Run in a
    subprocess so that no earlier test has warmed anything up."""
    import subprocess
    import sys
    import textwrap

    here = os.path.dirname(os.path.abspath(__file__))
    script = textwrap.dedent("""
        import sys, torch
        sys.path.insert(0, %r)
        import fmha
        from fmha.cuda import loader
        from _util import make_inputs, tolerance
        loader.load()  # the build (or cache hit) is host work; the launch below is the first
        q, k, v, sl = make_inputs(4, 1, 32, 8, 512, 128, device="cuda", seqlens=[512, 300, 1, 0])
        out = torch.empty_like(q)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            fmha.attention(q, k, v, sl, causal=True, backend="cuda", out=out)
        out.fill_(float("nan"))
        g.replay()
        torch.cuda.synchronize()
        ref, _ = fmha.attention(q, k, v, sl, causal=True, return_lse=True, backend="reference")
        err = (out.float() - ref.float()).abs().max().item()
        print(fmha.explain(q, k, v, sl, causal=True, backend="cuda").launch)
        assert err <= tolerance(q.dtype, v.abs().max().item()), err
    """ % here)
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600,
                       env={**os.environ, "PYTHONPATH": os.pathsep.join([os.path.dirname(here),
                                                                          os.environ.get("PYTHONPATH", "")])})
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-4000:]


def test_cuda_graph_capture():
    q, k, v, sl = make_inputs(2, 1, 32, 8, 1024, 128, device=DEV, seqlens=[1024, 10])
    out = torch.empty_like(q)
    fmha.attention(q, k, v, sl, causal=True, backend="cuda", out=out)  # build + warm up
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        _, lse = fmha.attention(q, k, v, sl, causal=True, return_lse=True, backend="cuda", out=out)
    out.fill_(float("nan"))
    lse.fill_(float("nan"))
    g.replay()
    torch.cuda.synchronize()
    ref, ref_lse = fmha.attention(q, k, v, sl, causal=True, return_lse=True, backend="reference")
    compare(out, lse, ref, ref_lse, q.dtype, vmax=v.abs().max().item(), what="graph replay")


def test_selftest_cli():
    """`python -m fmha.cuda.selftest` (the first-light check) runs and passes every case."""
    from fmha.cuda import selftest

    assert selftest.main([]) == 0
