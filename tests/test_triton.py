"""The Triton backend against the fp32 reference (outputs and LSE, poisoned out buffer).

On a CPU the kernels run under the Triton interpreter on a reduced grid; on a
GPU the full grid runs, including the 72-config grid of the issue.
"""
import dataclasses
import itertools

import pytest
import torch

import fmha

from conftest import DEVICE, HAS_GPU
from _util import CUDA_KERNEL_SKIP, check_backend, compare, has_cuda_kernel, make_inputs, make_problem, poisoned_out
from fmha.backends import registry
from fmha.dispatch import decide
from fmha.problem import validate
from fmha.reference import attention_reference

HEADS = [(32, 32), (32, 8), (28, 4), (16, 1)]
if HAS_GPU:
    GRID = list(itertools.product([64, 128, 256, 512], [1, 3, 4], [1, 7, 129, 1000], HEADS))
else:  # interpreter: every head dim, awkward sizes, fewer heads; S = 1000 for GQA 28/4
    GRID = (list(itertools.product([64, 128, 256, 512], [1, 3], [1, 7, 129], [(8, 8), (28, 4), (4, 1)]))
            + [(D, 3, 1000, (28, 4)) for D in (64, 128, 256, 512)])


@pytest.mark.parametrize("D,T,S,heads", GRID)
def test_grid(D, T, S, heads):
    Hq, Hkv = heads
    q, k, v, _ = make_inputs(2, T, Hq, Hkv, S, D, device=DEVICE, seed=D + T + S)
    check_backend("triton", q, k, v, causal=True, what=f"D={D} T={T} S={S} {Hq}/{Hkv}")


# The 72-config grid: D x T x S, MHA, GQA and MQA (D=512 is the MQA latent case).
GRID72 = list(itertools.product([64, 128, 256, 512], [1, 4, 32, 128], [128, 256, 384, 512]))


# On a GPU: MHA, GQA and MQA per config. Under the interpreter: one small GQA head pair.
HEADS72 = {True: [(8, 8), (32, 8), (16, 1)], False: [(2, 1)]}[HAS_GPU]


@pytest.mark.parametrize("D,T,S", GRID72)
def test_grid72(D, T, S):
    for Hq, Hkv in ([(16, 1)] if D == 512 and HAS_GPU else HEADS72):
        q, k, v, _ = make_inputs(2, T, Hq, Hkv, S, D, device=DEVICE, seed=D * T + S)
        check_backend("triton", q, k, v, causal=True, what=f"D={D} T={T} S={S} {Hq}/{Hkv}")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("causal", [True, False])
def test_varlen_with_empty_rows(dtype, causal):
    """Seq 0 empty (zeros, lse -inf); seq 2 shorter than T, so its first causal row sees nothing; seq 3 full; NaN
    in every slot past a length."""
    q, k, v, sl = make_inputs(4, 3, 28, 4, 129, 128, dtype, device=DEVICE, seqlens=[0, 57, 2, 129])
    for b, n in enumerate(sl.tolist()):
        k[b, n:] = float("nan")
        v[b, n:] = float("nan")
    out, lse = check_backend("triton", q, k, v, sl, causal=causal)
    assert (out[0] == 0).all() and torch.isneginf(lse[0]).all()
    if causal:
        assert (out[2, 0] == 0).all() and torch.isneginf(lse[2, :, 0]).all()


@pytest.mark.parametrize("D", [64, 512])
def test_non_contiguous_q_from_fused_qkv(D):
    q, k, v, sl = make_inputs(2, 3, 16, 2, 40, D, device=DEVICE, fused_qkv=True, seqlens=[40, 13])
    assert not q.is_contiguous()
    check_backend("triton", q, k, v, sl)


def test_strided_cache_view():
    # a cache allocated larger than used ([B, S_max, H, D] sliced along S and heads) is read in place
    q, k_big, v_big, _ = make_inputs(2, 1, 8, 4, 64, 64, device=DEVICE)
    k, v = k_big[:, :50, 1:3], v_big[:, :50, 1:3]
    check_backend("triton", q[:, :, :4], k, v)


