"""Bad input raises a clear error before any kernel runs."""
import pytest
import torch

import fmha

bf16 = torch.bfloat16


def good(B=2, T=1, Hq=8, Hkv=2, S=16, D=64, dtype=bf16):
    return (torch.randn(B, T, Hq, D, dtype=dtype), torch.randn(B, S, Hkv, D, dtype=dtype),
            torch.randn(B, S, Hkv, D, dtype=dtype))


def raises(exc, match, *args, **kwargs):
    with pytest.raises(exc, match=match):
        fmha.attention(*args, **kwargs)


def test_wrong_rank():
    q, k, v = good()
    raises(ValueError, r"q: expected a 4-D tensor .* got 3-D", q[0], k, v)
    raises(ValueError, r"k_cache: expected a 4-D tensor .* got 5-D", q, k[None], v)


def test_sparse_tensor_named_by_its_layout():
    q, k, v = good()
    raises(TypeError, r"q: layout torch.sparse_coo is not allowed; expected a dense \(torch.strided\) tensor",
           q.to_sparse(), k, v)


def test_dtype_not_supported():
    q, k, v = good()
    raises(TypeError, r"q: dtype torch.float32 is not supported; allowed: torch.bfloat16, torch.float16",
           q.float(), k, v)


def test_mixed_dtypes():
    q, k, v = good()
    raises(TypeError, r"v_cache: dtype torch.float16 differs from q's torch.bfloat16", q, k, v.half())


def test_different_devices():
    q, k, v = good()
    raises(ValueError, r"k_cache: on device meta but q is on cpu", q, k.to("meta"), v)  # (meta: a second device)
    raises(ValueError, r"v_cache: on device meta but q is on cpu", q, k, v.to("meta"))
    if torch.cuda.is_available():
        raises(ValueError, r"k_cache: on device cuda:0 but q is on cpu", q, k.cuda(), v)


def test_not_divisible_heads():
    q, k, v = good(Hq=6, Hkv=4)
    raises(ValueError, r"q: Hq=6 query heads is not a multiple of k_cache's Hkv=4", q, k, v)


def test_unsupported_head_dim():
    q, k, v = good(D=96)
    raises(ValueError, r"q: head_dim 96 is not supported; allowed: 64, 128, 256, 512", q, k, v)


def test_kv_shape_mismatch():
    q, k, v = good()
    raises(ValueError, r"v_cache: shape \[2, 8, 2, 64\] differs from k_cache's \[2, 16, 2, 64\]", q, k, v[:, :8])
    raises(ValueError, r"k_cache: batch 1 differs from q's batch 2", q, k[:1], v[:1])
    raises(ValueError, r"k_cache: head_dim 128 differs from q's head_dim 64", q,
           torch.randn(2, 16, 2, 128, dtype=bf16), torch.randn(2, 16, 2, 128, dtype=bf16))


def test_last_stride_not_one():
    q, k, v = good()
    k_t = torch.randn(2, 16, 64, 2, dtype=bf16).transpose(-1, -2)  # [2, 16, 2, 64], stride(-1) = 2
    raises(ValueError, r"k_cache: the last \(head_dim\) dimension must be contiguous \(stride\(-1\) == 1\)",
           q, k_t, v)


def test_cache_seqlens_checks():
    q, k, v = good()
    raises(TypeError, r"cache_seqlens: dtype torch.int64 is not allowed; expected torch.int32",
           q, k, v, torch.tensor([1, 2]))
    raises(ValueError, r"cache_seqlens: expected shape \[2\] .* got \[3\]",
           q, k, v, torch.tensor([1, 2, 3], dtype=torch.int32))
    raises(TypeError, r"cache_seqlens: expected an int32 tensor of shape \[2\] or None, got list",
           q, k, v, [1, 2])


def test_cache_seqlens_device():
    q, k, v = good()
    raises(ValueError, r"cache_seqlens: on device meta but q is on cpu", q, k, v,
           torch.tensor([1, 2], dtype=torch.int32, device="meta"))
    if torch.cuda.is_available():
        q, k, v = q.cuda(), k.cuda(), v.cuda()
        raises(ValueError, r"cache_seqlens: on device cpu but q is on cuda:0", q, k, v,
               torch.tensor([1, 2], dtype=torch.int32))


