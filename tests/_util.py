"""Shared test harness: inputs, poisoned outputs and the comparison against the reference.

Tolerance, from the arithmetic: the kernels read bf16/fp16 operands (exactly
what the fp32 reference reads), accumulate in fp32, round P to the input dtype
before the PV product, and round the output once. Rounding to a format with
p significand bits has relative error <= u = 2^-p (bf16: 2^-8, fp16: 2^-11).
The output is a convex combination of V rows, |out| <= max|v|, so
- rounding the output costs <= u * max|v|;
- rounding each weight p_j costs <= u * sum_j p_j |v_j| <= u * max|v|;
and fp32 accumulation and exp2 add ~1e-6 relative. Hence
atol = 2 u max|v| + 1e-3 (max|v| ~ 4.5 for N(0, 1) caches of 1e5 values:
bf16 3.6e-2, fp16 5.4e-3). The cosine misses a wrong scale, and at long
caches the output is small enough that the abs bound does too: each (sequence,
head)'s output norm must be within 1% of the reference's (rounding noise is
almost orthogonal to the output; rounding every weight the same way costs
<= u). An fp16 sequence whose reference output stays in or near fp16's
subnormal range (below 2^-10) is held to an absolute 2^-19 instead of the
cosine: rounding is absolute there. The LSE is accumulated in fp32 from the same
operands: 1e-3 absolute (natural-log units) covers reordered fp32 sums over
1e4-1e5 terms with margin. The cosine bound 0.99999 is the issue's requirement.
"""
from __future__ import annotations

import math

import torch

import fmha
from fmha.reference import attention_reference

# (the same bounds as fmha.compare)
from fmha.compare import LSE_ATOL, MAX_SCALE_ERR, MIN_COSINE, scale_errors, tolerance  # noqa: E402

POISON = float("nan")
# An fp16 sequence whose reference output stays below 2^-10 (a sink far above every score) lies in or near fp16's
# subnormal range (from 2^-14): compare holds it to 2 u of the floor plus half a subnormal step, not to the cosine.
FP16_COSINE_FLOOR = 2.0 ** -10
FP16_FLOOR_ATOL = 2.0 ** -19


def has_cuda_kernel() -> bool:
    """A CUDA GPU the cuda backend has a kernel for: compute capability 9.0 (sm_90a) or 10.0 (sm_100a,
    compiled but never run on hardware: on a Blackwell GPU the suite is its first test)."""
    return torch.cuda.is_available() and torch.cuda.get_device_capability() in ((9, 0), (10, 0))


CUDA_KERNEL_SKIP = ("needs a CUDA GPU of compute capability 9.0 (Hopper, sm_90a) or 10.0 (Blackwell, sm_100a; "
                    "compiled for it, never run on hardware)")


def make_inputs(B, T, Hq, Hkv, S, D, dtype=torch.bfloat16, device="cpu", seqlens=None,
                fused_qkv=False, seed=0):
    """Fresh random q/k/v (never zeros). With fused_qkv, q is a strided slice of one QKV tensor."""
    g = torch.Generator(device="cpu").manual_seed(seed)

    def rnd(*shape):
        return torch.randn(*shape, generator=g, dtype=torch.float32).to(dtype=dtype, device=device)

    if fused_qkv:
        qkv = rnd(B, T, Hq + 2 * Hkv, D)
        q = qkv[:, :, :Hq]  # stride(2) = D, stride(1) = (Hq + 2 Hkv) * D: not contiguous
    else:
        q = rnd(B, T, Hq, D)
    k = rnd(B, S, Hkv, D)
    v = rnd(B, S, Hkv, D)
    cache_seqlens = None
    if seqlens is not None:
        cache_seqlens = torch.tensor(seqlens, dtype=torch.int32, device=device)
    return q, k, v, cache_seqlens


PAGED_LAYOUTS = ("separate", "stacked", "interleaved", "head_major")