def test_softmax_scale():
    q, k, v, _ = make_inputs(1, 2, 4, 4, 33, 64, device=DEVICE)
    check_backend("triton", q, k, v, softmax_scale=0.3)


@pytest.mark.parametrize("num_splits", [1, 2])
def test_p_and_out_round_to_nearest(num_splits):
    """bf16 P and O round to nearest even, as on the GPU (the interpreter's own cast truncates): key 0 scores 0,
    128 keys score just under log(0.5 + 2^-8), every value is 134/64. Rounded to nearest the 128 P round up to
    0.5 + 2^-8 and the output is 134/64 = 2.09375; truncated they fall to 0.5 and it falls to 2.0625."""
    from fmha.triton.decode import decode_attention
    N, D = 128, 64
    q = torch.zeros(1, 1, 1, D, device=DEVICE)
    q[..., :2] = torch.tensor([8.0, 1.0])
    k = torch.zeros(1, N + 1, 1, D, device=DEVICE)
    k[0, 1:, 0, :2] = torch.tensor([-0.68359375, -0.01422119140625])  # (bf16 values: (8 k0 + k1) / 8 = -0.6853)
    q, k = q.bfloat16(), k.bfloat16()
    v = torch.full((1, N + 1, 1, D), 134 / 64, dtype=torch.bfloat16, device=DEVICE)
    sl = torch.tensor([N + 1], dtype=torch.int32, device=DEVICE)
    p = validate(q, k, v, sl, None, True, None)
    out, lse = poisoned_out(q), torch.empty(1, 1, 1, device=DEVICE)
    decode_attention(p, q, k, v, sl, out, lse, num_splits=num_splits)
    assert (out.float() - 134 / 64).abs().max().item() < 2 ** -7, out[0, 0, 0, :4]


@pytest.mark.parametrize("D", [64, 128, 256, 512])
@pytest.mark.parametrize("num_splits", [2, 3, 5])
def test_forced_split_kv(D, num_splits):
    """The split path (partial o/lse + combine) against the reference, with uneven and empty splits."""
    from fmha.triton.decode import decode_attention
    q, k, v, sl = make_inputs(3, 3, 8, 2, 300, D, device=DEVICE, seqlens=[300, 0, 70])
    p = validate(q, k, v, sl, None, True, None)
    out = poisoned_out(q)
    lse = torch.full((3, 8, 3), float("nan"), device=DEVICE)
    used = decode_attention(p, q, k, v, sl, out, lse, num_splits=num_splits)
    assert used > 1
    ref, ref_lse = attention_reference(q, k, v, sl, p.softmax_scale, True)
    compare(out, lse, ref, ref_lse, q.dtype, vmax=v.abs().max().item(), what=f"split={used}")


@pytest.mark.parametrize("num_splits", [1, 2])
def test_flat_grid_past_65535_sequence_heads(monkeypatch, num_splits):
    """Past 65535 (sequence, KV head) pairs, more than grid axis y holds, the row blocks and the pairs share axis x;
    forced here on a small problem by lowering the limit (64/2 heads at T = 3: 96 rows, two row blocks a pair)."""
    from fmha.triton import decode
    monkeypatch.setattr(decode, "GRID_YZ_MAX", 1)
    q, k, v, sl = make_inputs(3, 3, 64, 2, 129, 64, device=DEVICE, seqlens=[129, 0, 7])
    p = validate(q, k, v, sl, None, True, None)
    assert decode.plan(p, 8)[1] == 2  # row blocks a (sequence, KV head)
    out = poisoned_out(q)
    lse = torch.full((3, 64, 3), float("nan"), device=DEVICE)
    decode.decode_attention(p, q, k, v, sl, out, lse, num_splits=num_splits)
    ref, ref_lse = attention_reference(q, k, v, sl, p.softmax_scale, True)
    compare(out, lse, ref, ref_lse, q.dtype, vmax=v.abs().max().item(), what=f"flat grid, {num_splits} split(s)")


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_GPU, reason="65536 (sequence, KV head) pairs: a GPU's grid")
def test_flat_grid_at_65536_sequence_heads():
    """The first size past grid axis y: B 2048 x 32 KV heads (the same through auto, which takes Triton for a
    window)."""
    q, k, v, sl = make_inputs(2048, 1, 32, 32, 16, 64, device=DEVICE, seqlens=[16, 5] * 1024)
    out, lse = fmha.attention(q, k, v, sl, backend="triton", return_lse=True, window_size=(8, -1))
    ref, ref_lse = attention_reference(q, k, v, sl, 64 ** -0.5, True, window_size=(8, -1))
    compare(out, lse, ref, ref_lse, q.dtype, vmax=v.abs().max().item(), what="B*Hkv = 65536")