def test_out_checks():
    q, k, v = good()
    raises(ValueError, r"out: expected shape \[2, 1, 8, 64\] \(q's shape\), got \[2, 1, 8, 32\]",
           q, k, v, out=torch.empty(2, 1, 8, 32, dtype=bf16))
    raises(TypeError, r"out: dtype torch.float16 differs from q's torch.bfloat16",
           q, k, v, out=torch.empty(2, 1, 8, 64, dtype=torch.float16))


def test_out_whose_elements_share_memory_is_refused():
    """An expanded (zero-stride) or overlapping `out` would make outputs overwrite each other: refused."""
    q, k, v = good()
    raises(ValueError, r"out: strides \(0, 64, 0, 1\) for shape \[2, 1, 8, 64\] make several output elements share "
           r"memory", q, k, v, out=torch.empty(1, 1, 1, 64, dtype=bf16).expand(2, 1, 8, 64))
    overlapping = torch.empty(2 * 8 * 64, dtype=bf16).as_strided((2, 1, 8, 64), (8 * 64, 8 * 64, 32, 1))
    raises(ValueError, r"out: strides .* make several output elements share memory", q, k, v, out=overlapping)
    wider = torch.empty(2, 1, 9, 64, dtype=bf16)[:, :, 1:]  # distinct elements, strided: accepted
    fmha.attention(q, k, v, out=wider, backend="reference")
    stepped = torch.empty(2, 1, 15, 64, dtype=bf16)[:, :, ::2]  # strides (960, 960, 128, 1): distinct, accepted
    fmha.attention(q, k, v, out=stepped, backend="reference")


def test_unknown_backend_lists_valid_names():
    q, k, v = good()
    with pytest.raises(ValueError, match=r"backend: unknown backend 'flash'; valid names: auto, .*triton.*reference"):
        fmha.attention(q, k, v, backend="flash")


def test_unknown_backend_in_environment(monkeypatch):
    q, k, v = good()
    monkeypatch.setenv("FMHA_BACKEND", "nope")
    with pytest.raises(ValueError, match=r"environment variable FMHA_BACKEND: unknown backend 'nope'"):
        fmha.attention(q, k, v)


def test_bad_softmax_scale():
    q, k, v = good()
    raises(ValueError, r"softmax_scale: expected a finite positive float, got -1.0", q, k, v, softmax_scale=-1.0)


@pytest.mark.parametrize("scale,got", (("0.1", "str '0.1'"), (True, "bool True"), (False, "bool False"),
                                       (1j, "complex 1j"), ([0.1], "list \\[0.1\\]")))
def test_softmax_scale_must_be_a_real_number(scale, got):
    q, k, v = good()
    raises(TypeError, r"softmax_scale: expected a real number \(a Python float or int; a bool is not one\) or None, "
           f"got {got}", q, k, v, softmax_scale=scale)
    with pytest.raises(TypeError, match=r"scale: expected a real number"):  # sdpa names its own argument
        fmha.sdpa(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), scale=scale, enable_gqa=True)


@pytest.mark.parametrize("scale,says", (
    (10 ** 400, r"got 1000000000000000\.\.\.00000000 \(401 characters\), beyond a float"),
    (1e300, "must lie in"), (1e-300, "must lie in"), (2e38, "must lie in")))
def test_softmax_scale_must_stay_a_float32_scale(scale, says):
    """The kernels multiply the scores by softmax_scale * log2(e) in float32: a scale whose product is not a
    normal float32 (or that is no float at all) is refused, not turned into NaN."""
    q, k, v = good()
    raises(ValueError, f"softmax_scale: .*{says}", q, k, v, softmax_scale=scale, backend="reference")


