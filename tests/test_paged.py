"""Paged KV caches (a block table over page pools) in every backend, against the fp32 reference.

The reference gathers through the table; Triton runs its block-table addressing (under the interpreter on
a CPU, on small shapes); the cuda backend (Hopper only) its TMA boxes or its gather. Pools are built by
scattering a contiguous cache into shuffled pages (tests/_util.py make_paged) with every slot no sequence
owns filled with NaN, so the output must equal the contiguous cache's and ignore everything else.
"""
from __future__ import annotations

import itertools

import pytest
import torch

import fmha
from conftest import DEVICE, HAS_GPU
from _util import (CUDA_KERNEL_SKIP, PAGED_LAYOUTS, check_backend, compare, has_cuda_kernel, make_inputs,
                   make_paged, on_gpu, poisoned_out, tolerance)
from fmha.cuda.backend import Config
from fmha.problem import metadata_key, validate, validate_cached
from fmha.reference import attention_reference


def hopper(test):  # a CUDA kernel's test: skipped without one, and in `-m gpu`
    return pytest.mark.gpu(pytest.mark.skipif(not has_cuda_kernel(), reason=CUDA_KERNEL_SKIP)(test))


def gpu(test):
    return pytest.mark.gpu(pytest.mark.skipif(not HAS_GPU, reason="needs a CUDA GPU")(test))


def _heads(D):
    if D == 512:
        return 16, 1  # the MQA latent shape
    return (28, 4) if HAS_GPU else (8, 2)


def check_paged(backend, q, k, v, sl, page_size, causal=True, what="", **paged):
    """Page the contiguous caches k, v and check `backend` on the pools: against the reference through the table
    (check_backend) and against the reference on the contiguous caches. Returns (out, lse, pools, table)."""
    kp, vp, bt = make_paged(k, v, page_size, sl, **paged)
    out, lse = check_backend(backend, q, kp, vp, sl, causal=causal, block_table=bt, what=f"paged {what}")
    ref, ref_lse = attention_reference(q, k, v, sl, q.shape[-1] ** -0.5, causal)
    compare(out, lse, ref, ref_lse, q.dtype, vmax=v.abs().max().item(), what=f"{backend} paged vs contiguous {what}")
    return out, lse, (kp, vp), bt


# ---- reference ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("page_size", (1, 5, 16))
def test_reference_paged_equals_contiguous(page_size):
    """Gathered through a shuffled table (prefix-shared pages, NaN everywhere no sequence owns), the reference
    gives the contiguous cache's result; an empty sequence gives zeros and LSE = -inf."""
    q, k, v, sl = make_inputs(3, 3, 8, 2, 37, 64, seqlens=[37, 0, 20], seed=page_size)
    kp, vp, bt = make_paged(k, v, page_size, sl, shared_pages=1, seed=page_size)
    assert torch.isnan(kp).any() and torch.isnan(vp).any()
    o, l = attention_reference(q, kp, vp, sl, 0.125, True, block_table=bt)
    ref, ref_lse = attention_reference(q, k, v, sl, 0.125, True)
    assert torch.allclose(o, ref, atol=1e-6, rtol=1e-5) and torch.allclose(l, ref_lse, atol=1e-6)
    assert (o[1] == 0).all() and torch.isneginf(l[1]).all()


def test_reference_clamps_ids_into_the_pool():
    """Ids below 0 read page 0, ids at or past num_blocks read the last page, as the kernels clamp them."""
    q, k, v, sl = make_inputs(1, 1, 4, 1, 8, 64, seqlens=[8])
    pool_k, pool_v = k.view(4, 2, 1, 64), v.view(4, 2, 1, 64)  # four pages of two tokens
    bt = torch.tensor([[-5, 3, 99, 2 ** 31 - 1]], dtype=torch.int32)
    want = torch.tensor([[0, 3, 3, 3]], dtype=torch.int32)
    got = attention_reference(q, pool_k, pool_v, sl, 0.125, True, block_table=bt)
    assert torch.equal(got[0], attention_reference(q, pool_k, pool_v, sl, 0.125, True, block_table=want)[0])


# ---- Triton (the interpreter on a CPU) ------------------------------------------------------------------

# Page sizes: one token (token-level tables), not a power of two, vLLM's 16, a multiple of the Triton tile
# (one page id per tile: BLOCK_N 64 at D = 64 and 256, 128 at D = 128, 32 at D = 512).
PAGED_GRID = ([(P, D) for P in (1, 12, 16, 64) for D in (64, 512)] + [(24, 128), (24, 256), (128, 128), (64, 256)]
              + ([(P, D) for P in (13, 256) for D in (64, 128, 256, 512)] if HAS_GPU else []))


