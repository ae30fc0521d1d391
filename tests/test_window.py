"""Sliding windows (`window_size=(left, right)`, FlashAttention's): the reference's mask against the definition,
the Triton kernel against the reference with NaN in every key outside the windows (and past the lengths), split,
paged, with sinks (gpt-oss's sliding layers), and the checks; the CUDA kernels refuse windows, so `auto` takes
Triton."""
import pytest
import torch

import fmha
from conftest import DEVICE, HAS_GPU
from _util import compare, has_cuda_kernel, make_inputs, make_paged, on_gpu, poisoned_out
from fmha.problem import validate
from fmha.reference import attention_reference, visible_mask


def _visible(L, T, S, causal, left, right):
    """The definition, one query and key at a time: query t sits at position i = L - T + t; key j is visible where
    j < L, j <= i where causal, and i - left <= j <= i + right for each bound given (-1: none)."""
    want = torch.zeros(T, S, dtype=torch.bool)
    for t in range(T):
        i = L - T + t
        for j in range(S):
            want[t, j] = (j < L and (not causal or j <= i) and (left < 0 or j >= i - left)
                          and (right < 0 or j <= i + right))
    return want


@pytest.mark.parametrize("causal,left,right", [(True, 0, -1), (True, 3, -1), (True, 40, -1), (False, 2, 1),
                                               (False, -1, 0), (False, 5, -1), (False, 0, 0), (True, -1, -1)])
def test_reference_mask_is_the_definition(causal, left, right):
    T, S = 3, 12
    seqlens = torch.tensor([12, 7, 2, 0], dtype=torch.int32)
    mask = visible_mask(seqlens, T, S, causal, left, right)
    for b, L in enumerate(seqlens.tolist()):
        assert torch.equal(mask[b], _visible(L, T, S, causal, left, right)), (b, L)


def _window_inputs(B, T, Hq, Hkv, S, D, seqlens, window, causal, dtype=torch.bfloat16, seed=0):
    """q, k, v, lengths, and copies of k and v with NaN in every key no query of its sequence sees (past the
    length and outside every row's window), which no backend may read into a result."""
    q, k, v, sl = make_inputs(B, T, Hq, Hkv, S, D, dtype=dtype, device=DEVICE, seqlens=seqlens, seed=seed)
    seen = visible_mask(sl, T, S, causal, *window).any(1)  # [B, S]: keys some query sees
    k_nan, v_nan = k.clone(), v.clone()
    k_nan[~seen] = float("nan")
    v_nan[~seen] = float("nan")
    return q, k, v, sl, k_nan, v_nan


def _check(backend, q, k, v, sl, k_in, v_in, window, causal, sinks=None, block_table=None, what=""):
    out = torch.full((*q.shape[:3], v.shape[-1]), float("nan"), dtype=q.dtype, device=q.device)
    res, lse = fmha.attention(q, k_in, v_in, sl, causal=causal, window_size=window, return_lse=True,
                              backend=backend, out=out, sinks=sinks, block_table=block_table)
    assert res.data_ptr() == out.data_ptr()
    ref, ref_lse = attention_reference(q, k, v, sl, q.shape[-1] ** -0.5, causal, sinks=sinks, window_size=window)
    compare(out, lse, ref, ref_lse, q.dtype, vmax=v.float().abs().max().item(), what=f"{backend} {what}")
    return out, lse


BACKENDS = ["reference", "triton"]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("T,Hq,Hkv,S,D,seqlens,window,causal", [
    (1, 8, 2, 129, 128, [129, 7, 1, 0], (16, -1), True),       # plain decode, GQA, awkward lengths
    (3, 28, 4, 129, 64, [129, 2, 70], (5, 0), True),          # T = 3, GQA 28/4: rows of one block differ
    (3, 8, 8, 7, 64, [7, 3], (0, -1), True),                  # each query sees its own key only
    (1, 4, 1, 1000, 128, [1000, 999, 0], (100, -1), True),    # the window starts mid-cache (program start)
    (2, 8, 2, 129, 64, [129, 64], (200, -1), True),           # a window wider than the cache: whole cache
    (3, 8, 2, 129, 64, [129, 40], (4, 2), False),             # both sides, not causal
    (2, 8, 2, 129, 64, [129, 40], (-1, 1), False),            # a right bound only (binds nothing at T = 2)
    (4, 8, 2, 129, 64, [129, 40], (3, 0), False),             # right bounds that bind: T - 1 > right
    (4, 8, 2, 129, 64, [129, 2], (2, 1), False),
    (3, 8, 2, 129, 64, [129, 40], (5, -1), False),            # a left bound only, not causal
    (3, 48, 2, 129, 64, [129, 50], (7, 0), True),             # 72 packed rows: two row blocks
    (1, 16, 1, 200, 576, [200, 33], (50, -1), True),          # DeepSeek's latent (V = K[..., :512])
])
def test_window_against_the_reference(backend, T, Hq, Hkv, S, D, seqlens, window, causal):
    q, k, v, sl, k_nan, v_nan = _window_inputs(len(seqlens), T, Hq, Hkv, S, D, seqlens, window, causal, seed=S + T)
    if D == 576:  # the shared latent: v is the first 512 columns of k
        v, v_nan = k[..., :512], k_nan[..., :512]
    _check(backend, q, k, v, sl, k_nan, v_nan, window, causal, what=f"window={window}")