def test_nested_and_sparse_tensors_are_named():
    q, k, v = good()
    nested = torch.nested.nested_tensor([q[0], q[1]])
    raises(TypeError, r"q: a nested tensor is not allowed", nested, k, v)
    lengths = torch.nested.nested_tensor([torch.tensor([3], dtype=torch.int32), torch.tensor([5], dtype=torch.int32)])
    raises(TypeError, r"cache_seqlens: a nested tensor is not allowed", q, k, v, lengths)
    raises(TypeError, r"out: layout torch.sparse_coo is not allowed", q, k, v, out=torch.zeros(2, 1, 8, 64,
           dtype=bf16).to_sparse(), backend="reference")
    for name, args in (("query", (q.transpose(1, 2).to_sparse(), k, k)),
                       ("key", (q.transpose(1, 2), torch.nested.nested_tensor([k[0], k[1]]), k))):
        with pytest.raises(TypeError, match=name + r": (layout torch.sparse_coo|a nested tensor) is not allowed"):
            fmha.sdpa(*args, enable_gqa=True)


@pytest.mark.parametrize("backend", ["auto", "reference"])
def test_out_made_under_inference_mode_is_refused_outside_it(backend):
    """torch forbids writing an inference tensor in place outside inference mode: refused by name before any
    kernel (and by explain), accepted inside the mode."""
    q, k, v = good()
    with torch.inference_mode():
        out = torch.empty(2, 1, 8, 64, dtype=bf16)
    for _ in range(2):  # (the second call takes the memo)
        raises(ValueError, r"out: an inference tensor .* under torch.inference_mode\(\)", q, k, v, out=out,
               backend=backend)
    with pytest.raises(ValueError, match=r"out: an inference tensor"):
        fmha.explain(q, k, v, out=out, backend=backend)
    with torch.inference_mode():
        assert fmha.attention(q, k, v, out=out, backend=backend) is out


def test_softmax_scale_accepts_real_numbers():
    import fractions

    import numpy as np

    q, k, v = good()
    ref = fmha.attention(q, k, v, softmax_scale=0.5, backend="reference")
    for scale in (0.5, np.float32(0.5), np.float64(0.5), fractions.Fraction(1, 2)):
        assert torch.equal(fmha.attention(q, k, v, softmax_scale=scale, backend="reference"), ref)
    fmha.attention(q, k, v, softmax_scale=1, backend="reference")  # an int


def test_sdpa_adds_the_layout_note_only_to_errors_with_shapes():
    q = torch.randn(1, 8, 1, 64, dtype=bf16)
    k = torch.randn(1, 2, 16, 64, dtype=bf16)
    with pytest.raises(TypeError) as e:
        fmha.sdpa(q, k, k, scale="0.1", enable_gqa=True)
    assert "shapes above" not in str(e.value), str(e.value)
    with pytest.raises(ValueError) as e:
        fmha.sdpa(q, k, k, scale=-1.0, enable_gqa=True)
    assert "shapes above" not in str(e.value), str(e.value)
    with pytest.raises(ValueError) as e:  # a range in brackets is no shape
        fmha.sdpa(q, k, k, scale=1e39, enable_gqa=True)
    assert "must lie in [1e-37" in str(e.value) and "shapes above" not in str(e.value), str(e.value)
    with pytest.raises(ValueError) as e:  # 6 query heads over 4 KV heads: attention's message lists shapes
        fmha.sdpa(torch.randn(1, 6, 1, 96, dtype=bf16), torch.randn(1, 4, 16, 96, dtype=bf16),
                  torch.randn(1, 4, 16, 96, dtype=bf16), enable_gqa=True)
    assert "head_dim 96" in str(e.value) and "shapes above" not in str(e.value), str(e.value)
    with pytest.raises(ValueError) as e:  # no KV head for 8 query heads: attention's message lists the shape
        fmha.sdpa(q, k[:, :0], k[:, :0], enable_gqa=True)
    assert "got shape [1, 16, 0, 64] (shapes above are in the [B, L, H, E] order" in str(e.value), str(e.value)
    with pytest.raises(ValueError, match=r"query: Hq=3 query heads is not a multiple of key's Hkv=2"):
        fmha.sdpa(torch.randn(0, 3, 1, 64, dtype=bf16), k[:0], k[:0], enable_gqa=True)  # empty, but not grouped