LONG_CACHES = [(1, 1, 32, 8, 65536, 128), (2, 4, 16, 1, 8192, 512), (1, 16, 32, 8, 8192, 128)]


@pytest.mark.parametrize("B,T,Hq,Hkv,S,D", LONG_CACHES)
def test_long_cache_plans_splits(B, T, Hq, Hkv, S, D):
    """Grids of at most 16 CTAs over long caches split the keys until the CTAs cover most of the SMs (the plan
    alone: any machine)."""
    from fmha.triton.decode import plan
    _, m_blocks, splits = plan(make_problem(B, T, Hq, Hkv, S, D), 132)
    assert splits > 1 and 132 / 2 < m_blocks * B * Hkv * splits <= 132, (m_blocks, splits)


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_GPU, reason="long caches are too slow for the interpreter")
@pytest.mark.parametrize("B,T,Hq,Hkv,S,D", LONG_CACHES)
def test_long_cache_heuristic_split(B, T, Hq, Hkv, S, D):
    q, k, v, _ = make_inputs(B, T, Hq, Hkv, S, D, device=DEVICE)
    check_backend("triton", q, k, v)


@pytest.mark.parametrize("backend", ["triton", pytest.param("cuda", marks=[pytest.mark.skipif(
    not has_cuda_kernel(), reason=CUDA_KERNEL_SKIP), pytest.mark.gpu])])
def test_token_major_q_and_out_past_2_31_elements(backend):
    """q and out whose token stride times the last query token passes 2^31 elements (a token-major [T, B, H, D]
    layout permuted to [B, T, H, D] at large B x H x D): their addresses are formed in 64 bits (Triton's OFFS_64;
    the CUDA kernel's strides are 64-bit). The buffers are 4 GiB of address space each, of which only the rows
    written are touched."""
    ts = 2 ** 30 + 64  # token stride (elements): token 2 starts past 2^31
    shape, strides = (1, 3, 2, 64), (3 * ts, ts, 64, 1)
    q_small, k, v, _ = make_inputs(1, 3, 2, 1, 16, 64, device=DEVICE)
    q = torch.empty_strided(shape, strides, dtype=torch.bfloat16, device=DEVICE)
    q.copy_(q_small)
    out = torch.empty_strided(shape, strides, dtype=torch.bfloat16, device=DEVICE).fill_(float("nan"))
    res, lse = fmha.attention(q, k, v, causal=True, return_lse=True, backend=backend, out=out)
    assert res.data_ptr() == out.data_ptr()
    ref, ref_lse = attention_reference(q_small, k, v, None, 64 ** -0.5, True)
    compare(out, lse, ref, ref_lse, q.dtype, vmax=v.float().abs().max().item(), what="token stride 2^30 + 64")