@pytest.mark.parametrize("page_size,D", PAGED_GRID)
def test_triton_paged(page_size, D):
    """Shuffled pages, a page shared by all sequences (prefix sharing), NaN in every slot no sequence owns,
    varlen with an empty sequence and one shorter than T, causal T=3, poisoned out, LSE."""
    Hq, Hkv = _heads(D)
    q, k, v, sl = make_inputs(4, 3, Hq, Hkv, 70, D, device=DEVICE, seqlens=[70, 0, 33, 2], seed=page_size + D)
    out, lse, _, _ = check_paged("triton", q, k, v, sl, page_size, shared_pages=1 if page_size <= 33 else 0,
                                 seed=D, what=f"page={page_size} D={D}")
    assert (out[1] == 0).all() and torch.isneginf(lse[1]).all()
    assert torch.isneginf(lse[3, :, 0]).all()  # 2 keys, T=3: the first query sees none


@pytest.mark.parametrize("causal", (True, False))
def test_triton_nan_pages_do_not_change_the_output(causal):
    """The same tables over NaN-filled and zero-filled pools give bit-identical results: no slot past a sequence's
    length, no unreferenced page is ever read."""
    q, k, v, sl = make_inputs(3, 2, 8, 2, 45, 64, device=DEVICE, seqlens=[45, 17, 1], seed=3)
    runs = []
    for nan_fill in (True, False):
        kp, vp, bt = make_paged(k, v, 12, sl, nan_fill=nan_fill, seed=4)
        runs.append(fmha.attention(q, kp, vp, sl, block_table=bt, causal=causal, return_lse=True, backend="triton",
                                   out=poisoned_out(q)))
    assert torch.equal(runs[0][0], runs[1][0]) and torch.equal(runs[0][1], runs[1][1])


@pytest.mark.parametrize("page_size", (12, 64))
@pytest.mark.parametrize("num_splits", (2, 3))
def test_triton_paged_forced_splits(page_size, num_splits):
    """The split path (partials + combine) through the table, with uneven and empty splits."""
    from fmha.triton.decode import decode_attention

    q, k, v, sl = make_inputs(3, 3, 8, 2, 300, 64, device=DEVICE, seqlens=[300, 0, 70], seed=num_splits)
    kp, vp, bt = make_paged(k, v, page_size, sl, seed=page_size)
    p = validate(q, kp, vp, sl, None, True, None, bt)
    out = poisoned_out(q)
    lse = torch.full((3, 8, 3), float("nan"), device=DEVICE)
    assert decode_attention(p, q, kp, vp, sl, out, lse, num_splits=num_splits, block_table=bt) > 1
    ref, ref_lse = attention_reference(q, k, v, sl, p.softmax_scale, True)
    compare(out, lse, ref, ref_lse, q.dtype, vmax=v.abs().max().item(), what=f"paged split={num_splits}")


def test_triton_paged_fp16_non_causal_padded_table():
    """fp16, non-causal, a table whose rows are padded (row stride > max_blocks_per_seq)."""
    q, k, v, sl = make_inputs(2, 2, 8, 4, 50, 128, dtype=torch.float16, device=DEVICE, seqlens=[50, 31], seed=8)
    _, _, _, bt = check_paged("triton", q, k, v, sl, 8, causal=False, table_pad=5, what="fp16 padded table")
    assert bt.stride(0) == bt.shape[1] + 5


def spy_run(monkeypatch, name):
    """Record what backend `name`'s run receives (pointers and strides of k, v and the table), then run it."""
    from fmha.backends import registry

    b = registry()[name]
    real, seen = b.run, []

    def run(p, q, k, v, sl, out, lse, block_table=None):
        seen.append((k.data_ptr(), k.stride(), v.data_ptr(), v.stride(),
                     None if block_table is None else (block_table.data_ptr(), block_table.stride())))
        real(p, q, k, v, sl, out, lse, block_table=block_table)

    monkeypatch.setattr(b, "run", run)
    return seen


@pytest.mark.parametrize("layout", PAGED_LAYOUTS)
@pytest.mark.parametrize("backend", ("triton", "reference"))
def test_pool_layouts_are_read_in_place(layout, backend, monkeypatch):
    """vLLM's stacked K/V tensors, (2, num_blocks, ...) and (num_blocks, 2, ...), and the head-major page layout
    [num_blocks, Hkv, page, D] as a permuted view: served as given, the backend gets the caller's storage and
    strides (never a copy)."""
    q, k, v, sl = make_inputs(2, 3, 8, 2, 40, 64, device=DEVICE, seqlens=[40, 9], seed=5)
    kp, vp, bt = make_paged(k, v, 16, sl, layout=layout, seed=6)
    if layout in ("stacked", "interleaved"):  # halves of one tensor
        assert kp.untyped_storage().data_ptr() == vp.untyped_storage().data_ptr()
    if layout == "head_major":
        assert kp.stride() == (2 * 16 * 64, 64, 16 * 64, 1)
    seen = spy_run(monkeypatch, backend)
    check_backend(backend, q, kp, vp, sl, block_table=bt, what=layout)
    # (on a GPU check_backend runs the backend a second time, with the same arguments)
    assert seen and all(s == (kp.data_ptr(), kp.stride(), vp.data_ptr(), vp.stride(), (bt.data_ptr(), bt.stride()))
                        for s in seen)