def test_sdpa_names_a_strided_last_dimension_in_the_callers_order():
    q = torch.randn(1, 8, 1, 64, dtype=bf16)
    k_t = torch.randn(1, 2, 64, 16, dtype=bf16).transpose(-1, -2)  # [1, 2, 16, 64], stride(-1) = 16
    with pytest.raises(ValueError, match=r"^key: the last \(E\) dimension must be contiguous \(stride\(-1\) == 1\), "
                                         r"got strides \(2048, 1024, 1, 16\) for shape \[1, 2, 16, 64\]$"):
        fmha.sdpa(q, k_t, k_t, enable_gqa=True)


def test_explicit_backend_that_cannot_serve_says_why(monkeypatch):
    if torch.cuda.is_available():
        pytest.skip("on a GPU machine the Triton backend serves CPU-less problems; covered by the CPU run")
    import fmha.backends
    from fmha.dispatch import forget_decisions
    q, k, v = good()
    # As if TRITON_INTERPRET were unset (patched, not unset: triton reads the variable once).
    monkeypatch.setattr(fmha.backends, "interpreter_enabled", lambda: False)
    forget_decisions()
    try:
        with pytest.raises(NotImplementedError,
                           match=r"backend 'triton' cannot serve B=2 T=1 Hq=8 Hkv=2 S=16 D=64 .*TRITON_INTERPRET"):
            fmha.attention(q, k, v, backend="triton")
        # auto never raises for a problem some backend serves
        assert fmha.explain(q, k, v).backend == "reference"
        fmha.attention(q, k, v)
    finally:
        forget_decisions()


def test_sdpa_rejects_what_it_cannot_honour():
    q = torch.randn(1, 8, 1, 64, dtype=bf16)
    k = torch.randn(1, 2, 16, 64, dtype=bf16)
    with pytest.raises(ValueError, match=r"attn_mask: fmha.sdpa does not take an explicit mask"):
        fmha.sdpa(q, k, k, attn_mask=torch.ones(1, 16, dtype=torch.bool), enable_gqa=True)
    with pytest.raises(ValueError, match=r"key: 2 heads differ from query's 8; pass enable_gqa=True"):
        fmha.sdpa(q, k, k)
    with pytest.raises(ValueError, match=r"is_causal: SDPA's causal mask is top-left aligned"):
        fmha.sdpa(q, k, k, is_causal=True, enable_gqa=True)
    with pytest.raises(ValueError, match=r"dropout_p: got 0.1"):
        fmha.sdpa(q, k, k, dropout_p=0.1, enable_gqa=True)
    with pytest.raises(TypeError, match=r"dropout_p: expected a float, got Tensor"):
        fmha.sdpa(q, k, k, dropout_p=torch.tensor(0.0), enable_gqa=True)
    with pytest.raises(TypeError, match=r"is_causal: expected a bool, got 'yes'"):
        fmha.sdpa(q, k, k, is_causal="yes", enable_gqa=True)
    with pytest.raises(TypeError, match=r"enable_gqa: expected a bool, got 1"):
        fmha.sdpa(q, k, k, enable_gqa=1)
    with pytest.raises(ValueError, match=r"key: on device meta but query is on cpu"):
        fmha.sdpa(q, k.to("meta"), k.to("meta"), enable_gqa=True)
    empty = k[:, :, :0]  # (SDPA's zeros, after the same checks)
    with pytest.raises(ValueError, match=r"backend: unknown backend 'bogus'"):
        fmha.sdpa(q, empty, empty, enable_gqa=True, backend="bogus")
    with pytest.raises(ValueError, match=r"scale: expected a finite positive float, got -1.0"):
        fmha.sdpa(q, empty, empty, enable_gqa=True, scale=-1.0)
    with pytest.raises(ValueError, match=r"key: on device meta but query is on cpu"):
        fmha.sdpa(q, empty.to("meta"), empty.to("meta"), enable_gqa=True)
    with pytest.raises(ValueError, match=r"query: a lazily negated view .* pass query.resolve_neg\(\)"):
        fmha.sdpa(q._neg_view(), k, k, enable_gqa=True)


