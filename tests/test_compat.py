"""fmha.flash_attn_with_kvcache: FlashAttention 2's signature over fmha.attention, new tokens appended in place,
and every argument fmha cannot honour refused by name before anything is written."""
import pytest
import torch

import fmha
from conftest import DEVICE
from _util import compare, has_cuda_kernel, make_inputs
from fmha.reference import attention_reference

BACKENDS = ["reference", "triton"] + (["cuda"] if has_cuda_kernel() else [])


def _appended(cache, new, lengths):
    """A copy of a contiguous cache with new [B, T_new, ...] written at each sequence's positions lengths .."""
    out = cache.clone()
    for b, n in enumerate(lengths):
        out[b, n:n + new.shape[1]] = new[b]
    return out


@pytest.mark.parametrize("backend", BACKENDS)
def test_without_new_tokens_is_attention_not_causal_by_default(backend):
    q, k, v, sl = make_inputs(2, 3, 8, 2, 40, 64, device=DEVICE, seqlens=[40, 13])
    out, lse = fmha.flash_attn_with_kvcache(q, k, v, cache_seqlens=sl, return_softmax_lse=True, backend=backend)
    ref, ref_lse = attention_reference(q, k, v, sl, 64 ** -0.5, False)
    compare(out, lse, ref, ref_lse, q.dtype, vmax=v.float().abs().max().item(), what=backend)
    # an int length is every sequence's; None reads the whole cache
    out = fmha.flash_attn_with_kvcache(q, k, v, cache_seqlens=13, causal=True, backend=backend)
    ref, _ = attention_reference(q, k, v, torch.full((2,), 13, dtype=torch.int32, device=DEVICE), 64 ** -0.5, True)
    torch.testing.assert_close(out.float(), ref.float(), atol=2e-2, rtol=0)
    out = fmha.flash_attn_with_kvcache(q, k, v, backend=backend)
    torch.testing.assert_close(out.float(), attention_reference(q, k, v, None, 64 ** -0.5, False)[0].float(),
                               atol=2e-2, rtol=0)


@pytest.mark.parametrize("backend", BACKENDS)
def test_new_tokens_are_written_in_place_and_attended(backend):
    """k and v go to positions cache_seqlens .. + T_new - 1 of each sequence (an empty one too); the slots past them
    keep their NaN; the attention reads cache_seqlens + T_new tokens, bottom-right causal."""
    B, T, Hq, Hkv, S, D = 3, 3, 8, 2, 24, 64
    q, k_cache, v_cache, _ = make_inputs(B, T, Hq, Hkv, S, D, device=DEVICE)
    _, k_new, v_new, _ = make_inputs(B, T, Hq, Hkv, T, D, device=DEVICE, seed=1)
    lengths = [5, 0, 21]
    for b, n in enumerate(lengths):
        k_cache[b, n:] = float("nan")
        v_cache[b, n:] = float("nan")
    want_k, want_v = _appended(k_cache, k_new, lengths), _appended(v_cache, v_new, lengths)
    sl = torch.tensor(lengths, dtype=torch.int32, device=DEVICE)
    out, lse = fmha.flash_attn_with_kvcache(q, k_cache, v_cache, k_new, v_new, cache_seqlens=sl, causal=True,
                                            return_softmax_lse=True, backend=backend)
    assert torch.equal(k_cache.isnan(), want_k.isnan()) and torch.equal(v_cache.isnan(), want_v.isnan())
    assert torch.equal(k_cache.nan_to_num(), want_k.nan_to_num()) and torch.equal(v_cache.nan_to_num(),
                                                                                  want_v.nan_to_num())
    assert sl.tolist() == lengths  # (the caller's lengths are not advanced)
    ref, ref_lse = attention_reference(q, want_k, want_v, sl + T, D ** -0.5, True)
    compare(out, lse, ref, ref_lse, q.dtype, vmax=v_new.float().abs().max().item(), what=backend)


@pytest.mark.parametrize("causal", [True, False])
def test_fewer_new_tokens_than_queries(causal):
    """T_new < T (FlashAttention's seqlen_new != seqlen_q): the new tokens go after cache_seqlens and the T queries
    attend to cache_seqlens + T_new keys, causal bottom-right on that length."""
    B, T, T_new, Hq, Hkv, S, D = 2, 3, 1, 4, 2, 20, 64
    q, k_cache, v_cache, _ = make_inputs(B, T, Hq, Hkv, S, D, device=DEVICE)
    _, k_new, v_new, _ = make_inputs(B, T_new, Hq, Hkv, T_new, D, device=DEVICE, seed=12)
    lengths = [9, 1]
    want_k, want_v = _appended(k_cache, k_new, lengths), _appended(v_cache, v_new, lengths)
    sl = torch.tensor(lengths, dtype=torch.int32, device=DEVICE)
    out, lse = fmha.flash_attn_with_kvcache(q, k_cache, v_cache, k_new, v_new, cache_seqlens=sl, causal=causal,
                                            return_softmax_lse=True, backend="triton")
    assert torch.equal(k_cache, want_k) and torch.equal(v_cache, want_v)
    ref, ref_lse = attention_reference(q, want_k, want_v, sl + T_new, D ** -0.5, causal)
    compare(out, lse, ref, ref_lse, q.dtype, vmax=want_v.float().abs().max().item(), what=f"causal={causal}")
    if causal:  # sequence 1 has 2 keys for 3 queries: the first sees none
        assert (out[1, 0] == 0).all() and torch.isneginf(lse[1, :, 0]).all()