@pytest.mark.parametrize("num_splits", [1, 3])
@pytest.mark.parametrize("D,Dv", [(128, 128), (576, 512)])
def test_out_inside_a_wider_buffer(num_splits, D, Dv):
    """out as heads 1 .. Hq of a wider NaN buffer: the kernel (unsplit) or the combine kernel (split) writes those
    heads through out's strides and nothing around them."""
    from fmha.triton.decode import decode_attention

    Hq, Hkv = (8, 2) if D == 128 else (4, 1)
    q, k, v, sl = make_inputs(2, 3, Hq, Hkv, 400, D, device=DEVICE, seqlens=[400, 77])
    v = k[..., :Dv] if D == 576 else v
    wide = torch.full((2, 3, Hq + 2, Dv), float("nan"), dtype=q.dtype, device=DEVICE)
    out, lse = wide[:, :, 1:Hq + 1], torch.full((2, Hq, 3), float("nan"), device=DEVICE)
    p = validate(q, k, v, sl, out=out)
    assert decode_attention(p, q, k, v, sl, out, lse, num_splits=num_splits) == num_splits
    ref, ref_lse = attention_reference(q, k, v, sl, D ** -0.5, True)
    compare(out, lse, ref, ref_lse, q.dtype, vmax=v.float().abs().max().item(), what=f"splits={num_splits}")
    assert wide[:, :, 0].isnan().all() and wide[:, :, Hq + 1].isnan().all()


def test_kv_token_offsets_past_2_31_elements():
    """K and V whose token stride times the last key passes 2^31 elements: token offsets in 64 bits (OFFS_64). Each
    cache is 4 GiB of address space, of which only the rows written are touched (test_large_cache.py: the same on
    a GPU with real caches)."""
    ts = 2 ** 30 + 64
    q, k_small, v_small, _ = make_inputs(1, 2, 4, 1, 3, 64, device=DEVICE)
    k = torch.empty_strided((1, 3, 1, 64), (3 * ts, ts, 64, 1), dtype=torch.bfloat16, device=DEVICE)
    v = torch.empty_strided((1, 3, 1, 64), (3 * ts, ts, 64, 1), dtype=torch.bfloat16, device=DEVICE)
    k.copy_(k_small)
    v.copy_(v_small)
    out, lse = fmha.attention(q, k, v, return_lse=True, backend="triton", out=poisoned_out(q))
    ref, ref_lse = attention_reference(q, k_small, v_small, None, 64 ** -0.5, True)
    compare(out, lse, ref, ref_lse, q.dtype, vmax=v_small.float().abs().max().item(), what="K/V token stride")


def test_capacity_past_int32_token_indices_refused():
    """Token indices (a split's end, a tile's keys) are int32 sums past the capacity S, by up to 64 splits of tiles
    rounded up to 128 keys: S within 16384 of 2^31 is refused by name. Every split's end stays below 2^31 at the
    largest S served, whatever the split count."""
    from fmha.backends import TRITON_TOKEN_MARGIN
    from fmha.splits import cdiv

    TRITON_MAX_SEQLEN_K = 2 ** 31 - 1 - TRITON_TOKEN_MARGIN

    triton_backend = registry()["triton"]
    p = make_problem(1, 1, 8, 8, 16, 64, device=DEVICE)
    assert triton_backend.unsupported_reason(dataclasses.replace(p, seqlen_k=TRITON_MAX_SEQLEN_K)) is None
    with pytest.raises(NotImplementedError, match=r"seqlen_k 2147467264 too large: the kernel's token indices must "
                                                  r"stay below 2\^31 - 16384"):
        decide(dataclasses.replace(p, seqlen_k=TRITON_MAX_SEQLEN_K + 1), "triton")
    for splits in range(1, 65):  # (decode_attention's tokens_per_split; tiles of at most 128 keys)
        per_split = cdiv(cdiv(TRITON_MAX_SEQLEN_K, splits), 128) * 128
        assert splits * per_split + 128 < 2 ** 31


@pytest.mark.parametrize("value,on", [("1", True), ("true", True), ("ON", True), ("yes", True), ("0", False),
                                      ("false", False), ("off", False), ("no", False), ("2", False), ("", False)])