def test_out_of_range_ids_are_clamped():
    """Page ids below 0 or at or past num_blocks (device data, never checked on the host) read page 0 or the
    last page: no crash, the result of the clamped table; sequences whose ids are valid are unaffected even
    where the clamped pages hold NaN."""
    q, k, v, sl = make_inputs(3, 2, 8, 2, 48, 64, device=DEVICE, seqlens=[48, 48, 30], seed=9)
    for nan_fill in (False, True):
        kp, vp, bt = make_paged(k, v, 12, sl, nan_fill=nan_fill, seed=10)
        nb = kp.shape[0]
        bt[1] = torch.tensor([-1, nb, nb + 1000, 2 ** 31 - 1], dtype=torch.int32)
        if not nan_fill:  # every page is real data: the whole result is the clamped table's
            check_backend("triton", q, kp, vp, sl, block_table=bt, what="out-of-range ids")
            continue
        out, lse = fmha.attention(q, kp, vp, sl, block_table=bt, return_lse=True, backend="triton",
                                  out=poisoned_out(q))
        ref, ref_lse = attention_reference(q, k, v, sl, 0.125, True)
        good = [0, 2]
        compare(out[good], lse[good], ref[good], ref_lse[good], q.dtype, vmax=v.abs().max().item(),
                what="valid sequences beside out-of-range ids")


def test_cache_seqlens_above_capacity_are_clamped():
    """cache_seqlens past max_blocks_per_seq * page_size act as the capacity (clamped on the device)."""
    q, k, v, _ = make_inputs(2, 3, 8, 2, 48, 64, device=DEVICE, seed=11)
    kp, vp, bt = make_paged(k, v, 16, seed=12)
    sl = torch.tensor([48 + 100, 2 ** 31 - 1], dtype=torch.int32, device=DEVICE)
    for backend in ("triton", "reference"):
        out, lse = fmha.attention(q, kp, vp, sl, block_table=bt, return_lse=True, backend=backend,
                                  out=poisoned_out(q))
        ref, ref_lse = attention_reference(q, k, v, None, 0.125, True)
        compare(out, lse, ref, ref_lse, q.dtype, vmax=v.abs().max().item(), what=f"{backend} clamped lengths")


def test_overlapping_table_rows():
    """One table row shared by every sequence (an expanded view, row stride 0) is served by Triton and the
    reference; the Problem records that the rows overlap (the cuda backend declines such tables)."""
    q, k, v, sl = make_inputs(3, 1, 8, 2, 40, 64, device=DEVICE, seqlens=[40, 25, 3], seed=13)
    k[1:], v[1:] = k[0], v[0]
    kp, vp, bt = make_paged(k[:1], v[:1], 8, seed=14)
    bt = bt.expand(3, -1)
    assert not validate(q, kp, vp, sl, block_table=bt).block_table_rows_disjoint
    out, lse = check_backend("triton", q, kp, vp, sl, block_table=bt, what="expanded table")
    ref, ref_lse = attention_reference(q, k, v, sl, 0.125, True)
    compare(out, lse, ref, ref_lse, q.dtype, vmax=v.abs().max().item(), what="expanded table vs contiguous")


# ---- the API around the call ----------------------------------------------------------------------------

def test_explain_and_compare_cover_the_paged_call():
    q, k, v, sl = make_inputs(2, 1, 8, 2, 40, 64, device=DEVICE, seqlens=[40, 0], seed=15)
    kp, vp, bt = make_paged(k, v, 12, sl, seed=16)
    d = fmha.explain(q, kp, vp, sl, block_table=bt, backend="triton")
    assert "paged (12-token pages): a page id per key" in d.launch, d.launch
    kp64, vp64, bt64 = make_paged(k, v, 64, sl, seed=16)
    assert "one page id per KV tile" in fmha.explain(q, kp64, vp64, sl, block_table=bt64, backend="triton").launch
    report = fmha.compare(q, kp, vp, sl, block_table=bt, backends=["triton", "reference"], timing=False)
    assert report.ok, str(report)
    assert "paged(12 tokens a page, 11 pages)" in report.problem and "S=48" in report.problem, report.problem


@pytest.mark.parametrize("backend", ["reference", "triton"])
def test_torch_compile_fullgraph_paged(backend):
    """A decode step on a paged cache compiles without graph breaks (the custom op takes the table) and matches
    eager."""
    q, k, v, sl = make_inputs(2, 2, 8, 2, 24, 64, device=DEVICE, seqlens=[24, 9], seed=17)
    kp, vp, bt = make_paged(k, v, 8, sl, seed=18)
    w = torch.randn(64, 64, device=DEVICE).to(q.dtype)

    def step(q, kp, vp, sl, bt):
        out, lse = fmha.attention(q, kp, vp, sl, block_table=bt, return_lse=True, backend=backend)
        return (out @ w).float().sum(-1), lse

    torch._dynamo.reset()
    compiled = torch.compile(step, fullgraph=True, backend="eager" if DEVICE == "cpu" else "inductor")
    got, got_lse = compiled(q, kp, vp, sl, bt)
    want, want_lse = step(q, kp, vp, sl, bt)
    assert torch.allclose(got, want, atol=1e-2, rtol=1e-3) and torch.allclose(got_lse, want_lse, atol=1e-5)
    assert not torch.isnan(got).any()