@pytest.mark.parametrize("num_splits", [2, 3, 7])
@pytest.mark.parametrize("window,causal", [((37, -1), True), ((10, 3), False), ((9, 0), False), ((-1, 1), False)])
def test_triton_window_split(num_splits, window, causal):
    """Splits cover the window's span from the tile of its lowest key (some of them empty), merged by the combine
    kernel."""
    from fmha.triton.decode import decode_attention

    q, k, v, sl, k_nan, v_nan = _window_inputs(3, 3, 8, 2, 400, 128, [400, 0, 170], window, causal, seed=num_splits)
    p = validate(q, k_nan, v_nan, sl, None, causal, None, window_size=window)
    out = poisoned_out(q)
    lse = torch.full((3, 8, 3), float("nan"), device=DEVICE)
    assert decode_attention(p, q, k_nan, v_nan, sl, out, lse, num_splits=num_splits) > 1
    ref, ref_lse = attention_reference(q, k, v, sl, p.softmax_scale, causal, window_size=window)
    compare(out, lse, ref, ref_lse, q.dtype, vmax=v.abs().max().item(), what=f"splits={num_splits}")


@pytest.mark.parametrize("page_size", [64, 16, 5])  # one page id per tile (PAGED = 2: pages of BLOCK_N = 64), one a key
def test_triton_window_paged(page_size):
    """The pools hold NaN in every key outside the windows as well as past the lengths; a window's first tile is
    rounded down to a tile, which lies inside one page where pages are a multiple of it."""
    from fmha.triton.decode import paged_mode

    q, k, v, sl, k_nan, v_nan = _window_inputs(3, 2, 8, 2, 130, 64, [130, 1, 77], (20, -1), True, seed=page_size)
    k_pool, v_pool, table = make_paged(k_nan, v_nan, page_size, sl, seed=page_size)
    p = validate(q, k_pool, v_pool, sl, block_table=table, window_size=(20, -1))
    assert paged_mode(p, 64) == (2 if page_size == 64 else 1)
    _check("triton", q, k, v, sl, k_pool, v_pool, (20, -1), True, block_table=table, what=f"page={page_size}")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_window_with_sinks(dtype):
    """gpt-oss's sliding layers: a 16-key window and one sink per head; an empty sequence gives zeros and the sink."""
    q, k, v, sl, k_nan, v_nan = _window_inputs(3, 1, 16, 2, 129, 64, [129, 0, 20], (16, -1), True, dtype=dtype)
    sinks = torch.linspace(-3.0, 3.0, 16, device=DEVICE)
    for backend in BACKENDS:
        out, lse = _check(backend, q, k, v, sl, k_nan, v_nan, (16, -1), True, sinks=sinks, what="sinks")
        assert (out[1] == 0).all()
        torch.testing.assert_close(lse[1, :, 0], sinks, atol=1e-5, rtol=0)  # (the kernel's log2 domain rounds)


def test_triton_window_with_sinks_split():
    """Sinks join in the combine kernel, over splits some of which the window leaves empty."""
    from fmha.triton.decode import decode_attention

    q, k, v, sl, k_nan, v_nan = _window_inputs(3, 2, 16, 2, 300, 64, [300, 0, 90], (150, -1), True, seed=3)
    sinks = torch.linspace(-3.0, 3.0, 16, device=DEVICE)
    p = validate(q, k_nan, v_nan, sl, sinks=sinks, window_size=(150, -1))
    out = torch.full(q.shape, float("nan"), dtype=q.dtype, device=DEVICE)
    lse = torch.full((3, 16, 2), float("nan"), device=DEVICE)
    assert decode_attention(p, q, k_nan, v_nan, sl, out, lse, num_splits=3, sinks=sinks) == 3
    ref, ref_lse = attention_reference(q, k, v, sl, p.softmax_scale, True, sinks=sinks, window_size=(150, -1))
    compare(out, lse, ref, ref_lse, q.dtype, vmax=v.abs().max().item(), what="sinks, 3 splits")


def test_windows_that_bound_nothing_are_no_window():
    """A side that cannot exclude a key is no bound (left >= S - 1, right >= T - 1), whatever its size: the Problem
    has no window (so the CUDA kernels may serve it) and the result is the unwindowed one."""
    q, k, v, sl = make_inputs(2, 3, 4, 1, 16, 64, device=DEVICE, seqlens=[16, 5])
    whole = fmha.attention(q, k, v, sl, backend="reference", causal=False)
    for window in ((15, -1), (2 ** 63 - 1, -1), (-1, 2), (2 ** 70, 2 ** 70)):
        p = validate(q, k, v, sl, causal=False, window_size=window)
        assert not p.has_window, (window, p)
        assert torch.equal(fmha.attention(q, k, v, sl, backend="reference", causal=False, window_size=window), whole)
    p = validate(q, k, v, sl, causal=False, window_size=(14, 1))
    assert (p.window_left, p.window_right) == (14, 1)