def test_triton_interpret_is_read_as_triton_reads_it(monkeypatch, value, on):
    """fmha's interpreter switch (the fp32 dot operands, CPU tensors) follows Triton's own reading of the variable."""
    from fmha.base import interpreter_enabled
    monkeypatch.setenv("TRITON_INTERPRET", value)
    assert interpreter_enabled() is on


def test_a_window_with_left_padding_past_half_the_int32_tokens_is_refused():
    """With both, a split's keys start at the left pad (up to the capacity S) and span the window (up to S): its
    int32 end reaches 2 S, so S past about 2^30 is refused by name (it wrapped and zeroed the row)."""
    triton_backend = registry()["triton"]
    p = dataclasses.replace(make_problem(1, 1, 8, 8, 16, 64, device=DEVICE), window_left=100, has_leftpad=True)
    assert p.has_window
    assert triton_backend.unsupported_reason(dataclasses.replace(p, seqlen_k=2 ** 29)) is None
    big = dataclasses.replace(p, seqlen_k=2 ** 30 + 2 ** 20)
    assert "too large for a window with cache_leftpad" in triton_backend.unsupported_reason(big)
    assert triton_backend.unsupported_reason(dataclasses.replace(big, has_leftpad=False)) is None
    assert triton_backend.unsupported_reason(dataclasses.replace(big, window_left=-1)) is None


@pytest.mark.parametrize("D", [64, 512])
def test_garbage_past_seqlen_is_ignored(D):
    """Unused cache slots (past cache_seqlens) may hold anything, NaN included (a torch.empty cache)."""
    Hq, Hkv = (16, 1) if D == 512 else (8, 2)
    q, k, v, sl = make_inputs(2, 3, Hq, Hkv, 100, D, device=DEVICE, seqlens=[37, 100])
    ref, ref_lse = attention_reference(q, k, v, sl, D ** -0.5, True)
    k_dirty, v_dirty = k.clone(), v.clone()
    k_dirty[0, 37:] = float("nan")
    v_dirty[0, 37:] = float("inf")
    v_dirty[0, 38:] = float("nan")
    dirty_ref, dirty_lse = attention_reference(q, k_dirty, v_dirty, sl, D ** -0.5, True)
    assert torch.equal(dirty_ref, ref) and torch.equal(dirty_lse, ref_lse)
    out, lse = check_backend("triton", q, k_dirty, v_dirty, sl)


def test_the_spill_tool_compiles_the_kernel_for_sm90():
    """tools/triton_spills.py compiles one launch configuration ahead of time (no GPU; in a process of its own,
    without the interpreter) and reads its registers and stack; a small D = 64 tile spills nowhere."""
    import os
    import subprocess
    import sys
    from pathlib import Path
    pytest.importorskip("triton.backends.nvidia")
    repo = Path(__file__).resolve().parents[1]
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    r = subprocess.run([sys.executable, "tools/triton_spills.py", "--head-dims", "64", "--rows", "1", "--splits", "1",
                        "--options", "plain"], cwd=repo, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "BLOCK_M=16 BLOCK_N=64" in r.stdout and "0 bytes of stack" in r.stdout, r.stdout
    assert "0 of 1 configurations spill" in r.stdout, r.stdout


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_GPU or torch.cuda.device_count() < 2, reason="needs two CUDA GPUs")
def test_tensors_on_a_device_that_is_not_current():
    """Triton launches on the current device: the backend makes the tensors' device current for the call."""
    q, k, v, sl = make_inputs(2, 1, 8, 2, 129, 64, device="cuda:1", seqlens=[129, 7])
    with torch.cuda.device(0):
        out, lse = fmha.attention(q, k, v, sl, backend="triton", return_lse=True)
    ref, ref_lse = attention_reference(q, k, v, sl, 64 ** -0.5, True)
    compare(out, lse, ref, ref_lse, q.dtype, vmax=v.abs().max().item(), what="tensors on cuda:1")