def test_memo_keys_hold_the_table_metadata_never_its_ids():
    """metadata_key (and so validate_cached and attention's memo) includes the table's shape and strides, never
    its values: a table changed in place gives the new result on the next call."""
    q, k, v, sl = make_inputs(2, 1, 8, 2, 32, 64, seqlens=[32, 20], seed=19)
    kp, vp, bt = make_paged(k, v, 8, sl, nan_fill=False, seed=20)
    key = metadata_key(q, kp, vp, sl, None, True, None, bt)
    other = bt.clone()
    other[0, 0] = 0
    assert metadata_key(q, kp, vp, sl, None, True, None, other) == key
    padded = torch.zeros(2, 8, dtype=torch.int32)[:, :4]
    assert metadata_key(q, kp, vp, sl, None, True, None, padded) != key
    assert metadata_key(q, kp, vp, sl, None, True, None, None) != key
    assert validate_cached(q, kp, vp, sl, None, True, None, bt) is validate_cached(q, kp, vp, sl, None, True, None,
                                                                                   other)
    first = fmha.attention(q, kp, vp, sl, block_table=bt, backend="reference")
    bt[:, :] = bt.flip(0)  # swap the two sequences' pages
    swapped = fmha.attention(q, kp, vp, sl, block_table=bt, backend="reference")
    assert not torch.equal(first, swapped)
    assert torch.equal(swapped, attention_reference(q, kp, vp, sl, 0.125, True, block_table=bt.clone())[0].to(q.dtype))


# ---- validation: errors before any launch ---------------------------------------------------------------

def _paged_args():
    q, k, v, sl = make_inputs(2, 1, 8, 2, 32, 64, seqlens=[32, 5])
    kp, vp, bt = make_paged(k, v, 8, sl)
    return q, kp, vp, sl, bt


@pytest.mark.parametrize("change,exc,match", [
    (lambda a: a.update(bt=a["bt"].float()), TypeError, r"block_table: dtype torch.float32 is not allowed; expected "
                                                         r"torch.int32"),
    (lambda a: a.update(bt=a["bt"].long()), TypeError, r"block_table: dtype torch.int64 is not allowed"),
    (lambda a: a.update(bt=a["bt"].tolist()), TypeError, r"block_table: expected an int32 tensor \[B=2, "
                                                          r"max_blocks_per_seq\] of page ids or None, got list"),
    (lambda a: a.update(bt=a["bt"][0]), ValueError, r"block_table: expected a 2-D tensor \[B=2, max_blocks_per_seq\], "
                                                     r"got 1-D shape \[4\]"),
    (lambda a: a.update(bt=a["bt"][None]), ValueError, r"block_table: expected a 2-D tensor .* got 3-D"),
    (lambda a: a.update(bt=a["bt"][:1]), ValueError, r"block_table: expected 2 rows \(one per sequence, q's batch\), "
                                                      r"got shape \[1, 4\]"),
    (lambda a: a.update(bt=a["bt"][:, :0]), ValueError, r"block_table: expected at least one column"),
    (lambda a: a.update(bt=torch.zeros(2, 8, dtype=torch.int32)[:, ::2]), ValueError,
     r"block_table: the last dimension must be contiguous \(stride\(-1\) == 1\), got strides \(8, 2\)"),
    (lambda a: a.update(sl=None), ValueError, r"cache_seqlens: got None with a block_table; paged caches need "
                                              r"cache_seqlens"),
    (lambda a: a.update(vp=a["vp"][:, :4]), ValueError, r"v_cache: page_size \(tokens a page\) 4 differs from "
                                                          r"k_cache's 8"),
    (lambda a: a.update(vp=a["vp"][:-1]), ValueError, r"v_cache: num_blocks \(pages in the pool\) 10 differs from "
                                                        r"k_cache's 11"),
    (lambda a: a.update(vp=a["vp"][:, :, :1]), ValueError, r"v_cache: shape \[11, 8, 1, 64\] differs from "
                                                             r"k_cache's \[11, 8, 2, 64\]; both must be \[num_blocks"),
    (lambda a: a.update(kp=a["kp"][:0], vp=a["vp"][:0]), ValueError, r"k_cache: num_blocks, page_size and Hkv "
                                                                       r"must be >= 1, got shape \[0, 8, 2, 64\]"),
    (lambda a: a.update(kp=a["kp"][0], vp=a["vp"][0]), ValueError,
     r"k_cache: expected a 4-D tensor \[num_blocks, page_size, Hkv, D\] \(a page pool, with block_table\), got 3-D"),
    (lambda a: a.update(kp=a["kp"].half(), vp=a["vp"].half()), TypeError, r"k_cache: dtype torch.float16 differs"),
    (lambda a: a.update(sl=a["sl"].long()), TypeError, r"cache_seqlens: dtype torch.int64 is not allowed"),
])
def test_paged_validation_errors(change, exc, match, monkeypatch):
    q, kp, vp, sl, bt = _paged_args()
    args = dict(kp=kp, vp=vp, sl=sl, bt=bt)
    change(args)
    from fmha.backends import registry

    for name in ("reference", "triton"):  # nothing may run
        monkeypatch.setattr(registry()[name], "run", lambda *a, **k: pytest.fail("a backend ran"))
    with pytest.raises(exc, match=match):
        fmha.attention(q, args["kp"], args["vp"], args["sl"], block_table=args["bt"])
    with pytest.raises(exc, match=match):
        fmha.explain(q, args["kp"], args["vp"], args["sl"], block_table=args["bt"])