@pytest.mark.parametrize("backend", BACKENDS)
def test_new_tokens_into_a_page_pool(backend):
    """Paged: the new tokens cross a page boundary of a shuffled pool; the other pages are untouched."""
    B, T, Hq, Hkv, D, page, pages_per_seq = 2, 3, 4, 1, 64, 4, 3
    q, k_flat, v_flat, _ = make_inputs(B, T, Hq, Hkv, page * pages_per_seq, D, device=DEVICE)
    _, k_new, v_new, _ = make_inputs(B, T, Hq, Hkv, T, D, device=DEVICE, seed=2)
    g = torch.Generator().manual_seed(5)
    perm = torch.randperm(B * pages_per_seq + 2, generator=g)[:B * pages_per_seq]
    table = perm.view(B, pages_per_seq).to(torch.int32).to(DEVICE)
    k_pool = torch.full((B * pages_per_seq + 2, page, Hkv, D), float("nan"), dtype=k_flat.dtype, device=DEVICE)
    v_pool = k_pool.clone()
    lengths = [6, 2]  # sequence 0 writes 6, 7 (page 1) and 8 (page 2)
    for b in range(B):
        for j in range(pages_per_seq):
            k_pool[table[b, j]] = k_flat[b, j * page:(j + 1) * page]
            v_pool[table[b, j]] = v_flat[b, j * page:(j + 1) * page]
    want_k, want_v = _appended(k_flat, k_new, lengths), _appended(v_flat, v_new, lengths)
    unused = sorted(set(range(B * pages_per_seq + 2)) - set(table.flatten().tolist()))
    sl = torch.tensor(lengths, dtype=torch.int32, device=DEVICE)
    out, lse = fmha.flash_attn_with_kvcache(q, k_pool, v_pool, k_new, v_new, cache_seqlens=sl, block_table=table,
                                            causal=True, return_softmax_lse=True, backend=backend)
    assert k_pool[unused].isnan().all() and v_pool[unused].isnan().all()
    for b in range(B):
        for j in range(pages_per_seq):
            assert torch.equal(k_pool[table[b, j]], want_k[b, j * page:(j + 1) * page])
            assert torch.equal(v_pool[table[b, j]], want_v[b, j * page:(j + 1) * page])
    ref, ref_lse = attention_reference(q, want_k, want_v, sl + T, D ** -0.5, True)
    compare(out, lse, ref, ref_lse, q.dtype, vmax=v_new.float().abs().max().item(), what=backend)


def test_new_tokens_into_a_shared_latent():
    """DeepSeek's latent: v_cache = k_cache[..., :512], v = k[..., :512]; one write serves both."""
    B, T, Hq, S = 2, 2, 4, 12
    q, latent, _, _ = make_inputs(B, T, Hq, 1, S, 576, device=DEVICE)
    _, k_new, _, _ = make_inputs(B, T, Hq, 1, T, 576, device=DEVICE, seed=3)
    lengths = [3, 10]
    want = _appended(latent, k_new, lengths)
    sl = torch.tensor(lengths, dtype=torch.int32, device=DEVICE)
    out, lse = fmha.flash_attn_with_kvcache(q, latent, latent[..., :512], k_new, k_new[..., :512], cache_seqlens=sl,
                                            causal=True, return_softmax_lse=True, backend="triton")
    assert torch.equal(latent, want)
    ref, ref_lse = attention_reference(q, want, want[..., :512], sl + T, 576 ** -0.5, True)
    compare(out, lse, ref, ref_lse, q.dtype, vmax=want.float().abs().max().item(), what="latent")


@pytest.mark.parametrize("backend", BACKENDS)
def test_cache_batch_idx_picks_each_sequence_s_cache_row(backend):
    """cache_batch_idx: sequence b reads (and with k, v appends into) cache row idx[b] of a larger cache; the
    other rows are untouched; without cache_seqlens every row is S tokens."""
    B, T, Hq, Hkv, S, D = 3, 2, 8, 2, 40, 64
    q, k_cache, v_cache, _ = make_inputs(5, T, Hq, Hkv, S, D, device=DEVICE)
    q = q[:B]
    idx = torch.tensor([3, 0, 4], dtype=torch.int32, device=DEVICE)
    rows = idx.long()
    out = fmha.flash_attn_with_kvcache(q, k_cache, v_cache, cache_batch_idx=idx, causal=True, backend=backend)
    ref, _ = attention_reference(q, k_cache[rows], v_cache[rows], None, D ** -0.5, True)
    torch.testing.assert_close(out.float(), ref.float(), atol=2e-2, rtol=0)
    _, k_new, v_new, _ = make_inputs(B, T, Hq, Hkv, T, D, device=DEVICE, seed=8)
    sl = torch.tensor([10, 0, 38], dtype=torch.int32, device=DEVICE)
    want_k, want_v = k_cache.clone(), v_cache.clone()
    want_k[rows] = _appended(k_cache[rows], k_new, sl.tolist())
    want_v[rows] = _appended(v_cache[rows], v_new, sl.tolist())
    out, lse = fmha.flash_attn_with_kvcache(q, k_cache, v_cache, k_new, v_new, cache_seqlens=sl, cache_batch_idx=idx,
                                            causal=True, return_softmax_lse=True, backend=backend)
    assert torch.equal(k_cache, want_k) and torch.equal(v_cache, want_v)
    ref, ref_lse = attention_reference(q, want_k[rows], want_v[rows], sl + T, D ** -0.5, True)
    compare(out, lse, ref, ref_lse, q.dtype, vmax=want_v.float().abs().max().item(), what=f"{backend} batch idx")