def test_sdpa_errors_name_sdpa_arguments():
    q = torch.randn(1, 8, 1, 64)  # float32
    k = torch.randn(1, 2, 16, 64)
    with pytest.raises(TypeError, match=r"query: dtype torch.float32 is not supported"):
        fmha.sdpa(q, k, k, enable_gqa=True)
    with pytest.raises(ValueError, match=r"value: shape \[1, 2, 16, 128\] differs from key's"):
        fmha.sdpa(q.bfloat16(), k.bfloat16(), torch.randn(1, 2, 16, 128, dtype=bf16), enable_gqa=True)
    with pytest.raises(TypeError, match=r"query: expected a torch.Tensor"):
        fmha.sdpa([1], k, k)


def test_requires_grad_is_refused_not_silently_dropped():
    q, k, v = good()
    q.requires_grad_()
    with pytest.raises(ValueError, match=r"q: requires_grad=True, but fmha computes no gradients"):
        fmha.attention(q, k, v)
    with torch.no_grad():
        fmha.attention(q, k, v)


def test_out_that_meets_an_input_is_refused():
    """out is written while q, k_cache and v_cache are read: an out inside their memory is refused on every
    call (data pointers are not part of the validation memo), out=q included; a buffer of its own is not."""
    q, k, v = good()
    raises(ValueError, r"out: its memory .* overlaps q's", q, k, v, out=q, backend="reference")
    base = torch.randn(2, 1, 9, 64, dtype=bf16)
    other = torch.empty(2, 1, 9, 64, dtype=bf16)  # the same metadata as base's, disjoint memory: accepted
    fmha.attention(base[:, :, :8], k, v, out=other[:, :, 1:], backend="reference")
    raises(ValueError, r"out: its memory .* overlaps q's", base[:, :, :8], k, v, out=base[:, :, 1:],
           backend="reference")  # the memoised path checks too
    kv = torch.randn(2, 16, 2, 128, dtype=bf16)  # K and V side by side in one cache, out inside its memory
    raises(ValueError, r"out: its memory .* overlaps k_cache's", q, kv[..., :64], kv[..., 64:],
           out=kv.view(-1)[:2 * 8 * 64].view(2, 1, 8, 64), backend="reference")
    with pytest.raises(ValueError, match=r"out: its memory .* overlaps q's"):
        fmha.explain(q, k, v, out=q)
    meta = [t.to("meta") for t in (q, k, v)]  # no memory, every data pointer 0: nothing to overlap
    fmha.explain(*meta, out=torch.empty(2, 1, 8, 64, dtype=bf16, device="meta"))


def test_out_that_meets_lengths_table_or_sinks_is_refused():
    """out is written while the kernels still read cache_seqlens, block_table and sinks: an out whose memory holds
    them is refused too (the Triton kernel would overwrite the lengths before every sequence read its own)."""
    q, k, v = good(Hq=4)
    buf = torch.zeros(512, dtype=bf16)
    out = buf.view(2, 1, 4, 64)
    sl = buf.view(torch.int32)[64:66]
    raises(ValueError, r"out: its memory .* overlaps cache_seqlens's", q, k, v, sl, out=out, backend="reference")
    sinks = buf.view(torch.float32)[4:8]
    raises(ValueError, r"out: its memory .* overlaps sinks's", q, k, v, out=out, sinks=sinks, backend="reference")
    pool = torch.randn(4, 8, 2, 64, dtype=bf16)
    table = buf.view(torch.int32)[:4].view(2, 2)
    table.zero_()
    raises(ValueError, r"out: its memory .* overlaps block_table's", q, pool, pool, torch.full((2,), 16,
           dtype=torch.int32), block_table=table, out=out, backend="reference")
    fmha.attention(q, k, v, torch.full((2,), 16, dtype=torch.int32), out=torch.empty_like(out), backend="reference")