@pytest.mark.parametrize("which", ("bt", "sl"))
def test_sparse_table_or_lengths_are_refused(which, monkeypatch):
    """A sparse block_table or cache_seqlens (one column, or B = 1, so that no stride check catches it) is refused
    by name before anything runs, also after a dense tensor of the same shape and strides was memoised."""
    from fmha.backends import registry

    q, kp, vp, sl, bt = _paged_args()
    bt, sl = bt[:, :1], sl.clone()
    if which == "sl":
        q, bt, sl = q[:1], bt[:1], sl[:1]
    bad = dict(bt=bt, sl=sl)
    bad[which] = bad[which].to_sparse()
    dense = dict(bt=bt, sl=sl)  # the same shape and strides as the sparse tensor, dense
    dense[which] = torch.zeros(1, dtype=torch.int32).as_strided(bad[which].shape, bad[which].stride())
    fmha.attention(q, kp, vp, dense["sl"], block_table=dense["bt"], backend="reference")  # memoised
    for name in ("reference", "triton"):  # nothing may run
        monkeypatch.setattr(registry()[name], "run", lambda *a, **k: pytest.fail("a backend ran"))
    arg = "block_table" if which == "bt" else "cache_seqlens"
    with pytest.raises(TypeError, match=rf"{arg}: layout torch.sparse_coo is not allowed"):
        fmha.attention(q, kp, vp, bad["sl"], block_table=bad["bt"], backend="reference")
    with pytest.raises(TypeError, match=rf"{arg}: layout torch.sparse_coo is not allowed"):
        validate(q, kp, vp, bad["sl"], block_table=bad["bt"])


def test_paged_pools_need_not_match_the_batch():
    """A pool's first dimension is its page count, not B: no batch check applies."""
    q, kp, vp, sl, bt = _paged_args()
    assert kp.shape[0] != q.shape[0]
    p = validate(q, kp, vp, sl, block_table=bt)
    assert (p.batch, p.num_blocks, p.page_size, p.max_blocks_per_seq, p.seqlen_k) == (2, 11, 8, 4, 32)


def test_block_table_device_must_match():
    """A table on another device than q is refused by name (the meta device stands for a GPU on any machine)."""
    q, kp, vp, sl, bt = _paged_args()
    with pytest.raises(ValueError, match=r"block_table: on device meta but q is on cpu"):
        fmha.attention(q, kp, vp, sl, block_table=bt.to("meta"))
    if torch.cuda.is_available():
        q, kp, vp, sl = q.cuda(), kp.cuda(), vp.cuda(), sl.cuda()
        with pytest.raises(ValueError, match=r"block_table: on device cpu but q is on cuda:0"):
            fmha.attention(q, kp, vp, sl, block_table=bt)


# ---- GPU: the cuda backend (and Triton compiled) against the reference ---------------------------------

CUDA_PAGES = (1, 13, 16, 24, 32, 64, 96, 256)


def cuda_gathers(page_size: int) -> bool:
    """Whether the cuda backend gathers pages of this size (fmha_paged_gather): TMA boxes need 32-row pieces."""
    return (page_size & -page_size) < 32


