"""Capped scores (`softcap`, Gemma 2's) and left-padded caches (`cache_leftpad`): the reference against direct
float64 math, the Triton kernel against the reference (NaN in every key before each sequence's start and past its
length; unsplit, split, paged, with windows and sinks), the checks, and the CUDA kernels' refusal."""
import dataclasses

import pytest
import torch

import fmha
from conftest import DEVICE
from _util import compare, make_inputs, make_paged
from fmha.problem import validate
from fmha.reference import attention_reference


def _float64_attention(q, k, v, lengths, leftpad, scale, causal, softcap):
    """out [B, T, Hq, Dv] by the definition, one row at a time in float64: keys j in [leftpad, L) (and j <= L - T + t
    where causal), scores s = scale q.k, capped to c tanh(s / c) where softcap c > 0."""
    B, T, Hq, _ = q.shape
    G = Hq // k.shape[2]
    out = torch.zeros(B, T, Hq, v.shape[-1], dtype=torch.float64)
    for b in range(B):
        for t in range(T):
            hi = lengths[b] - T + t + 1 if causal else lengths[b]
            keys = list(range(max(leftpad[b], 0), min(hi, lengths[b])))
            if not keys:
                continue
            for h in range(Hq):
                s = (k[b, keys, h // G].double() @ q[b, t, h].double()) * scale
                if softcap:
                    s = softcap * torch.tanh(s / softcap)
                out[b, t, h] = torch.softmax(s, 0) @ v[b, keys, h // G].double()
    return out


@pytest.mark.parametrize("softcap,leftpad,causal", [(5.0, [0, 0, 0], True), (0.0, [3, 0, 40], True),
                                                    (2.0, [10, 1, 0], False), (30.0, [0, 6, 2], True)])
def test_reference_is_the_definition(softcap, leftpad, causal):
    q, k, v, sl = make_inputs(3, 3, 8, 2, 40, 64, device="cpu", seqlens=[40, 6, 17])
    q = q * 4  # scores of several units: the cap binds
    lp = torch.tensor(leftpad, dtype=torch.int32)
    ref, _ = attention_reference(q, k, v, sl, 64 ** -0.5, causal, softcap=softcap, cache_leftpad=lp)
    want = _float64_attention(q, k, v, sl.tolist(), leftpad, 64 ** -0.5, causal, softcap)
    torch.testing.assert_close(ref.double(), want, atol=1e-5, rtol=0)


def _inputs_nan_outside(B, T, Hq, Hkv, S, D, seqlens, leftpad, seed=0, dtype=torch.bfloat16):
    """q, k, v, lengths, leftpad, and copies of k and v with NaN before each sequence's first key and past its
    length."""
    q, k, v, sl = make_inputs(B, T, Hq, Hkv, S, D, dtype=dtype, device=DEVICE, seqlens=seqlens, seed=seed)
    lp = torch.tensor(leftpad, dtype=torch.int32, device=DEVICE)
    k_nan, v_nan = k.clone(), v.clone()
    for b, (n, start) in enumerate(zip(seqlens, leftpad)):
        for t in (k_nan, v_nan):
            t[b, :max(start, 0)] = float("nan")
            t[b, n:] = float("nan")
    return q, k, v, sl, lp, k_nan, v_nan


def _check(backend, q, k, v, sl, k_in, v_in, what="", block_table=None, **kw):
    out = torch.full(q.shape, float("nan"), dtype=q.dtype, device=q.device)
    res, lse = fmha.attention(q, k_in, v_in, sl, return_lse=True, backend=backend, out=out, block_table=block_table,
                              **kw)
    assert res.data_ptr() == out.data_ptr()
    ref, ref_lse = attention_reference(q, k, v, sl, q.shape[-1] ** -0.5, kw.get("causal", True),
                                       sinks=kw.get("sinks"), window_size=kw.get("window_size", (-1, -1)),
                                       softcap=kw.get("softcap", 0.0), cache_leftpad=kw.get("cache_leftpad"))
    compare(out, lse, ref, ref_lse, q.dtype, vmax=v.float().abs().max().item(), what=f"{backend} {what}")
    return out, lse


@pytest.mark.parametrize("backend", ["reference", "triton"])
@pytest.mark.parametrize("T,Hq,Hkv,S,D,seqlens,leftpad,softcap,window", [
    (1, 8, 2, 129, 128, [129, 7, 1, 0], [0, 0, 0, 0], 5.0, (-1, -1)),     # softcap alone
    (3, 28, 4, 129, 64, [129, 20, 70], [64, 0, 69], 0.0, (-1, -1)),       # leftpad alone: T = 3, GQA 28/4
    (1, 4, 1, 1000, 128, [1000, 999, 5], [900, 0, 5], 30.0, (-1, -1)),    # start mid-cache; start == length
    (2, 8, 2, 129, 64, [129, 40], [3, 50], 2.0, (16, -1)),                # both, a window, leftpad past length
    (1, 16, 1, 200, 576, [200, 33], [17, 0], 10.0, (-1, -1)),             # DeepSeek's latent shapes
])
def test_triton_against_the_reference(backend, T, Hq, Hkv, S, D, seqlens, leftpad, softcap, window):
    q, k, v, sl, lp, k_nan, v_nan = _inputs_nan_outside(len(seqlens), T, Hq, Hkv, S, D, seqlens, leftpad, seed=S + T)
    q = q * 3  # large scores: the cap binds
    if D == 576:  # v: k's first 512 columns, here a tensor of its own
        v, v_nan = k[..., :512].contiguous(), k_nan[..., :512].contiguous()
        q = q.clone()
    kw = dict(softcap=softcap, cache_leftpad=lp if any(leftpad) else None, window_size=window, causal=True)
    out = torch.full((*q.shape[:3], v.shape[-1]), float("nan"), dtype=q.dtype, device=q.device)
    res, lse = fmha.attention(q, k_nan, v_nan, sl, return_lse=True, backend=backend, out=out, **kw)
    ref, ref_lse = attention_reference(q, k, v, sl, D ** -0.5, True, softcap=softcap, cache_leftpad=kw["cache_leftpad"],
                                       window_size=window)
    compare(out, lse, ref, ref_lse, q.dtype, vmax=v.float().abs().max().item(), what=f"{backend}")


@pytest.mark.parametrize("num_splits", [2, 5])
def test_triton_split(num_splits):
    from fmha.triton.decode import decode_attention

    q, k, v, sl, lp, k_nan, v_nan = _inputs_nan_outside(3, 2, 8, 2, 400, 128, [400, 0, 170], [150, 0, 3],
                                                         seed=num_splits)
    p = validate(q, k_nan, v_nan, sl, None, True, None, softcap=4.0, cache_leftpad=lp)
    out = torch.full(q.shape, float("nan"), dtype=q.dtype, device=DEVICE)
    lse = torch.full((3, 8, 2), float("nan"), device=DEVICE)
    assert decode_attention(p, q * 1, k_nan, v_nan, sl, out, lse, num_splits=num_splits, cache_leftpad=lp) > 1
    ref, ref_lse = attention_reference(q, k, v, sl, p.softmax_scale, True, softcap=4.0, cache_leftpad=lp)
    compare(out, lse, ref, ref_lse, q.dtype, vmax=v.abs().max().item(), what=f"splits={num_splits}")


@pytest.mark.parametrize("page_size", [16, 5])
def test_triton_leftpad_paged(page_size):
    q, k, v, sl = make_inputs(3, 2, 8, 2, 130, 64, device=DEVICE, seqlens=[130, 2, 77], seed=page_size)
    lp = torch.tensor([33, 1, 70], dtype=torch.int32, device=DEVICE)
    k_pool, v_pool, table = make_paged(k, v, page_size, sl, seed=page_size)
    _check("triton", q, k, v, sl, k_pool, v_pool, block_table=table, what=f"page={page_size}", cache_leftpad=lp,
           softcap=7.0)


def test_with_sinks_an_empty_row_is_the_sink():
    q, k, v, sl, lp, k_nan, v_nan = _inputs_nan_outside(2, 1, 16, 2, 64, 64, [64, 10], [0, 10])
    sinks = torch.linspace(-2.0, 2.0, 16, device=DEVICE)
    for backend in ("reference", "triton"):
        out, lse = _check(backend, q, k, v, sl, k_nan, v_nan, sinks=sinks, cache_leftpad=lp, softcap=3.0, what="sinks")
        assert (out[1] == 0).all()
        torch.testing.assert_close(lse[1, :, 0], sinks, atol=1e-5, rtol=0)


def test_the_call_keys_on_softcap_and_leftpad():
    """The memoised checks and decisions: the same tensors with another cap, or with left padding, differ."""
    q, k, v, sl = make_inputs(1, 1, 4, 1, 64, 64, device=DEVICE, seqlens=[64])
    q = q * 4
    a = fmha.attention(q, k, v, sl, backend="reference", softcap=1.0)
    b = fmha.attention(q, k, v, sl, backend="reference", softcap=2.0)
    c = fmha.attention(q, k, v, sl, backend="reference", softcap=2.0,
                       cache_leftpad=torch.tensor([32], dtype=torch.int32, device=DEVICE))
    assert not torch.equal(a, b) and not torch.equal(b, c)
    assert torch.equal(b, fmha.attention(q, k, v, sl, backend="reference", softcap=2.0))


@pytest.mark.parametrize("kwargs,error,match", [
    (dict(softcap=-1.0), ValueError, r"softcap: expected a finite real number >= 0 \(0.0: no cap\), got -1.0"),
    (dict(softcap=float("inf")), ValueError, r"softcap: expected a finite real number >= 0"),
    (dict(softcap=True), TypeError, r"softcap: expected a real number >= 0 \(0.0: no cap\), got bool True"),
    (dict(softcap="30"), TypeError, r"softcap: expected a real number"),
    (dict(softcap=1e6), ValueError, r"softcap: got 1e\+06; expected 0.0 \(no cap\) or a cap in \[1e-37, 1e\+04\]"),
    (dict(softcap=1e-40), ValueError, r"softcap: got 1e-40; expected 0.0 \(no cap\) or a cap in"),
    (dict(softcap=10 ** 400), ValueError, r"softcap: got 1000000000000000\.\.\.00000000 \(401 characters\), beyond a "
                                          r"float; expected 0\.0 \(no cap\) or a cap of at most 1e\+04"),
    (dict(softcap=0.1, softmax_scale=1e38), ValueError, r"softcap: softmax_scale / softcap = 1e\+38 / 0.1 = 1e\+39"),
    (dict(cache_leftpad=torch.zeros(2, dtype=torch.int64)), TypeError, r"cache_leftpad: dtype torch.int64"),
    (dict(cache_leftpad=torch.zeros(3, dtype=torch.int32)), ValueError, r"cache_leftpad: expected shape \[2\]"),
    (dict(cache_leftpad=[0, 0]), TypeError, r"cache_leftpad: expected an int32 tensor of shape \[2\] or None"),
    (dict(cache_leftpad=torch.zeros(2, dtype=torch.int32, device="meta")), ValueError,
     r"cache_leftpad: on device meta but q is on"),
])
def test_bad_arguments_are_named(kwargs, error, match):
    q, k, v, sl = make_inputs(2, 1, 4, 1, 16, 64, device=DEVICE, seqlens=[16, 3])
    with pytest.raises(error, match=match):
        fmha.attention(q, k, v, sl, backend="reference", **kwargs)
    with pytest.raises(error, match=match):
        fmha.flash_attn_with_kvcache(q, k, v, cache_seqlens=sl, backend="reference", **kwargs)


def test_an_out_over_cache_leftpad_is_refused():
    q, k, v, sl = make_inputs(1, 1, 4, 1, 16, 64, device=DEVICE, seqlens=[16])
    buf = torch.zeros(1, 1, 4, 64, dtype=q.dtype, device=DEVICE)
    with pytest.raises(ValueError, match=r"out: its memory .* overlaps cache_leftpad's"):
        fmha.attention(q, k, v, sl, backend="reference", out=buf, cache_leftpad=buf.view(torch.int32)[0, 0, 0, :1])


def test_the_cuda_kernels_refuse_both(monkeypatch):
    from fmha.backends import registry
    from fmha.cuda import backend as cb

    q, k, v, sl = make_inputs(1, 1, 4, 1, 16, 64, device=DEVICE, seqlens=[16])
    p = dataclasses.replace(validate(q, k, v, sl), device=torch.device("cuda", 0))  # (as if on a GPU)
    cap = registry()["cuda"].capability  # (read before the patch: it may ask _capability itself)
    monkeypatch.setattr(cb, "_capability", lambda index: cap)
    cuda = registry()["cuda"]
    assert cuda.unsupported_reason(dataclasses.replace(p, softcap=30.0)).startswith("softcap 30: the CUDA kernels")
    assert cuda.unsupported_reason(dataclasses.replace(p, has_leftpad=True)).startswith("cache_leftpad: the CUDA")
    assert "softcap=30 leftpad" in dataclasses.replace(p, softcap=30.0, has_leftpad=True).describe()


def test_flash_attn_with_kvcache_takes_both():
    """FlashAttention's arguments: new tokens written at cache_seqlens (absolute), keys [leftpad, cache_seqlens +
    T_new) attended, scores capped."""
    q, k_cache, v_cache, _ = make_inputs(2, 2, 4, 1, 24, 64, device=DEVICE)
    _, k_new, v_new, _ = make_inputs(2, 2, 4, 1, 2, 64, device=DEVICE, seed=5)
    sl = torch.tensor([10, 3], dtype=torch.int32, device=DEVICE)
    lp = torch.tensor([4, 0], dtype=torch.int32, device=DEVICE)
    want_k, want_v = k_cache.clone(), v_cache.clone()
    for b, n in enumerate(sl.tolist()):
        want_k[b, n:n + 2], want_v[b, n:n + 2] = k_new[b], v_new[b]
    out, lse = fmha.flash_attn_with_kvcache(q * 3, k_cache, v_cache, k_new, v_new, cache_seqlens=sl, cache_leftpad=lp,
                                            causal=True, softcap=5.0, return_softmax_lse=True, backend="reference")
    assert torch.equal(k_cache, want_k) and torch.equal(v_cache, want_v)
    ref, ref_lse = attention_reference(q * 3, want_k, want_v, sl + 2, 64 ** -0.5, True, softcap=5.0, cache_leftpad=lp)
    compare(out, lse, ref, ref_lse, q.dtype, vmax=want_v.float().abs().max().item(), what="compat")


def test_torch_compile_fullgraph_with_both():
    q, k, v, sl = make_inputs(2, 2, 8, 2, 40, 64, device=DEVICE, seqlens=[40, 17])
    lp = torch.tensor([3, 5], dtype=torch.int32, device=DEVICE)

    def call(q, k, v, sl, lp):
        return fmha.attention(q * 3, k, v, sl, softcap=4.0, cache_leftpad=lp, window_size=(9, 0), backend="reference")

    with torch.no_grad():
        torch.testing.assert_close(torch.compile(call, fullgraph=True)(q, k, v, sl, lp), call(q, k, v, sl, lp), atol=0,
                                   rtol=0)


def test_compare_takes_the_options_and_counts_the_keys_read():
    """fmha.compare runs each backend with the window, cap and left padding; its byte count covers the keys each
    sequence reads (from its start, within the window)."""
    from fmha.compare import compare as fmha_compare

    q, k, v, sl = make_inputs(2, 1, 8, 2, 40, 64, device=DEVICE, seqlens=[40, 17])
    lp = torch.tensor([3, 15], dtype=torch.int32, device=DEVICE)
    seen = {}
    p0 = validate(q, k, v, sl)
    orig = type(p0).bytes_moved

    def spy(self, kv_tokens=None):
        seen["kv_tokens"] = kv_tokens
        return orig(self, kv_tokens)

    import unittest.mock
    with unittest.mock.patch.object(type(p0), "bytes_moved", spy):
        report = fmha_compare(q, k, v, sl, cache_leftpad=lp, softcap=2.0, window_size=(8, -1), backends=["reference"],
                              timing=False)
    assert report.results[0].status == "ok", report
    assert seen["kv_tokens"] == min(40 - 3, 8 + 1) + min(17 - 15, 8 + 1)  # 9 + 2