def test_out_that_requires_grad_is_refused():
    """out is written in place: one that requires grad is refused under grad mode, by explain too."""
    q, k, v = good()
    out = torch.empty(2, 1, 8, 64, dtype=bf16, requires_grad=True)
    for _ in range(2):  # the second call takes the memoised path
        with pytest.raises(ValueError, match=r"out: requires_grad=True, but fmha computes no gradients"):
            fmha.attention(q, k, v, out=out, backend="reference")
    with pytest.raises(ValueError, match=r"out: requires_grad=True"):
        fmha.explain(q, k, v, out=out)
    with torch.no_grad():
        fmha.attention(q, k, v, out=out, backend="reference")


def test_explain_refuses_what_attention_refuses():
    q, k, v = good()
    with pytest.raises(ValueError, match=r"q: requires_grad=True"):
        fmha.explain(q.clone().requires_grad_(), k, v)
    with pytest.raises(TypeError, match=r"return_lse: expected a bool"):
        fmha.explain(q, k, v, return_lse="x")


def test_non_bool_flags_and_tensor_scale():
    q, k, v = good()
    raises(TypeError, r"causal: expected a bool, got 'no'", q, k, v, causal="no")
    raises(TypeError, r"return_lse: expected a bool", q, k, v, return_lse="yes")
    fmha.attention(q, k, v, causal=True, return_lse=True, backend="reference")  # memoised: 1 == True must not hit
    for flag in (1, 1.0, torch.tensor(True)):
        raises(TypeError, r"causal: expected a bool, got", q, k, v, causal=flag, backend="reference")
        raises(TypeError, r"return_lse: expected a bool, got", q, k, v, return_lse=flag, backend="reference")
    raises(TypeError, r"softmax_scale: expected a real number \(a Python float or int\) or None, got a torch.Tensor",
           q, k, v, softmax_scale=torch.tensor(0.1))
    with pytest.raises(ValueError, match=r"backend: unknown backend \['triton'\]"):
        fmha.attention(q, k, v, backend=["triton"])


def test_broadcast_kv_is_not_tma_compatible():
    from fmha.problem import validate
    q = torch.randn(2, 1, 8, 64, dtype=bf16)
    k = torch.randn(2, 16, 1, 64, dtype=bf16).expand(2, 16, 4, 64)  # stride 0 over heads
    p = validate(q, k, k)
    assert not p.aligned_16b  # the CUDA backend declines it; Triton and the reference serve it
    assert p.misalignment == "k_cache has stride 0 (0 bytes) on dim 2 of size 4"
    fmha.attention(q, k, k)
    if torch.cuda.is_available():  # the CUDA backend's refusal names it (expanded on the GPU: .cuda() would copy)
        k_gpu = torch.randn(2, 16, 1, 64, dtype=bf16, device="cuda").expand(2, 16, 4, 64)
        with pytest.raises(NotImplementedError, match=r"k_cache has stride 0 \(0 bytes\) on dim 2 of size 4: q, "):
            fmha.attention(q.cuda(), k_gpu, k_gpu, backend="cuda")
    # the first tensor at fault is named: a start off the boundary, then a stride
    buf = torch.zeros(2 * 16 * 4 * 64 + 4, dtype=bf16)
    v = buf[4:].view(2, 16, 4, 64)
    assert validate(q, v, v).misalignment == "k_cache starts 8 bytes past a 16-byte boundary"
    q_odd = torch.randn(2, 1, 8, 66, dtype=bf16)[..., :64]
    k_ok = torch.randn(2, 16, 4, 64, dtype=bf16)
    assert validate(q_odd, k_ok, k_ok).misalignment == "q has stride 66 (132 bytes) on dim 2 of size 8"