@hopper
@pytest.mark.parametrize("D", (64, 128, 256, 512))
@pytest.mark.parametrize("page_size", CUDA_PAGES)
@pytest.mark.parametrize("T,S", ((1, 1000), (3, 129)))
def test_cuda_paged_grid(D, page_size, T, S):
    """The awkward lengths paged: TMA boxes (pages a multiple of 32) and the gather (1, 13, 16, 24), shuffled pages, a
    shared prefix page, NaN in every slot no sequence owns, varlen with an empty sequence, causal T=3; cuda
    and triton each against the reference and against each other."""
    Hq, Hkv = _heads(D)
    q, k, v, sl = make_inputs(3, T, Hq, Hkv, S, D, device="cuda", seqlens=[S, 0, S // 2 + 1], seed=D + page_size + T)
    kp, vp, bt = make_paged(k, v, page_size, sl, shared_pages=1 if page_size <= S // 2 else 0, seed=page_size)
    launch = fmha.explain(q, kp, vp, sl, block_table=bt, backend="cuda").launch
    assert ("gather each tile" if cuda_gathers(page_size) else "TMA boxes") in launch and "kv_head_pairs" not in launch, launch
    o_c, l_c = check_backend("cuda", q, kp, vp, sl, block_table=bt, what=f"cuda page={page_size} D={D} T={T}")
    o_t, l_t = check_backend("triton", q, kp, vp, sl, block_table=bt, what=f"triton page={page_size} D={D} T={T}")
    ref, ref_lse = attention_reference(q, k, v, sl, D ** -0.5, True)
    compare(o_c, l_c, ref, ref_lse, q.dtype, vmax=v.abs().max().item(), what="cuda paged vs contiguous")
    assert (o_c.float() - o_t.float()).abs().max().item() <= 2 * tolerance(q.dtype, v.abs().max().item())
    assert (o_c[1] == 0).all() and torch.isneginf(l_c[1]).all()


@hopper
@pytest.mark.parametrize("D", (64, 128, 256, 512))
@pytest.mark.parametrize("page_size", (13, 16, 64, 256))
def test_cuda_paged_split_kv(D, page_size):
    """Long sequences: the plan splits the keys (the same plan as a contiguous cache of the capacity, except that
    gathered pages at D = 128 run DEEP, and WIDE_GATHER for WIDE at D = 64); varlen inside the split path."""
    Hq, Hkv = (16, 1) if D == 512 else (8, 8)
    q, k, v, sl = make_inputs(2, 2, Hq, Hkv, 32768, D, device="cuda", seqlens=[32768, 1000], seed=D + page_size)
    kp, vp, bt = make_paged(k, v, page_size, sl, seed=page_size)
    import dataclasses

    from fmha.backends import registry

    p_paged = validate(q, kp, vp, sl, block_table=bt)
    p_flat = dataclasses.replace(validate(q, k, v, sl), seqlen_k=p_paged.seqlen_k)  # a cache of the capacity
    b = registry()["cuda"]
    plan, flat = b.launch_plan(p_paged, 0), b.launch_plan(p_flat, 0)
    if D == 128 and cuda_gathers(page_size):  # GATHER_DEEP_HEAD_DIMS
        assert plan == (Config.DEEP, flat[1]) and plan[1] > 1, (plan, flat)
    elif D == 64 and cuda_gathers(page_size) and flat[0] == Config.WIDE:  # four gathering warps
        assert plan == (Config.WIDE_GATHER, flat[1]) and plan[1] > 1, (plan, flat)
    else:
        assert plan == flat and plan[1] > 1, (plan, flat)
    check_backend("cuda", q, kp, vp, sl, block_table=bt, what=f"split page={page_size} D={D}")


@hopper
@pytest.mark.parametrize("D,config,num_splits", [(D, c, n) for D in (64, 128, 256) for c in ("wide", "deep")
                                                 for n in (1, 3, 20)]
                         + [(512, c, n) for c in ("seesaw", "split_qk") for n in (1, 3)]
                         + [(128, "stream", n) for n in (1, 3)] + [(64, "wide_gather", n) for n in (1, 3, 20)])
@pytest.mark.parametrize("page_size", (13, 64))
def test_cuda_paged_each_configuration(D, config, num_splits, page_size, monkeypatch):
    """Every configuration, split and unsplit (clusters or the combine kernel), through the TMA path (64) and the
    gather (13): GQA 28/4 causal T=3, varlen with an empty sequence."""
    from test_cuda import force_launch_plan

    force_launch_plan(monkeypatch, config, num_splits)
    Hq, Hkv = (16, 1) if D == 512 else (28, 4)
    q, k, v, sl = make_inputs(3, 3, Hq, Hkv, 1000, D, device="cuda", seqlens=[1000, 0, 129], seed=D + num_splits)
    kp, vp, bt = make_paged(k, v, page_size, sl, seed=num_splits)
    check_backend("cuda", q, kp, vp, sl, block_table=bt, what=f"{config} splits={num_splits} page={page_size}")


@hopper
@pytest.mark.parametrize("Hq,Hkv,T", ((8, 2, 2), (16, 4, 1), (6, 6, 2)))
@pytest.mark.parametrize("page_size", (1, 13, 16, 64, 96, 256))
def test_cuda_paged_head_pairs(Hq, Hkv, T, page_size, monkeypatch):
    """D = 64 KV heads read in pairs from the pools (KV_HEAD_PAIRS, the D = 128 stream kernel over the pool as
    128-wide heads): TMA boxes and the gather, causal, the awkward lengths, varlen with an empty sequence, a
    shared prefix page, NaN in every slot no sequence owns."""
    from test_cuda import force_launch_plan

    force_launch_plan(monkeypatch, "kv_head_pairs", 1)
    q, k, v, sl = make_inputs(3, T, Hq, Hkv, 1000, 64, device="cuda", seqlens=[1000, 0, 129], seed=Hq + page_size)
    kp, vp, bt = make_paged(k, v, page_size, sl, shared_pages=1, seed=page_size + T)
    assert "KV-head pairs" in fmha.explain(q, kp, vp, sl, block_table=bt, backend="cuda").launch
    out, lse = check_backend("cuda", q, kp, vp, sl, block_table=bt, what=f"pairs {Hq}/{Hkv} T={T} page={page_size}")
    ref, ref_lse = attention_reference(q, k, v, sl, 64 ** -0.5, True)
    compare(out, lse, ref, ref_lse, q.dtype, vmax=v.abs().max().item(), what="cuda pairs paged vs contiguous")
    assert (out[1] == 0).all() and torch.isneginf(lse[1]).all()


@hopper
@pytest.mark.parametrize("layout", PAGED_LAYOUTS)
@pytest.mark.parametrize("page_size", (16, 13))
def test_cuda_pool_layouts(layout, page_size, monkeypatch):
    """vLLM's stacked K/V and the head-major page layout (a permuted view), read in place by the cuda backend."""
    q, k, v, sl = make_inputs(2, 3, 32, 8, 500, 128, device="cuda", seqlens=[500, 77], seed=21)
    kp, vp, bt = make_paged(k, v, page_size, sl, layout=layout, seed=22)
    seen = spy_run(monkeypatch, "cuda")
    check_backend("cuda", q, kp, vp, sl, block_table=bt, what=f"{layout} page={page_size}")
    assert seen and all(s == (kp.data_ptr(), kp.stride(), vp.data_ptr(), vp.stride(), (bt.data_ptr(), bt.stride()))
                        for s in seen)  # (check_backend runs it twice on a GPU)


@hopper
@pytest.mark.parametrize("page_size", (13, 64))
def test_cuda_out_of_range_ids(page_size):
    """Ids below 0 and past the pool read page 0 or the last page: no fault, the clamped table's result (the
    pool holds no NaN here), and valid sequences unaffected beside a NaN pool."""
    q, k, v, sl = make_inputs(3, 2, 32, 8, 300, 128, device="cuda", seqlens=[300, 300, 100], seed=23)
    for nan_fill in (False, True):
        kp, vp, bt = make_paged(k, v, page_size, sl, nan_fill=nan_fill, seed=24)
        nb = kp.shape[0]
        bad = torch.tensor([-1, nb, nb + 7, 2 ** 31 - 1, -2 ** 31], dtype=torch.int32, device="cuda")
        bt[1] = bad.repeat(bt.shape[1] // 5 + 1)[:bt.shape[1]]
        if not nan_fill:
            check_backend("cuda", q, kp, vp, sl, block_table=bt, what="out-of-range ids")
            continue
        out, lse = fmha.attention(q, kp, vp, sl, block_table=bt, return_lse=True, backend="cuda", out=poisoned_out(q))
        torch.cuda.synchronize()
        ref, ref_lse = attention_reference(q, k, v, sl, 128 ** -0.5, True)
        good = [0, 2]
        compare(out[good], lse[good], ref[good], ref_lse[good], q.dtype, vmax=v.abs().max().item(),
                what="valid sequences beside out-of-range ids")


def test_cuda_declines_overlapping_table_rows_and_auto_moves_on(cuda_as_if_present):
    """The plan on any machine: rows of the table that overlap (an expanded row) are refused by name for cuda, and
    auto takes another backend rather than reading the wrong rows."""
    from fmha.dispatch import decide
    q, k, v, sl = make_inputs(2, 1, 8, 2, 64, 128, seqlens=[64, 30])
    kp, vp, bt = make_paged(k[:1], v[:1], 16)
    p = on_gpu(validate(q, kp, vp, sl, block_table=bt.expand(2, -1)))
    with pytest.raises(NotImplementedError, match="block_table rows overlap"):
        decide(p, "cuda")
    assert decide(p, "auto").backend != "cuda"


@hopper
def test_cuda_declines_overlapping_table_rows():
    q, k, v, sl = make_inputs(2, 1, 8, 2, 64, 128, device="cuda", seqlens=[64, 30])
    kp, vp, bt = make_paged(k[:1], v[:1], 16)
    bt = bt.expand(2, -1)
    with pytest.raises(NotImplementedError, match="block_table rows overlap"):
        fmha.attention(q, kp, vp, sl, block_table=bt, backend="cuda")
    assert fmha.explain(q, kp, vp, sl, block_table=bt).backend != "cuda"


def _graph_backends():
    return [b for b in ("cuda", "triton", "reference") if b in fmha.available_backends()]


@gpu
@pytest.mark.parametrize("page_size", (13, 64))
def test_cuda_graph_replays_after_table_and_lengths_change(page_size):
    """A captured paged call replays correctly after block_table and cache_seqlens change in place (new pages,
    new lengths, a shorter and a longer sequence), for every GPU backend and the reference."""
    for backend in _graph_backends():
        q, k, v, sl = make_inputs(2, 2, 16, 2, 300, 128, device="cuda", seqlens=[300, 77], seed=25)
        kp, vp, bt = make_paged(k, v, page_size, None, extra_blocks=40, nan_fill=False, seed=26)
        out = poisoned_out(q)
        fmha.attention(q, kp, vp, sl, block_table=bt, backend=backend, out=out)  # warm-up outside capture
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            _, lse = fmha.attention(q, kp, vp, sl, block_table=bt, backend=backend, out=out, return_lse=True)
        g = torch.Generator().manual_seed(27)
        for step in range(3):
            perm = torch.randperm(kp.shape[0], generator=g)[:bt.numel()].view(bt.shape).to(torch.int32)
            bt.copy_(perm)
            sl.copy_(torch.tensor([150 + step * 60, 300 - step * 100], dtype=torch.int32))
            out.fill_(float("nan"))
            graph.replay()
            torch.cuda.synchronize()
            ref, ref_lse = attention_reference(q, kp, vp, sl, 128 ** -0.5, True, block_table=bt)
            compare(out, lse, ref, ref_lse, q.dtype, vmax=vp.abs().max().item(), what=f"{backend} replay {step}")


@gpu
@pytest.mark.parametrize("page_size", (13, 64))
def test_torch_compile_fullgraph_paged_gpu(page_size):
    backends = [b for b in ("cuda", "triton") if b in fmha.available_backends()]
    q, k, v, sl = make_inputs(2, 1, 32, 8, 500, 128, device="cuda", seqlens=[500, 33], seed=28)
    kp, vp, bt = make_paged(k, v, page_size, sl, seed=29)
    for backend in backends:
        def step(q, kp, vp, sl, bt):
            return fmha.attention(q, kp, vp, sl, block_table=bt, return_lse=True, backend=backend)

        torch._dynamo.reset()
        out, lse = torch.compile(step, fullgraph=True)(q, kp, vp, sl, bt)
        ref, ref_lse = attention_reference(q, k, v, sl, 128 ** -0.5, True)
        compare(out, lse, ref, ref_lse, q.dtype, vmax=v.abs().max().item(), what=f"{backend} compiled paged")


@hopper
def test_cuda_selftest_paged_cases():
    from fmha.cuda import selftest

    assert selftest.main(["-k", "paged"]) == 0


@hopper
@pytest.mark.parametrize("B,T,Hq,Hkv,S,D,page_size", list(itertools.product(
    (4,), (1,), (32,), (8,), (4096,), (64, 128, 256), (16, 64))) + [(4, 1, 16, 1, 4096, 512, 64)])
def test_cuda_paged_matches_contiguous(B, T, Hq, Hkv, S, D, page_size):
    """The same problem on a contiguous cache (NaN past every length) and paged (NaN in every slot no sequence owns):
    both within tolerance of the reference, LSE included, and of each other."""
    q, k, v, sl = make_inputs(B, T, Hq, Hkv, S, D, device="cuda", seqlens=[S, S // 2, 5, 0], seed=30)
    k_nan, v_nan = k.clone(), v.clone()
    for b, n in enumerate(sl.tolist()):
        k_nan[b, n:] = float("nan")
        v_nan[b, n:] = float("nan")
    flat, _ = check_backend("cuda", q, k_nan, v_nan, sl, what=f"contiguous page={page_size}")
    paged, _, _, _ = check_paged("cuda", q, k, v, sl, page_size, seed=31, what=f"page={page_size}")
    assert (flat.float() - paged.float()).abs().max().item() <= 2 * tolerance(q.dtype, v.abs().max().item())


@hopper
@pytest.mark.parametrize("T,Hq,D,page_size,config", ((4, 32, 128, 64, "stream"), (4, 32, 128, 96, "stream"),
                                                      (4, 32, 128, 16, "stream"), (1, 32, 64, 64, "kv_head_pairs"),
                                                      (1, 32, 64, 16, "wide_gather")))
def test_cuda_paged_plans_of_their_own(T, Hq, D, page_size, config):
    """The plans a paged grid gets where the contiguous one of its capacity differs (Hkv = 8, B = SMs / 4: STREAM
    for a narrow grid of more CTAs than SMs, KV-head pairs through TMA boxes, WIDE_GATHER where D = 64 gathers),
    as planned, against the reference and the contiguous call; varlen with empty and 1-token sequences."""
    B = torch.cuda.get_device_properties(0).multi_processor_count // 4  # 8 B CTAs: more than the SMs, one wave
    seqlens = [777, 0, 1, 129] + [(37 * i) % 778 for i in range(B - 4)]
    q, k, v, sl = make_inputs(B, T, Hq, 8, 777, D, device="cuda", seqlens=seqlens, seed=T + D + page_size)
    kp, vp, bt = make_paged(k, v, page_size, sl, seed=page_size)
    assert fmha.explain(q, kp, vp, sl, block_table=bt, backend="cuda").launch.startswith(f"config {config} (")
    out, lse = check_backend("cuda", q, kp, vp, sl, block_table=bt, what=f"{config} page={page_size}")
    flat = fmha.attention(q, k, v, sl, backend="cuda", out=poisoned_out(q))
    assert (flat.float() - out.float()).abs().max().item() <= 2 * tolerance(q.dtype, v.abs().max().item())
    assert (out[1] == 0).all() and torch.isneginf(lse[1]).all()