def make_paged(k, v, page_size, cache_seqlens=None, *, layout="separate", extra_blocks=3, shared_pages=0,
               table_pad=0, nan_fill=True, seed=0):
    """Page pools holding the contiguous caches k, v [B, S, Hkv, D]: (k_pool, v_pool, block_table).

    Each sequence gets cdiv(S, page_size) pages, shuffled over a pool of that many for every sequence plus
    `extra_blocks` never referenced. With nan_fill every slot that holds no token of a sequence is NaN: the
    unreferenced pages, the tail of the last page past S and, with cache_seqlens, every token at or past
    the sequence's length. shared_pages: sequences 1.. point their first pages at sequence 0's (prefix
    sharing; their rows of k and v are overwritten with sequence 0's, in place, so the contiguous caches
    still describe the same attention). table_pad: spare columns in each table row (row stride
    max_blocks_per_seq + table_pad). layout: "separate" pools, vLLM's "stacked" (2, num_blocks, page, Hkv, D)
    and "interleaved" (num_blocks, 2, page, Hkv, D) tensors, or "head_major" [num_blocks, Hkv, page, D] storage
    passed as a permuted view."""
    B, S, Hkv, D = k.shape
    P = page_size
    max_blocks = -(-S // P)
    num_blocks = B * max_blocks + extra_blocks
    g = torch.Generator(device="cpu").manual_seed(seed)
    ids = torch.randperm(num_blocks, generator=g)[:B * max_blocks].view(B, max_blocks)
    if shared_pages:
        assert shared_pages * P <= S and B > 1
        ids[1:, :shared_pages] = ids[0, :shared_pages]
        k[1:, :shared_pages * P] = k[0, :shared_pages * P]
        v[1:, :shared_pages * P] = v[0, :shared_pages * P]
    fill = float("nan") if nan_fill else 0.0
    dev, dt = k.device, k.dtype
    if layout == "separate":
        k_pool = torch.full((num_blocks, P, Hkv, D), fill, dtype=dt, device=dev)
        v_pool = torch.full((num_blocks, P, Hkv, D), fill, dtype=dt, device=dev)
    elif layout == "stacked":
        kv = torch.full((2, num_blocks, P, Hkv, D), fill, dtype=dt, device=dev)
        k_pool, v_pool = kv[0], kv[1]
    elif layout == "interleaved":
        kv = torch.full((num_blocks, 2, P, Hkv, D), fill, dtype=dt, device=dev)
        k_pool, v_pool = kv[:, 0], kv[:, 1]
    elif layout == "head_major":
        k_pool = torch.full((num_blocks, Hkv, P, D), fill, dtype=dt, device=dev).permute(0, 2, 1, 3)
        v_pool = torch.full((num_blocks, Hkv, P, D), fill, dtype=dt, device=dev).permute(0, 2, 1, 3)
    else:
        raise ValueError(f"layout {layout!r}: expected one of {PAGED_LAYOUTS}")
    lengths = [S] * B if cache_seqlens is None else [min(max(int(n), 0), S) for n in cache_seqlens.tolist()]
    for b in range(B):
        j = torch.arange(lengths[b] if nan_fill else S)
        page, row = ids[b][j // P].to(dev), (j % P).to(dev)
        k_pool[page, row] = k[b, j.to(dev)]
        v_pool[page, row] = v[b, j.to(dev)]
    table = torch.zeros(B, max_blocks + table_pad, dtype=torch.int32, device=dev)[:, :max_blocks]
    table.copy_(ids.to(torch.int32))
    return k_pool, v_pool, table


def paged_latent(k, v, page_size, sl, v_mode, seed):
    """Page pools of k and v with one shuffled table (NaN in every slot no sequence owns): (k_pool, v_pool, table);
    v_pool is k_pool's memory where v was k's (v_mode "self" or "slice"), a pool of its own for "separate"."""
    k_pool, _, table = make_paged(k, k, page_size, sl, seed=seed)
    if v_mode == "separate":
        v_pool, _, table_v = make_paged(v, v, page_size, sl, seed=seed)
        assert torch.equal(table, table_v)
    else:
        v_pool = k_pool[..., :v.shape[-1]]
    return k_pool, v_pool, table


def run_poisoned(backend, q, k, v, sl, **kw):
    """`backend` through fmha.attention (kw: its keywords) into a NaN-filled out; then its runner once more into
    NaN-filled out and LSE (fmha.attention's LSE is a fresh allocation, which may hold an earlier call's values),
    bit for bit the same. Returns (out, lse)."""
    from fmha.backends import registry
    from fmha.dispatch import decide
    from fmha.problem import NO_WINDOW, validate

    out = torch.full((*q.shape[:3], v.shape[-1]), float("nan"), dtype=q.dtype, device=q.device)
    res, lse = fmha.attention(q, k, v, sl, return_lse=True, backend=backend, out=out, **kw)
    assert res.data_ptr() == out.data_ptr()
    p = validate(q, k, v, sl, kw.get("softmax_scale"), kw.get("causal", True), None, kw.get("block_table"),
                 kw.get("sinks"), window_size=kw.get("window_size", NO_WINDOW), softcap=kw.get("softcap", 0.0),
                 cache_leftpad=kw.get("cache_leftpad"))
    out_again, lse_again = torch.full_like(out, float("nan")), torch.full_like(lse, float("nan"))
    run = dict(block_table=kw.get("block_table"), sinks=kw.get("sinks"))
    if kw.get("cache_leftpad") is not None:
        run["cache_leftpad"] = kw["cache_leftpad"]
    registry()[decide(p, backend).backend].run(p, q, k, v, sl, out_again, lse_again, **run)
    assert torch.equal(out_again, out) and torch.equal(lse_again, lse), f"{backend}: not reproduced"
    return out, lse


def poisoned_out(q):
    return torch.full(q.shape, POISON, dtype=q.dtype, device=q.device)


def cosine(a, b) -> float:
    a = a.double().flatten()
    b = b.double().flatten()
    na, nb = a.norm(), b.norm()
    if na == 0 and nb == 0:
        return 1.0
    return float((a @ b) / (na * nb).clamp_min(1e-300))


def check_backend(backend, q, k, v, cache_seqlens=None, causal=True, softmax_scale=None,
                  what="", block_table=None):
    """Run `backend` into a NaN-poisoned out buffer and compare out and LSE with the reference (with
    block_table, k and v are page pools)."""
    out = poisoned_out(q)
    res, lse = fmha.attention(q, k, v, cache_seqlens, block_table=block_table, causal=causal,
                              softmax_scale=softmax_scale, return_lse=True, backend=backend, out=out)
    assert res.data_ptr() == out.data_ptr()
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(q.shape[-1])
    ref, ref_lse = attention_reference(q, k, v, cache_seqlens, scale, causal, block_table=block_table)
    vmax = torch.nan_to_num(v.float(), nan=0.0, posinf=0.0, neginf=0.0).abs().max().item()  # over real values
    compare(out, lse, ref, ref_lse, q.dtype, vmax=vmax, what=f"{backend} {what}")
    if q.is_cuda and backend != "reference":
        # fmha.attention's LSE is a fresh allocation, which the caching allocator may hand back holding an earlier
        # call's values: the backend once more into a NaN-filled LSE (and out), bit for bit the same.
        from fmha.backends import registry
        from fmha.dispatch import decide
        from fmha.problem import validate

        p = validate(q, k, v, cache_seqlens, softmax_scale, causal, None, block_table)
        out_again, lse_again = poisoned_out(q), torch.full_like(lse, float("nan"))
        registry()[decide(p, backend).backend].run(p, q, k, v, cache_seqlens, out_again, lse_again,
                                                   block_table=block_table)
        assert torch.equal(out_again, out) and torch.equal(lse_again, lse), f"{backend} {what}: not reproduced"
    return out, lse


def compare(out, lse, ref, ref_lse, dtype, vmax: float, what=""):
    out_f = out.float().cpu()
    ref = ref.float().cpu()
    assert not torch.isnan(out_f).any(), f"{what}: NaN in output (unwritten elements or NaN math)"
    err = (out_f - ref).abs().max().item()
    atol = tolerance(dtype, vmax)
    assert err <= atol, f"{what}: max abs error {err:.3e} > {atol:.2e}"
    # Per sequence (dim 0): over the whole tensor, a wrong long sequence hides behind a short one of larger values.
    for b in range(out_f.shape[0]):
        if dtype == torch.float16 and ref[b].abs().max().item() < FP16_COSINE_FLOOR:
            err_b = (out_f[b] - ref[b]).abs().max().item()  # (rounding there is absolute: the cosine says nothing)
            assert err_b <= FP16_FLOOR_ATOL, f"{what}: max abs error {err_b:.3e} at index {b} of dim 0, " \
                f"whose reference stays below {FP16_COSINE_FLOOR:g}"
            continue
        cos = cosine(out_f[b], ref[b])
        assert cos >= MIN_COSINE, f"{what}: cosine {cos:.7f} < {MIN_COSINE} at index {b} of dim 0"
    scale = scale_errors(out_f, ref)
    assert scale.max().item() <= MAX_SCALE_ERR, \
        f"{what}: output norm off by {scale.max().item():.2%} at {divmod(int(scale.argmax()), scale.shape[1])}"
    lse = lse.cpu()
    ref_lse = ref_lse.cpu()
    assert torch.equal(torch.isneginf(lse), torch.isneginf(ref_lse)), f"{what}: -inf pattern of LSE differs"
    finite = torch.isfinite(ref_lse)
    assert not torch.isnan(lse).any(), f"{what}: NaN in LSE"
    if finite.any():
        lerr = (lse[finite] - ref_lse[finite]).abs().max().item()
        assert lerr <= LSE_ATOL, f"{what}: LSE max abs error {lerr:.3e} > {LSE_ATOL:.0e}"


def make_problem(B, T, Hq, Hkv, S, D, device="cpu", dtype=torch.bfloat16):
    """A causal fmha.Problem of these shapes, without tensors (for plan and dispatch tests)."""
    from fmha.problem import Problem

    return Problem(batch=B, seqlen_q=T, heads_q=Hq, heads_kv=Hkv, seqlen_k=S, head_dim=D, dtype=dtype,
                   device=torch.device(device), causal=True, softmax_scale=D ** -0.5, has_cache_seqlens=False)


def on_gpu(p):
    """A Problem validated from CPU tensors, as if its tensors were on the first GPU: for dispatch tests with
    conftest's cuda_as_if_present."""
    import dataclasses

    return dataclasses.replace(p, device=torch.device("cuda", 0))


def force_launch_plan(monkeypatch, config, num_splits):
    """Make the cuda backend launch every problem with this configuration (a fmha.cuda.backend.Config name in
    lower case: "wide", "deep", "stream", "kv_head_pairs", "seesaw", "split_qk", "latent_seesaw",
    "latent_split_qk", "latent_narrow", "latent_seesaw64", "latent_seesaw48") and split count, whatever its
    shape-based plan would pick."""
    from fmha.backends import registry
    from fmha.cuda.backend import Config

    b = registry()["cuda"]
    if b._fn is None:  # the patched plan skips the lazy bind that launch_details relies on
        b._bind()
    code = Config[config.upper()]
    monkeypatch.setattr(b, "launch_plan", lambda p, index: (code, num_splits))
    monkeypatch.setattr(b, "_launches", {})  # per-Problem launch constants, derived from the plan