def _refused_calls():
    q, k, v = good()
    sl = torch.tensor([3, 4], dtype=torch.int32)
    meta = dict(device="meta")
    return [
        (good(B=0), {}, ValueError, r"q: every dimension of \[B, T, Hq, D\] must be >= 1, got \[0, 1, 8, 64\]"),
        (good(T=0), {}, ValueError, r"q: every dimension of \[B, T, Hq, D\] must be >= 1, got \[2, 0, 8, 64\]"),
        (good(S=0), {}, ValueError, r"k_cache: S and Hkv must be >= 1, got shape \[2, 0, 2, 64\]"),
        ((q, k, v, torch.tensor([3, 9, 4, 9], dtype=torch.int32)[::2]), {}, ValueError,
         r"cache_seqlens: must be contiguous, got stride 2"),
        ((q, k, v), dict(out=[1]), TypeError, r"out: expected a torch.Tensor \[B, T, Hq, D_v\] or None, got list"),
        ((q, k, v), dict(out=torch.empty(2, 1, 8, 128, dtype=bf16)[..., ::2]), ValueError,
         r"out: the last dimension must be contiguous \(stride\(-1\) == 1\)"),
        # another device, without a second one: meta tensors
        ((q, k, v), dict(out=torch.empty(2, 1, 8, 64, dtype=bf16, **meta)), ValueError,
         r"out: on device meta but q is on cpu"),
        ((q, k.to("meta"), v), {}, ValueError, r"k_cache: on device meta but q is on cpu"),
        ((q, k, v, sl.to("meta")), {}, ValueError, r"cache_seqlens: on device meta but q is on cpu"),
        ((q, k.view(8, 4, 2, 64), v.view(8, 4, 2, 64), sl), dict(block_table=torch.zeros(2, 4, dtype=torch.int32,
                                                                                         **meta)),
         ValueError, r"block_table: on device meta but q is on cpu"),
        ((q, k, v), dict(sinks=torch.zeros(8, **meta)), ValueError, r"sinks: on device meta but q is on cpu"),
    ]


@pytest.mark.parametrize("case", range(len(_refused_calls())))
def test_refused_before_any_backend_runs(case, monkeypatch):
    """Empty dimensions, a strided cache_seqlens, an out of the wrong kind, stride or device, and inputs on another
    device (meta tensors stand in for a second GPU) are refused by name; no backend's run is reached."""
    from fmha.backends import registry

    def must_not_run(*args, **kwargs):
        raise AssertionError("a backend ran")

    for b in registry().values():
        monkeypatch.setattr(b, "run", must_not_run)
    args, kwargs, exc, match = _refused_calls()[case]
    for backend in ("auto", "reference", "triton"):
        raises(exc, match, *args, backend=backend, **kwargs)


@pytest.mark.parametrize("which", ["q", "k_cache", "v_cache", "cache_seqlens", "sinks", "out"])
def test_lazily_negated_views_are_refused_even_after_a_memo_hit(which):
    """A tensor whose negative bit is set holds the values before the negation in memory, which the kernels would
    read: refused by name, also when the same metadata passed the checks before (the memo must not skip it)."""
    q, k, v = good(Hq=4)
    args = dict(q=q, k_cache=k, v_cache=v, cache_seqlens=torch.tensor([16, 5], dtype=torch.int32),
                sinks=torch.zeros(4), out=torch.empty_like(q))
    fmha.attention(**args, backend="reference")  # the memo's entry for this metadata
    args[which] = torch._neg_view(args[which])
    with pytest.raises(ValueError, match=rf"{which}: a lazily negated view .* pass {which}.resolve_neg\(\)"):
        fmha.attention(**args, backend="reference")


def test_a_full_memo_starts_over_instead_of_checking_every_new_shape_in_full(monkeypatch):
    """validate_cached's memo, full, is emptied and takes the new shape: its later calls hit the memo again."""
    from fmha import problem
    monkeypatch.setattr(problem, "_VALIDATED", {})
    monkeypatch.setattr(problem, "_VALIDATED_MAX", 2)
    shapes = [good(S=16), good(S=17), good(S=18)]
    for args in shapes:
        problem.validate_cached(*args)
    assert len(problem._VALIDATED) == 1
    assert problem.validate_cached(*shapes[2]) is problem.validate_cached(*shapes[2])