def test_window_is_part_of_the_call_not_remembered_across_calls():
    """The memoised checks and decisions key on the window: the same tensors with and without one differ."""
    q, k, v, sl = make_inputs(1, 1, 4, 1, 64, 64, device=DEVICE, seqlens=[64])
    whole = fmha.attention(q, k, v, sl, backend="reference")
    windowed = fmha.attention(q, k, v, sl, backend="reference", window_size=(3, -1))
    again = fmha.attention(q, k, v, sl, backend="reference")
    assert torch.equal(whole, again) and not torch.equal(whole, windowed)
    ref, _ = attention_reference(q, k, v, sl, 64 ** -0.5, True, window_size=(3, -1))
    torch.testing.assert_close(windowed.float(), ref.float(), atol=2e-2, rtol=0)


@pytest.mark.parametrize("window,causal,error,match", [
    ((4,), True, TypeError, r"window_size: expected a pair of ints \(left, right\)"),
    ((4.0, 0), True, TypeError, r"window_size: expected a pair of ints"),
    ((True, 0), True, TypeError, r"window_size: expected a pair of ints"),
    ("64", True, TypeError, r"window_size: expected a pair of ints"),
    ((-2, 0), True, ValueError, r"window_size: expected \(left, right\) each >= -1"),
    ((4, 2), True, ValueError, r"window_size: the right edge of a causal window is the diagonal; allowed right = "
                               r"-1 or 0, got \(4, 2\)"),
])
def test_bad_windows_are_named(window, causal, error, match):
    q, k, v, sl = make_inputs(1, 1, 4, 1, 16, 64, device=DEVICE, seqlens=[16])
    with pytest.raises(error, match=match):
        fmha.attention(q, k, v, sl, causal=causal, window_size=window, backend="reference")
    with pytest.raises(error, match=match):
        fmha.explain(q, k, v, sl, causal=causal, window_size=window)


def test_the_cuda_kernels_refuse_windows_so_auto_takes_triton(monkeypatch):
    """A windowed problem is unsupported by the cuda backend (its kernels attend to every key up to the length), so
    `auto` never sends one there; describe() names the window."""
    from fmha.backends import registry
    from fmha.cuda import backend as cb

    import dataclasses

    q, k, v, sl = make_inputs(1, 1, 4, 1, 16, 64, device=DEVICE, seqlens=[16])
    p = validate(q, k, v, sl, window_size=(8, -1))
    assert p.has_window and "window=(8, -1)" in p.describe()
    p = dataclasses.replace(p, device=torch.device("cuda", 0))  # (as if on a GPU the kernel is built for)
    cap = registry()["cuda"].capability  # (read before the patch: it may ask _capability itself)
    monkeypatch.setattr(cb, "_capability", lambda index: cap)
    why = registry()["cuda"].unsupported_reason(p)
    assert why is not None and why.startswith("sliding window (8, -1): the CUDA kernels attend to every key"), why
    assert "window" not in str(registry()["cuda"].unsupported_reason(dataclasses.replace(p, window_left=-1)))


def test_torch_compile_fullgraph_with_a_window():
    q, k, v, sl = make_inputs(2, 2, 8, 2, 40, 64, device=DEVICE, seqlens=[40, 9])

    def call(q, k, v, sl):
        return fmha.attention(q, k, v, sl, window_size=(6, 0), backend="reference")

    with torch.no_grad():
        torch.testing.assert_close(torch.compile(call, fullgraph=True)(q, k, v, sl), call(q, k, v, sl), atol=0, rtol=0)


def test_auto_plans_triton_for_a_window_where_cuda_is_present(cuda_as_if_present):
    """The plan on any machine: a sliding window on a GPU goes to Triton, and cuda's reason names the window."""
    from fmha.dispatch import decide
    q, k, v, sl = make_inputs(4, 1, 32, 8, 64, 128, seqlens=[64, 10, 1, 0])
    d = decide(on_gpu(validate(q, k, v, sl, window_size=(16, -1))), "auto")
    assert d.backend == "triton" and "sliding window" in dict(d.considered)["cuda"], d


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_GPU, reason="needs a CUDA GPU")
def test_auto_takes_triton_for_a_window_on_the_gpu():
    q, k, v, sl, k_nan, v_nan = _window_inputs(4, 1, 32, 8, 4096, 128, [4096, 100, 1, 0], (128, -1), True)
    d = fmha.explain(q, k_nan, v_nan, sl, window_size=(128, -1))
    assert d.backend == "triton", str(d)
    if has_cuda_kernel():
        assert "sliding window" in dict(d.considered)["cuda"]
    _check("auto", q, k, v, sl, k_nan, v_nan, (128, -1), True, what="auto")