def _rotary_tables(n, rotary_dim, dtype, seed):
    """cos / sin [n, rotary_dim / 2] of random angles, in dtype (as FlashAttention's test builds them)."""
    g = torch.Generator().manual_seed(seed)
    angle = torch.rand(n, rotary_dim // 2, generator=g, dtype=torch.float64) * 2 * torch.pi
    return angle.cos().to(dtype).to(DEVICE), angle.sin().to(dtype).to(DEVICE)


def _turned(x, pos, cos, sin, interleaved):
    """x [B, L, H, D] rotated at positions pos [B, L] (ints), written independently of fmha.compat: each column pair
    as a complex number times cos + i sin, in float64, rounded to float32 and then to x's dtype (with tables in x's
    16-bit dtype the float64 products and sums are exact, so this is the float32 computation's result bit for
    bit)."""
    half = cos.shape[1]
    out = x.clone()
    for b in range(x.shape[0]):
        for i in range(x.shape[1]):
            r = x[b, i, :, :2 * half].double()
            pair = r.view(-1, half, 2) if interleaved else torch.stack((r[:, :half], r[:, half:]), -1)
            turn = torch.complex(cos[pos[b][i]].double(), sin[pos[b][i]].double())
            z = torch.view_as_real(torch.view_as_complex(pair.contiguous()) * turn)
            z = z.flatten(-2) if interleaved else torch.cat((z[..., 0], z[..., 1]), -1)
            out[b, i, :, :2 * half] = z.float().to(x.dtype)
    return out


@pytest.mark.parametrize("backend,causal,interleaved,rotary_dim,T,T_new,dtype", [
    ("reference", True, True, 64, 3, 3, torch.bfloat16), ("reference", False, True, 32, 3, 3, torch.bfloat16),
    ("reference", True, False, 32, 3, 1, torch.bfloat16), ("reference", False, False, 64, 3, 2, torch.float16),
    ("reference", True, True, 16, 2, 4, torch.float16), ("reference", False, False, 48, 2, 4, torch.bfloat16),
    ("triton", True, False, 64, 3, 3, torch.bfloat16), ("triton", False, True, 32, 2, 4, torch.float16)] + [
    ("cuda", c, i, d, 3, 3, torch.bfloat16) for c in (True, False) for i in (True, False) for d in (32, 64)
    if "cuda" in BACKENDS])
def test_rotary_embeddings_rotate_q_and_the_new_keys(backend, causal, interleaved, rotary_dim, T, T_new, dtype):
    """rotary_cos / rotary_sin: the new keys are rotated at cache_seqlens + i and written so; q at the same positions
    where causal (from cache_seqlens, whatever T_new), all at cache_seqlens where not (FlashAttention's rule); the
    columns past rotary_dim and v are not turned. The cache's last position is written (the table is exactly as
    long as the cache); q's positions past the table (causal, T_new < T) take its last row, as documented. The
    keys written are the float32 computation's bits."""
    B, Hq, Hkv, S, D = 3, 8, 2, 24, 64
    q, k_cache, v_cache, _ = make_inputs(B, T, Hq, Hkv, S, D, dtype=dtype, device=DEVICE)
    _, k_new, v_new, _ = make_inputs(B, T_new, Hq, Hkv, T_new, D, dtype=dtype, device=DEVICE, seed=13)
    lengths = [5, 0, S - T_new]
    cos, sin = _rotary_tables(S, rotary_dim, q.dtype, seed=rotary_dim)
    k_pos = [[n + i for i in range(T_new)] for n in lengths]
    q_pos = [[min(n + i, S - 1) if causal else n for i in range(T)] for n in lengths]
    k_rot, q_rot = _turned(k_new, k_pos, cos, sin, interleaved), _turned(q, q_pos, cos, sin, interleaved)
    want_k, want_v = _appended(k_cache, k_rot, lengths), _appended(v_cache, v_new, lengths)
    q_before = q.clone()
    sl = torch.tensor(lengths, dtype=torch.int32, device=DEVICE)
    out, lse = fmha.flash_attn_with_kvcache(q, k_cache, v_cache, k_new, v_new, rotary_cos=cos, rotary_sin=sin,
                                            cache_seqlens=sl, causal=causal, rotary_interleaved=interleaved,
                                            return_softmax_lse=True, backend=backend)
    assert torch.equal(k_cache, want_k) and torch.equal(v_cache, want_v)
    assert torch.equal(q, q_before)  # (q is rotated into a new tensor)
    ref, ref_lse = attention_reference(q_rot, want_k, want_v, sl + T_new, D ** -0.5, causal)
    compare(out, lse, ref, ref_lse, q.dtype, vmax=want_v.float().abs().max().item(),
            what=f"{backend} causal={causal} interleaved={interleaved}")


def test_rotary_embeddings_into_a_page_pool_and_through_cache_batch_idx():
    """Paged: positions run over the sequence (not the page), so the table covers max_blocks_per_seq x page_size;
    float32 tables are taken too. cache_batch_idx: the positions are the cache row's."""
    B, T, Hq, Hkv, D, page, pages_per_seq = 2, 2, 4, 1, 64, 4, 3  # (float32 tables: rounding differs by an ulp)
    q, k_flat, v_flat, _ = make_inputs(B, T, Hq, Hkv, page * pages_per_seq, D, device=DEVICE)
    _, k_new, v_new, _ = make_inputs(B, T, Hq, Hkv, T, D, device=DEVICE, seed=14)
    table = torch.tensor([[4, 0, 2], [1, 5, 3]], dtype=torch.int32, device=DEVICE)
    k_pool = torch.empty(6, page, Hkv, D, dtype=q.dtype, device=DEVICE)
    v_pool = torch.empty_like(k_pool)
    for b in range(B):
        for j in range(pages_per_seq):
            k_pool[table[b, j]] = k_flat[b, j * page:(j + 1) * page]
            v_pool[table[b, j]] = v_flat[b, j * page:(j + 1) * page]
    lengths = [7, 2]
    cos, sin = _rotary_tables(page * pages_per_seq, D, torch.float32, seed=1)
    k_rot = _turned(k_new, [[n, n + 1] for n in lengths], cos, sin, True)
    q_rot = _turned(q, [[n, n + 1] for n in lengths], cos, sin, True)
    want_k = _appended(k_flat, k_rot, lengths)
    sl = torch.tensor(lengths, dtype=torch.int32, device=DEVICE)
    out = fmha.flash_attn_with_kvcache(q, k_pool, v_pool, k_new, v_new, cos, sin, cache_seqlens=sl,
                                       block_table=table, causal=True, backend="reference")
    for b in range(B):
        for j in range(pages_per_seq):
            torch.testing.assert_close(k_pool[table[b, j]], want_k[b, j * page:(j + 1) * page], atol=1e-6,
                                       rtol=2 ** -7)
    ref, _ = attention_reference(q_rot, want_k, _appended(v_flat, v_new, lengths), sl + T, D ** -0.5, True)
    torch.testing.assert_close(out.float(), ref.float(), atol=2e-2, rtol=0)

    idx = torch.tensor([1, 0], dtype=torch.int32, device=DEVICE)
    k_rows, v_rows = k_flat.clone(), v_flat.clone()
    fmha.flash_attn_with_kvcache(q, k_rows, v_rows, k_new, v_new, cos, sin, cache_seqlens=sl, cache_batch_idx=idx,
                                 causal=True, backend="reference")
    torch.testing.assert_close(k_rows[idx.long()], _appended(k_flat[idx.long()], k_rot, lengths), atol=1e-6,
                               rtol=2 ** -7)


def test_rotary_tables_may_be_strided_views():
    """A table sliced from a wider one (every other column of a [S, D] cache of angles) gives the result of its
    contiguous copy."""
    q, k_cache, v_cache, sl = make_inputs(2, 1, 4, 1, 16, 64, device=DEVICE, seqlens=[3, 15])
    _, k_new, v_new, _ = make_inputs(2, 1, 4, 1, 1, 64, device=DEVICE, seed=15)
    wide_cos, wide_sin = _rotary_tables(16, 64, q.dtype, seed=3)
    cos, sin = wide_cos[:, ::2], wide_sin[:, ::2]
    k_a, v_a, k_b, v_b = k_cache.clone(), v_cache.clone(), k_cache.clone(), v_cache.clone()
    out_a = fmha.flash_attn_with_kvcache(q, k_a, v_a, k_new, v_new, cos, sin, cache_seqlens=sl, backend="reference")
    out_b = fmha.flash_attn_with_kvcache(q, k_b, v_b, k_new, v_new, cos.contiguous(), sin.contiguous(),
                                         cache_seqlens=sl, backend="reference")
    assert not cos.is_contiguous() and torch.equal(out_a, out_b) and torch.equal(k_a, k_b)


def test_lengths_past_the_capacity_are_clamped_into_the_cache():
    """Device data is not checked (a sync): writes past S land on the last slot, inside the cache (which of two
    such writes stays is not defined)."""
    q, k, v, _ = make_inputs(1, 2, 4, 1, 8, 64, device=DEVICE)
    _, k_new, v_new, _ = make_inputs(1, 2, 4, 1, 2, 64, device=DEVICE, seed=4)
    before = k.clone()
    fmha.flash_attn_with_kvcache(q, k, v, k_new, v_new, cache_seqlens=7, backend="reference")
    assert torch.equal(k[:, :7], before[:, :7])
    assert torch.equal(k[0, 7], k_new[0, 1]) or torch.equal(k[0, 7], k_new[0, 0])


def _refusals():
    q, k, v, _ = make_inputs(2, 1, 4, 1, 8, 64, device=DEVICE)
    _, k_new, v_new, _ = make_inputs(2, 1, 4, 1, 1, 64, device=DEVICE, seed=6)
    sl = torch.tensor([3, 4], dtype=torch.int32, device=DEVICE)
    cos = torch.ones(8, 16, dtype=q.dtype, device=DEVICE)
    return q, k, v, k_new, v_new, sl, [
        (dict(rotary_cos=cos), ValueError, r"rotary_sin: missing; rotary_cos and rotary_sin come together"),
        (dict(rotary_cos=cos, rotary_sin=cos, k=None, v=None), ValueError,
         r"rotary_cos: rotary embeddings need the new keys k and v"),
        (dict(rotary_cos=cos[0], rotary_sin=cos[0]), ValueError,
         r"rotary_cos: expected a 2-D tensor \[seqlen_ro, rotary_dim / 2\] .* got \[16\]"),
        (dict(rotary_cos=cos, rotary_sin=cos[:, :8]), ValueError,
         r"rotary_sin: shape \[8, 8\] differs from rotary_cos's \[8, 16\]"),
        (dict(rotary_cos=cos.half(), rotary_sin=cos.half()), ValueError,
         r"rotary_cos: torch.float16 .*; allowed: torch.bfloat16 \(q's dtype\) or torch.float32"),
        (dict(rotary_cos=torch.ones(8, 40, dtype=q.dtype, device=DEVICE),
              rotary_sin=torch.ones(8, 40, dtype=q.dtype, device=DEVICE)), ValueError,
         r"rotary_cos: rotary_dim = 2 x 40 = 80 exceeds the key head dim 64"),
        (dict(rotary_cos=cos[:7], rotary_sin=cos[:7]), ValueError,
         r"rotary_cos: 7 positions, fewer than the cache holds \(8\)"),
        (dict(rotary_cos=cos, rotary_sin=cos, rotary_interleaved=0), TypeError, r"rotary_interleaved"),
        (dict(rotary_cos=[[1.0]], rotary_sin=cos), ValueError, r"rotary_cos: expected a 2-D tensor .* got list"),
        (dict(rotary_cos=cos, rotary_sin=cos, cache_seqlens=sl[:1]), ValueError,
         r"cache_seqlens: expected shape \[2\]"),
        (dict(rotary_cos=cos, rotary_sin=cos, cache_seqlens=sl.view(2, 1)), ValueError,
         r"cache_seqlens: expected shape \[2\]"),
        # paged: the table covers max_blocks_per_seq x page_size positions (3 x 4 = 12)
        (dict(rotary_cos=cos.new_ones(11, 16), rotary_sin=cos.new_ones(11, 16), block_table=(
            torch.arange(6, dtype=torch.int32, device=DEVICE).view(2, 3) % 2), paged=True), ValueError,
         r"rotary_cos: 11 positions, fewer than the cache holds \(12\)"),
        # cache_batch_idx: a row of the cache is S = 8 positions
        (dict(rotary_cos=cos[:7], rotary_sin=cos[:7], cache_batch_idx=torch.zeros(2, dtype=torch.int32,
                                                                                   device=DEVICE)), ValueError,
         r"rotary_cos: 7 positions, fewer than the cache holds \(8\)"),
        (dict(cache_batch_idx=torch.arange(2, device=DEVICE)), TypeError,
         r"cache_batch_idx: expected an int32 tensor \[B\], got torch.int64"),
        (dict(cache_batch_idx=torch.zeros(3, dtype=torch.int32, device=DEVICE)), ValueError,
         r"cache_batch_idx: expected shape \[2\]"),
        (dict(cache_batch_idx=sl, block_table=sl.view(2, 1)), NotImplementedError,
         r"cache_batch_idx: not with a block_table"),
        (dict(cache_leftpad=sl.long()), TypeError, r"cache_leftpad: dtype torch.int64 is not allowed"),
        (dict(alibi_slopes=torch.ones(4, device=DEVICE)), NotImplementedError, r"alibi_slopes: fmha does not"),
        (dict(window_size=(-2, 0)), ValueError, r"window_size: expected \(left, right\) each >= -1"),
        (dict(softcap=-30.0), ValueError, r"softcap: expected a finite real number >= 0"),
        (dict(num_splits=-1), ValueError, r"num_splits: expected an int >= 0, got -1"),
        (dict(causal=1), TypeError, r"causal"),
        (dict(k=None), ValueError, r"k: missing; new keys and values come together"),
        (dict(cache_seqlens=None), TypeError, r"cache_seqlens: got None with k and v"),
        (dict(cache_seqlens=[3, 4]), TypeError, r"cache_seqlens: got list with k and v"),
        (dict(window_size=4), TypeError, r"window_size: expected a pair of ints"),
        (dict(cache_seqlens=sl.long()), TypeError, r"cache_seqlens: dtype torch.int64 is not allowed"),
        # cache_seqlens as given, not the lengths after the append
        (dict(cache_seqlens=sl.bool()), TypeError, r"cache_seqlens: dtype torch.bool is not allowed"),
        (dict(cache_seqlens=torch.stack((sl, sl), 1)[:, 0]), ValueError, r"cache_seqlens: must be contiguous"),
        (dict(cache_seqlens=2 ** 31), ValueError, r"cache_seqlens: got 2147483648; allowed: an int in \[0, 2\^31\)"),
        (dict(cache_seqlens=-1), ValueError, r"cache_seqlens: got -1"),
        (dict(k=k_new.to_sparse()), TypeError, r"k: layout torch.sparse_coo is not allowed"),
        (dict(cache_batch_idx=torch.zeros(2, dtype=torch.int32, device=DEVICE)._neg_view()), ValueError,
         r"cache_batch_idx: a lazily negated view"),
        (dict(v=v_new[:, :, :, :32]), ValueError, r"v: expected shape \[2, 1, 1, 64\]"),
        (dict(k=k_new.half()), TypeError, r"k: dtype torch.float16 differs from the cache's torch.bfloat16"),
        (dict(k=[1]), TypeError, r"k: expected a torch.Tensor \[B, T_new, Hkv, D\] of new tokens, got list"),
        (dict(softmax_scale=-1.0), ValueError, r"softmax_scale"),
        (dict(num_splits=1.0), TypeError, r"num_splits: expected an int >= 0, got float"),
        (dict(cache_batch_idx=torch.zeros(2, dtype=torch.int32, device=DEVICE), v_trim=4), ValueError,
         r"v_cache: \[B_cache, S, Hkv\] = \[2, 4, 1\] differs from k_cache's \[2, 8, 1\]"),
        # the backend, and what it can serve, before the append
        (dict(backend="nope"), ValueError, r"backend: unknown backend 'nope'"),
        (dict(backend=["reference"]), ValueError, r"backend: unknown backend \['reference'\]"),
        (dict(backend="cuda", softcap=30.0), NotImplementedError, r"backend 'cuda' cannot serve"),
        # what is named before the rotation and the append read it
        (dict(kv_as=lambda k, v: (k, [0.0])), TypeError, r"v_cache: expected a torch.Tensor, .* got list"),
        (dict(kv_as=lambda k, v: (3.0, v)), TypeError, r"k_cache: expected a torch.Tensor, .* got float"),
        (dict(q_as=lambda q: q[..., :32], rotary_cos=cos.new_ones(8, 32), rotary_sin=cos.new_ones(8, 32)),
         ValueError, r"k_cache: head_dim 64 differs from q's head_dim 32"),
        (dict(rotary_cos=cos.to_sparse(), rotary_sin=cos), TypeError, r"rotary_cos: layout torch.sparse_coo"),
        (dict(rotary_cos=cos, rotary_sin=torch.nested.nested_tensor([cos])), TypeError,
         r"rotary_sin: a nested tensor is not allowed"),
        (dict(kv_as=lambda k, v: (k[:, :0], v[:, :0]), cache_batch_idx=torch.zeros(2, dtype=torch.int32,
                                                                                     device=DEVICE)),
         ValueError, r"k_cache: B_cache, S and Hkv must be >= 1, got shape \[2, 0, 1, 64\]"),
    ]


@pytest.mark.parametrize("cache_seqlens", [3.0, [3, 3]])
def test_cache_seqlens_of_no_allowed_type_is_named_without_new_tokens(cache_seqlens):
    q, k, v, _ = make_inputs(2, 1, 4, 1, 8, 64, device=DEVICE)
    with pytest.raises(TypeError, match=r"cache_seqlens: expected an int, a contiguous int32 tensor \[B\] or None, "
                                        r"got (float 3\.0|list \[3, 3\])"):
        fmha.flash_attn_with_kvcache(q, k, v, cache_seqlens=cache_seqlens, backend="reference")


def test_a_q_inside_the_cache_the_tokens_are_written_to_is_refused():
    q, k, v, _ = make_inputs(2, 1, 2, 2, 8, 64, device=DEVICE)
    k_new, v_new = torch.randn_like(k[:, :1]), torch.randn_like(v[:, :1])
    sl = torch.tensor([3, 5], dtype=torch.int32, device=DEVICE)
    k_before = k.clone()
    with pytest.raises(ValueError, match=r"q: its memory meets k_cache's, which the new tokens are written into"):
        fmha.flash_attn_with_kvcache(k[:, 4:5], k, v, k=k_new, v=v_new, cache_seqlens=sl, backend="reference")
    assert torch.equal(k, k_before)  # nothing written


@pytest.mark.parametrize("case", range(len(_refusals()[-1])))
def test_refusals_name_the_argument_and_write_nothing(case):
    q, k, v, k_new, v_new, sl, cases = _refusals()
    kwargs, error, match = cases[case]
    args = dict(k=k_new, v=v_new, cache_seqlens=sl, backend="reference")
    args.update(kwargs)
    if args.pop("paged", False):  # the caches as a pool of 2 pages of 4 tokens
        k, v = k.view(4, 4, *k.shape[2:])[:2], v.view(4, 4, *v.shape[2:])[:2]
    if "v_trim" in args:  # a V cache of fewer tokens than K's
        v = v[:, :args.pop("v_trim")]
    k_before, v_before = k.clone(), v.clone()
    k_call, v_call = args.pop("kv_as", lambda k, v: (k, v))(k, v)  # (caches of the wrong kind)
    q_call = args.pop("q_as", lambda q: q)(q)
    with pytest.raises(error, match=match):
        fmha.flash_attn_with_kvcache(q_call, k_call, v_call, **args)
    assert torch.equal(k, k_before) and torch.equal(v, v_before)


def test_causal_window_of_right_edge_zero_is_the_whole_cache():
    """FlashAttention's causal calls may pass window_size=(-1, 0): the same attention as (-1, -1)."""
    q, k, v, sl = make_inputs(2, 3, 4, 1, 16, 64, device=DEVICE, seqlens=[16, 9])
    a = fmha.flash_attn_with_kvcache(q, k, v, cache_seqlens=sl, causal=True, window_size=(-1, 0), backend="reference")
    assert torch.equal(a, fmha.flash_attn_with_kvcache(q, k, v, cache_seqlens=sl, causal=True, backend="reference"))


@pytest.mark.parametrize("backend", ["reference", "triton"])  # (the CUDA kernels have no windows)
def test_sliding_window_as_flash_attention(backend):
    """window_size is fmha.attention's sliding window; with causal the right edge is the diagonal whatever is
    passed (FlashAttention sets it to 0), and without, both bounds hold."""
    q, k, v, sl = make_inputs(2, 3, 8, 2, 40, 64, device=DEVICE, seqlens=[40, 13])
    for causal, window, meant in ((True, (5, 7), (5, -1)), (True, (5, 0), (5, -1)), (False, (4, 2), (4, 2))):
        out, lse = fmha.flash_attn_with_kvcache(q, k, v, cache_seqlens=sl, causal=causal, window_size=window,
                                                return_softmax_lse=True, backend=backend)
        ref, ref_lse = attention_reference(q, k, v, sl, 64 ** -0.5, causal, window_size=meant)
        compare(out, lse, ref, ref_lse, q.dtype, vmax=v.float().abs().max().item(), what=f"{backend} {window}")


def test_rotary_q_positions_per_token_where_windowed():
    """FlashAttention rotates q token t at cache_seqlens + t where causal or local (a window), even not causal."""
    q, k_cache, v_cache, _ = make_inputs(1, 2, 4, 1, 16, 64, device=DEVICE)
    _, k_new, v_new, _ = make_inputs(1, 2, 4, 1, 2, 64, device=DEVICE, seed=16)
    cos, sin = _rotary_tables(16, 64, q.dtype, seed=4)
    sl = torch.tensor([5], dtype=torch.int32, device=DEVICE)
    out = fmha.flash_attn_with_kvcache(q, k_cache, v_cache, k_new, v_new, cos, sin, cache_seqlens=sl, causal=False,
                                       window_size=(6, 1), backend="reference")
    q_rot, k_rot = _turned(q, [[5, 6]], cos, sin, True), _turned(k_new, [[5, 6]], cos, sin, True)
    want_k, want_v = _appended(k_cache, k_rot, [5]), _appended(v_cache, v_new, [5])
    assert torch.equal(k_cache, want_k)
    ref, _ = attention_reference(q_rot, want_k, want_v, sl + 2, 64 ** -0.5, False, window_size=(6, 1))
    torch.testing.assert_close(out.float(), ref.float(), atol=2e-2, rtol=0)


def test_rotary_q_positions_where_the_window_bounds_nothing():
    """FlashAttention counts a side of at least the cache's capacity as no bound: such a window is not local, so q is
    rotated at cache_seqlens (not causal)."""
    q, k_cache, v_cache, _ = make_inputs(1, 2, 4, 1, 16, 64, device=DEVICE)
    _, k_new, v_new, _ = make_inputs(1, 2, 4, 1, 2, 64, device=DEVICE, seed=17)
    cos, sin = _rotary_tables(16, 64, q.dtype, seed=6)
    sl = torch.tensor([5], dtype=torch.int32, device=DEVICE)
    outs = []
    for window in ((16, -1), (-1, -1)):
        k_c, v_c = k_cache.clone(), v_cache.clone()
        outs.append(fmha.flash_attn_with_kvcache(q, k_c, v_c, k_new, v_new, cos, sin, cache_seqlens=sl,
                                                 window_size=window, backend="reference"))
    assert torch.equal(outs[0], outs[1])


def test_new_tokens_into_an_expanded_cache_are_refused():
    q, k, v, k_new, v_new, sl, _ = _refusals()
    before = v.clone()
    with pytest.raises(ValueError, match=r"k_cache: strides .* share memory \(an expanded view\); new tokens cannot "):
        fmha.flash_attn_with_kvcache(q, k[:1].expand(2, -1, -1, -1), v, k_new, v_new, cache_seqlens=sl)
    assert torch.equal(v, before)


def test_new_tokens_that_require_grad_are_refused():
    q, k, v, k_new, v_new, sl, _ = _refusals()
    with pytest.raises(ValueError, match=r"^k: requires_grad=True"):
        fmha.flash_attn_with_kvcache(q, k, v, k_new.requires_grad_(), v_new, cache_seqlens=sl)
    cos = torch.ones(8, 16, dtype=q.dtype, device=DEVICE)
    with pytest.raises(ValueError, match=r"^rotary_sin: requires_grad=True"):
        fmha.flash_attn_with_kvcache(q, k, v, k_new.detach(), v_new, cos, cos.clone().requires_grad_(),
                                     cache_seqlens=sl)
    with pytest.raises(ValueError, match=r"^rotary_cos: requires_grad=True"):
        fmha.flash_attn_with_kvcache(q, k, v, k_new.detach(), v_new, cos.clone().requires_grad_(), cos,
                                     cache_seqlens=sl)


# ---- FlashMLA's call ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("Dqk", [576, 512])
def test_flash_mla_call_on_a_latent_page_pool(backend, Dqk):
    """FlashMLA's arguments in their order, get_mla_metadata's result passed through: V is the pool's first 512
    columns; out and the LSE [B, Hq, T] against the reference, NaN in every slot no sequence owns."""
    from _util import make_paged

    B, T, Hq = 3, 2, 16
    q, latent, _, sl = make_inputs(B, T, Hq, 1, 130, Dqk, device=DEVICE, seqlens=[130, 0, 65])
    pool, _, table = make_paged(latent, latent, 64, sl, seed=Dqk)
    meta, splits = fmha.get_mla_metadata(sl, T * Hq, 1)
    out, lse = fmha.flash_mla_with_kvcache(q, pool, table, sl, 512, meta, splits, causal=True, backend=backend)
    ref, ref_lse = attention_reference(q, latent, latent[..., :512], sl, Dqk ** -0.5, True)
    compare(out, lse, ref, ref_lse, q.dtype, vmax=latent.float().abs().max().item(), what=f"{backend} {Dqk}")
    assert out.shape == (B, T, Hq, 512) and lse.shape == (B, Hq, T) and (out[1] == 0).all()


@pytest.mark.parametrize("kwargs,error,match", [
    (dict(is_fp8_kvcache=True), NotImplementedError, r"is_fp8_kvcache: fmha reads bf16 / fp16 caches"),
    (dict(indices=torch.zeros(1, 1, 8, dtype=torch.int32)), NotImplementedError, r"indices: FlashMLA's sparse"),
    (dict(topk_length=torch.ones(1, dtype=torch.int32)), NotImplementedError, r"topk_length: FlashMLA's sparse"),
    (dict(attn_sink=torch.zeros(4)), NotImplementedError, r"attn_sink: not taken by the dense call"),
    (dict(head_dim_v=600), ValueError, r"head_dim_v: 600 with k_cache's D_qk = 576 is not supported; allowed with "
                                       r"576: 512"),
    (dict(head_dim_v=256), ValueError, r"head_dim_v: 256 with k_cache's D_qk = 576 is not supported"),
    (dict(head_dim_v=512.0), TypeError, r"head_dim_v: expected an int, got float"),
])
def test_flash_mla_call_refuses_what_it_cannot_honour(kwargs, error, match):
    q, latent, _, sl = make_inputs(1, 1, 4, 1, 8, 576, device=DEVICE, seqlens=[8])
    args = dict(head_dim_v=512)
    args.update(kwargs)
    with pytest.raises(error, match=match):
        fmha.flash_mla_with_kvcache(q, latent, None, sl, args.pop("head_dim_v"), *fmha.get_mla_metadata(), **args)


def test_flash_mla_call_names_a_k_cache_that_is_not_a_latent_cache():
    q, _, _, sl = make_inputs(1, 1, 4, 1, 8, 576, device=DEVICE, seqlens=[8])
    with pytest.raises(TypeError, match=r"k_cache: expected a torch.Tensor .* got NoneType"):
        fmha.flash_mla_with_kvcache(q, None, None, sl, 512, *fmha.get_mla_metadata())
    with pytest.raises(ValueError, match=r"k_cache: expected a 4-D latent cache .* got 3-D"):
        fmha.flash_mla_with_kvcache(q, q[0], None, sl, 512, *fmha.get_mla_metadata())
    with pytest.raises(TypeError, match=r"k_cache: layout torch.sparse_coo is not allowed"):
        fmha.flash_mla_with_kvcache(q, q.to_sparse(), None, sl, 512)


def test_nested_q_is_named():
    q = torch.randn(2, 1, 4, 64, dtype=torch.bfloat16)
    k = torch.randn(2, 8, 1, 64, dtype=torch.bfloat16)
    with pytest.raises(TypeError, match=r"q: a nested tensor is not allowed"):
        fmha.flash_attn_with_kvcache(torch.nested.nested_tensor([q[0], q[1]]), k, k)


def test_torch_compile_fullgraph_appends_and_checks_first():
    """Under torch.compile(fullgraph=True) the append is a custom op (fmha::append_kv_) that checks the call before
    writing: the same caches and output as eager, and a bad call leaves the caches as they were."""
    q, k, v, sl = make_inputs(2, 1, 8, 2, 32, 64, device=DEVICE, seqlens=[10, 20])
    _, k_new, v_new, _ = make_inputs(2, 1, 8, 2, 1, 64, device=DEVICE, seed=3)

    def call(q, k, v, k_new, v_new, sl):
        return fmha.flash_attn_with_kvcache(q, k, v, k_new, v_new, cache_seqlens=sl, causal=True,
                                            backend="reference")

    compiled = torch.compile(call, fullgraph=True)
    with torch.no_grad():
        k_c, v_c, k_e, v_e = k.clone(), v.clone(), k.clone(), v.clone()
        assert torch.equal(compiled(q, k_c, v_c, k_new, v_new, sl), call(q, k_e, v_e, k_new, v_new, sl))
        assert torch.equal(k_c, k_e) and torch.equal(v_c, v_e) and not torch.equal(k_c, k)
        with pytest.raises(TypeError, match=r"cache_seqlens: dtype torch.int64 is not allowed"):
            compiled(q, k_c, v_c, k_new, v_new, sl.long())
        assert torch.equal(k_c, k_e) and torch.equal(v_c, v_e)

    cos, sin = _rotary_tables(32, 32, q.dtype, seed=2)

    def rotary_call(q, k, v, k_new, v_new, sl):
        return fmha.flash_attn_with_kvcache(q, k, v, k_new, v_new, cos, sin, cache_seqlens=sl, causal=True,
                                            rotary_interleaved=False, backend="reference")

    with torch.no_grad():  # the rotation traces as torch operations
        k_c, v_c, k_e, v_e = k.clone(), v.clone(), k.clone(), v.clone()
        out = torch.compile(rotary_call, fullgraph=True)(q, k_c, v_c, k_new, v_new, sl)
        torch.testing.assert_close(out, rotary_call(q, k_e, v_e, k_new, v_new, sl), atol=2e-2, rtol=0)
        torch.testing.assert_close(k_c, k_e, atol=1e-6, rtol=2 ** -7)
        assert torch.equal(v_c, v_e)


def test_torch_compile_fullgraph_append_with_dynamic_shapes():
    """A serving engine's compiled step meets a new batch size and cache length: one graph with dynamic shapes
    (the caches' strides are symbolic, so the expanded-cache check runs in the op), the same caches and output
    as eager, and an expanded cache still refused by name."""
    def call(q, k, v, k_new, v_new, sl):
        return fmha.flash_attn_with_kvcache(q, k, v, k_new, v_new, cache_seqlens=sl, causal=True,
                                            backend="reference")

    torch._dynamo.reset()
    compiled = torch.compile(call, fullgraph=True, dynamic=True, backend="eager")
    with torch.no_grad():
        for B, S in ((2, 32), (3, 48)):
            q, k, v, sl = make_inputs(B, 1, 8, 2, S, 64, device=DEVICE, seqlens=[S // 2] * B, seed=B)
            _, k_new, v_new, _ = make_inputs(B, 1, 8, 2, 1, 64, device=DEVICE, seed=B + 1)
            k_c, v_c, k_e, v_e = k.clone(), v.clone(), k.clone(), v.clone()
            assert torch.equal(compiled(q, k_c, v_c, k_new, v_new, sl), call(q, k_e, v_e, k_new, v_new, sl))
            assert torch.equal(k_c, k_e) and torch.equal(v_c, v_e)
        expanded = k[:1].expand(B, -1, -1, -1)
        with pytest.raises(ValueError, match=r"k_cache: strides .* share memory"):
            compiled(q, expanded, v.clone(), k_new, v_new, sl)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("backend", [b for b in BACKENDS if b != "reference"])
def test_decode_steps_replayed_from_a_cuda_graph(backend):
    """A decode step (append one token, attend) captured once and replayed for three steps, the lengths advanced
    on the device between replays: the caches and outputs of eager steps."""
    B, Hq, Hkv, S, D = 4, 8, 2, 64, 128
    q, k_cache, v_cache, sl = make_inputs(B, 1, Hq, Hkv, S, D, device="cuda", seqlens=[0, 5, 30, 60])
    k_eager, v_eager, sl_eager = k_cache.clone(), v_cache.clone(), sl.clone()
    _, k_new, v_new, _ = make_inputs(B, 1, Hq, Hkv, 1, D, device="cuda", seed=9)

    def step(k, v, lengths):
        return fmha.flash_attn_with_kvcache(q, k, v, k_new, v_new, cache_seqlens=lengths, causal=True,
                                            backend=backend)

    step(k_cache.clone(), v_cache.clone(), sl)  # warm-up outside the graph (the first call compiles or builds)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = step(k_cache, v_cache, sl)
    for _ in range(3):
        g.replay()
        want = step(k_eager, v_eager, sl_eager)
        torch.cuda.synchronize()
        assert torch.equal(k_cache, k_eager) and torch.equal(v_cache, v_eager)
        torch.testing.assert_close(out, want, atol=0, rtol=0)
        sl += 1
        sl_eager += 1


def test_append_into_inference_tensors_outside_inference_mode_writes_nothing():
    """Caches made under torch.inference_mode() take no in-place write outside it: refused by name before the
    append (torch would write V, then refuse K); inside inference mode the call runs."""
    q, _, _, sl = make_inputs(2, 1, 4, 1, 8, 64, device=DEVICE, seqlens=[3, 5])
    with torch.inference_mode():
        k, v = torch.randn(2, 8, 1, 64, device=DEVICE).bfloat16(), torch.randn(2, 8, 1, 64, device=DEVICE).bfloat16()
    k_new = torch.randn(2, 1, 1, 64, device=DEVICE).bfloat16()
    k_before, v_before = k.clone(), v.clone()
    with pytest.raises(ValueError, match=r"k_cache: an inference tensor .* under torch.inference_mode\(\)"):
        fmha.flash_attn_with_kvcache(q, k, v, k_new, k_new, cache_seqlens=sl, backend="reference")
    assert torch.equal(k, k_before) and torch.equal(v, v_before)
    with torch.inference_mode():
        fmha.flash_attn_with_kvcache(q, k, v, k_new, k_new, cache_seqlens=sl, backend="reference")
    assert torch.equal(k[0, 3], k_new[0, 0])
