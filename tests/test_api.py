"""Public API: sdpa drop-in, explain, env override, torch.compile and CUDA graphs."""
import re

import pytest
import torch
import torch.nn.functional as F

import fmha
from conftest import DEVICE, HAS_GPU
from _util import check_backend, compare, make_inputs, poisoned_out
from fmha.reference import attention_reference

GPU_BACKENDS = [b for b in fmha.available_backends() if b != "reference"] if HAS_GPU else []


def test_available_backends_on_this_machine():
    names = fmha.available_backends()
    assert "reference" in names
    assert "triton" in names  # GPU, or the interpreter that conftest enables on a CPU


@pytest.mark.parametrize("Hq,Hkv,L,S", [(8, 8, 1, 37), (8, 2, 3, 64), (4, 1, 1, 5), (4, 4, 16, 16)])
def test_sdpa_matches_torch(Hq, Hkv, L, S):
    g = torch.Generator().manual_seed(3)
    q = torch.randn(2, Hq, L, 64, generator=g).to(DEVICE, torch.bfloat16)
    k = torch.randn(2, Hkv, S, 64, generator=g).to(DEVICE, torch.bfloat16)
    v = torch.randn(2, Hkv, S, 64, generator=g).to(DEVICE, torch.bfloat16)
    causal = L == S
    ours = fmha.sdpa(q, k, v, is_causal=causal, enable_gqa=Hq != Hkv, backend="triton")
    theirs = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=causal,
                                            enable_gqa=Hq != Hkv)
    assert ours.shape == theirs.shape and ours.dtype == q.dtype
    assert (ours.float() - theirs).abs().max().item() < 2 * 2 ** -8 * v.abs().max().item() + 1e-3


@pytest.mark.parametrize("q_shape,kv_shape,enable_gqa", [
    ((2, 8, 1, 64), (2, 1, 7, 64), False),   # one KV head serves every query head (SDPA's broadcast)
    ((2, 8, 3, 64), (1, 8, 7, 64), False),   # a batch of one serves every sequence
    ((2, 8, 1, 64), (1, 2, 7, 64), True),    # both, with GQA
])
def test_sdpa_broadcasts_as_torch_does(q_shape, kv_shape, enable_gqa):
    g = torch.Generator().manual_seed(4)
    q = torch.randn(*q_shape, generator=g).to(DEVICE, torch.bfloat16)
    k, v = (torch.randn(*kv_shape, generator=g).to(DEVICE, torch.bfloat16) for _ in range(2))
    ours = fmha.sdpa(q, k, v, enable_gqa=enable_gqa, backend="reference")
    theirs = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), enable_gqa=enable_gqa)
    assert ours.shape == theirs.shape
    assert (ours.double() - theirs).abs().max().item() < 2 ** -8 * v.abs().max().item()


@pytest.mark.parametrize("q_shape,kv_shape", [((0, 2, 1, 64), (0, 2, 3, 64)), ((1, 2, 0, 64), (1, 2, 3, 64)),
                                              ((1, 0, 1, 64), (1, 0, 3, 64)), ((1, 2, 1, 64), (1, 2, 0, 64))])
def test_sdpa_of_empty_inputs_is_what_torch_returns(q_shape, kv_shape):
    q, k = torch.randn(*q_shape, dtype=torch.bfloat16), torch.randn(*kv_shape, dtype=torch.bfloat16)
    ours = fmha.sdpa(q, k, k)
    assert ours.dtype == q.dtype and torch.equal(ours, torch.zeros(*q_shape[:3], kv_shape[3], dtype=q.dtype))
    if q_shape[1] > 0:  # (torch 2.11's CPU SDPA crashes on zero heads; 2.13 returns the same empty tensor)
        assert torch.equal(ours, F.scaled_dot_product_attention(q, k, k))
    with pytest.raises(ValueError, match=r"^query: requires_grad=True"):  # checked as a non-empty call is
        fmha.sdpa(q.clone().requires_grad_(), k, k)
    with pytest.raises(ValueError, match=r"query: head_dim 96 is not supported"):
        fmha.sdpa(q.new_zeros(*q_shape[:3], 96), k.new_zeros(*kv_shape[:3], 96), k.new_zeros(*kv_shape[:3], 96))


def test_sdpa_of_empty_inputs_refuses_a_named_backend_that_cannot_serve(monkeypatch):
    """As a call with data would be: the CUDA kernel never serves CPU tensors, on any machine."""
    q = torch.randn(1, 2, 1, 64, dtype=torch.bfloat16)
    k = q.new_zeros(1, 2, 0, 64)
    refused = r"^backend 'cuda' cannot serve this call \(torch.bfloat16, head dims \(64, 64\), tensors on cpu\): "
    with pytest.raises(NotImplementedError, match=refused):
        fmha.sdpa(q, k, k, backend="cuda")
    monkeypatch.setenv("FMHA_BACKEND", "cuda")
    with pytest.raises(NotImplementedError, match=refused.replace("'cuda'", "'cuda' \\(asked for by the environment "
                                                                  "variable FMHA_BACKEND\\)")):
        fmha.sdpa(q, k, k)
    assert torch.equal(fmha.sdpa(q, k, k, backend="reference"), q.new_zeros(1, 2, 1, 64))  # (named: wins over the env)
    monkeypatch.setenv("FMHA_BACKEND", "bogus")
    with pytest.raises(ValueError, match=r"environment variable FMHA_BACKEND: unknown backend 'bogus'"):
        fmha.sdpa(q, k, k)
    # The stand-in the backend is asked about reads V in K's memory, which 576 / 512 needs on the CUDA kernel.
    import fmha.api as api
    asked = []
    monkeypatch.setattr(api, "why_not", lambda name, p: asked.append((name, p)))
    monkeypatch.delenv("FMHA_BACKEND")
    q576, k576 = q.new_zeros(1, 2, 1, 576), q.new_zeros(1, 2, 0, 576)
    assert fmha.sdpa(q576, k576, k576[..., :512], backend="cuda").shape == (1, 2, 1, 512)
    (name, p), = asked
    assert name == "cuda" and (p.head_dim, p.head_dim_v) == (576, 512) and p.kv_shared


def test_explain_names_choice_and_reasons():
    q, k, v, _ = make_inputs(1, 1, 4, 1, 16, 64, device=DEVICE)
    d = fmha.explain(q, k, v)
    text = str(d)
    assert d.backend in fmha.available_backends()
    assert f"backend: {d.backend}" in text and "reference" in text
    assert fmha.explain(q, k, v, backend="reference").source == "explicit"


def test_explain_shows_the_launch_configuration():
    """Triton (interpreter on CPU, compiled on GPU) and, on Hopper, CUDA say how they would launch."""
    q, k, v, _ = make_inputs(1, 1, 8, 2, 4096, 64, device=DEVICE)
    text = str(fmha.explain(q, k, v, backend="triton"))
    assert "launch: BLOCK_M=" in text and "KV split(s)" in text
    if "cuda" in fmha.available_backends() and fmha.explain(q, k, v, backend="cuda").launch:
        text = str(fmha.explain(q, k, v, backend="cuda"))
        assert "launch: config deep" in text and "token tiles" in text and ("combine kernel" in text or "merged inside clusters" in text)
        assert "narrow loop" in text  # 4 packed rows at D=64


def test_env_override(monkeypatch):
    q, k, v, _ = make_inputs(1, 1, 4, 1, 16, 64, device=DEVICE)
    monkeypatch.setenv("FMHA_BACKEND", "triton")
    d = fmha.explain(q, k, v)
    assert (d.backend, d.source) == ("triton", "env")
    check_backend("auto", q, k, v)


def test_env_backend_that_cannot_serve_is_named_as_the_env_var(monkeypatch):
    """A refusal of the backend FMHA_BACKEND names says that the environment asked for it (the caller passed no
    backend=)."""
    q, k, v, _ = make_inputs(1, 1, 4, 1, 16, 64, device="cpu")
    monkeypatch.setenv("FMHA_BACKEND", "cuda")
    with pytest.raises(NotImplementedError, match=r"backend 'cuda' \(asked for by the environment variable "
                       r"FMHA_BACKEND\) cannot serve"):
        fmha.attention(q, k, v)


def test_auto_leaves_the_sm100_kernel_to_callers_who_ask(monkeypatch):
    """On compute capability 10.0 the cuda backend serves problems but auto does not take its kernel, which no
    Blackwell GPU has run, unless FMHA_CUDA_SM100=1; backend='cuda' still chooses it (no GPU needed: the backend
    as on a B200)."""
    import dataclasses

    from fmha.backends import registry
    from fmha.cuda import backend as cb
    from fmha.dispatch import decide, forget_decisions
    from fmha.problem import validate

    b = registry()["cuda"]
    monkeypatch.setattr(cb, "_capability", lambda index: (10, 0))
    monkeypatch.setattr(b, "_arch", 100)
    monkeypatch.setattr(b, "unavailable_reason", lambda: None)
    monkeypatch.setattr(fmha.tuning, "lookup", lambda *args: None)  # (no tuning table without a GPU)
    monkeypatch.delenv("FMHA_CUDA_SM100", raising=False)
    monkeypatch.delenv("FMHA_BACKEND", raising=False)
    forget_decisions()
    try:
        q, k, v, sl = make_inputs(2, 1, 8, 2, 64, 128)
        p = dataclasses.replace(validate(q, k, v, sl), device=torch.device("cuda", 0))
        assert b.unsupported_reason(p) is None
        d = decide(p, "auto")
        assert d.backend == "triton"
        assert "never run on a Blackwell GPU: auto takes it only with FMHA_CUDA_SM100=1" in dict(d.considered)["cuda"]
        assert decide(p, "cuda").backend == "cuda"
        monkeypatch.setenv("FMHA_CUDA_SM100", "1")
        forget_decisions()
        assert decide(p, "auto").backend == "cuda"
    finally:
        forget_decisions()


def test_auto_passes_over_a_cuda_library_that_fails_to_build(monkeypatch):
    """Where auto takes cuda and its library's first build fails, the call warns and runs the next backend instead
    of raising; from then on the failure is cuda's unavailable_reason (no GPU needed: the backend as on an H200)."""
    import dataclasses

    from fmha.api import _ready_runner
    from fmha.backends import registry
    from fmha.cuda import backend as cb, loader
    from fmha.dispatch import decide, forget_decisions
    from fmha.problem import validate

    b = registry()["cuda"]
    monkeypatch.setattr(cb, "_capability", lambda index: (9, 0))
    monkeypatch.setattr(b, "_arch", 90)
    monkeypatch.setattr(b, "_fn", None)
    monkeypatch.setattr(b, "_build_error", None)
    monkeypatch.setattr(b, "unavailable_reason", lambda: b._build_error)
    monkeypatch.setattr(fmha.tuning, "lookup", lambda *args: None)

    def no_nvcc(arch):
        raise loader.CudaBuildError("fmha: nvcc failed (exit 1) building the CUDA kernels.\n"
                                    "  nvcc fatal   : Unknown option '--bogus'")

    monkeypatch.setattr(loader, "load", no_nvcc)
    monkeypatch.delenv("FMHA_BACKEND", raising=False)
    forget_decisions()
    try:
        q, k, v, sl = make_inputs(2, 1, 8, 2, 64, 128)
        p = dataclasses.replace(validate(q, k, v, sl), device=torch.device("cuda", 0))
        assert decide(p, "auto").backend == "cuda"
        with pytest.warns(RuntimeWarning, match=r"backend 'cuda' could not be loaded, auto takes 'triton': fmha: nvcc "
                                                r"failed \(exit 1\)"):
            assert _ready_runner(p, "auto") is registry()["triton"]
        # (nvcc's own words kept, on one line)
        assert dict(decide(p, "auto").considered)["cuda"] == ("fmha: nvcc failed (exit 1) building the CUDA kernels. "
                                                              "nvcc fatal : Unknown option '--bogus'")
        with pytest.raises(NotImplementedError, match="backend 'cuda' cannot serve"):
            _ready_runner(p, "cuda")  # asked for by name: refused with the reason
        # explain, first in a fresh process state, says what attention runs (it raised the build error)
        monkeypatch.setattr(b, "_build_error", None)
        forget_decisions()
        monkeypatch.setattr(fmha.api, "validate_cached", lambda *a, **kw: p)
        monkeypatch.setattr(fmha.backends, "num_sms", lambda index: 132)
        with pytest.warns(RuntimeWarning, match=r"backend 'cuda' could not be loaded, auto takes 'triton'"):
            assert str(fmha.explain(q, k, v, sl)).startswith("backend: triton")
    finally:
        forget_decisions()


def test_a_call_under_inference_mode_leaves_later_calls_working():
    """The unwanted LSE's scratch buffer, shared by calls of one shape, is made outside inference mode: one made
    inside it would refuse the writes of every later call of that shape outside the mode."""
    q, k, v, _ = make_inputs(2, 1, 4, 2, 16, 64, device="cpu", seed=11)
    with torch.inference_mode():
        first = fmha.attention(q, k, v, backend="reference")
    with torch.no_grad():
        again = fmha.attention(q, k, v, backend="reference")
    assert torch.equal(first, again)


def test_auto_output_and_default_out():
    q, k, v, sl = make_inputs(2, 3, 8, 2, 20, 64, device=DEVICE, seqlens=[20, 4])
    out = fmha.attention(q, k, v, sl)
    ref, _ = attention_reference(q, k, v, sl, 64 ** -0.5, True)
    assert out.shape == q.shape and out.dtype == q.dtype
    assert (out.float().cpu() - ref.float().cpu()).abs().max() < 0.04


@pytest.mark.parametrize("backend", [b for b in fmha.available_backends() if b != "reference"])
def test_a_given_out_is_seen_as_modified_by_autograd(backend):
    """The kernels write `out` through pointers; a tensor autograd saved must not change unseen."""
    q, k, v, _ = make_inputs(1, 1, 4, 1, 16, 64, device=DEVICE)
    out = torch.zeros_like(q)
    w = torch.ones(64, dtype=q.dtype, device=DEVICE, requires_grad=True)
    y = (out * w).sum()  # saves `out` for w's gradient
    fmha.attention(q, k, v, out=out, backend=backend)
    fmha.attention(q, k, v, out=out, backend=backend)  # (the second call takes the memo's path)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.backward()


@pytest.mark.parametrize("backend", ["reference", "triton"])
def test_torch_compile_fullgraph(backend):
    """A decode step calling fmha.attention compiles without graph breaks and matches eager."""
    q, k, v, sl = make_inputs(2, 2, 8, 2, 24, 64, device=DEVICE, seqlens=[24, 9])
    w = torch.randn(64, 64, device=DEVICE).to(q.dtype)

    def step(q, k, v, sl):
        out, lse = fmha.attention(q, k, v, sl, return_lse=True, backend=backend)
        return (out @ w).float().sum(-1), lse

    torch._dynamo.reset()
    compiled = torch.compile(step, fullgraph=True, backend="eager" if DEVICE == "cpu" else "inductor")
    got, got_lse = compiled(q, k, v, sl)
    want, want_lse = step(q, k, v, sl)
    assert torch.allclose(got, want, atol=1e-2, rtol=1e-3)
    assert torch.allclose(got_lse, want_lse, atol=1e-5)


def test_torch_compile_dynamic_with_the_default_softcap():
    """dynamic=True makes Python floats symbolic, the default softcap among them: attention and sdpa still trace
    in one graph, their value checked by the op when the graph runs."""
    q, k, v, sl = make_inputs(2, 1, 8, 2, 24, 64, device=DEVICE, seqlens=[24, 9])
    torch._dynamo.reset()
    step = torch.compile(lambda q, k, v, sl: fmha.attention(q, k, v, sl, backend="reference"), fullgraph=True,
                         dynamic=True, backend="eager")
    assert torch.equal(step(q, k, v, sl), fmha.attention(q, k, v, sl, backend="reference"))
    qh, kh, vh = (t.transpose(1, 2) for t in (q, k, v))  # [B, H, L, E]
    torch._dynamo.reset()
    sdpa = torch.compile(lambda q, k, v: fmha.sdpa(q, k, v, enable_gqa=True, backend="reference"), fullgraph=True,
                         dynamic=True, backend="eager")
    assert torch.equal(sdpa(qh, kh, vh), fmha.sdpa(qh, kh, vh, enable_gqa=True, backend="reference"))


def test_torch_compile_refuses_what_eager_refuses():
    """Under torch.compile an out inside q's memory is refused by the custom op (on real tensors), and a
    non-bool causal by the traced wrapper (dynamo reports the raise it traced)."""
    q, k, v, sl = make_inputs(1, 1, 8, 2, 24, 64, device=DEVICE)
    torch._dynamo.reset()
    compiled = torch.compile(lambda q, k, v, o: fmha.attention(q, k, v, out=o, backend="reference"), fullgraph=True,
                             backend="eager")
    with pytest.raises(ValueError, match=r"out: its memory .* overlaps q's"):
        compiled(q, k, v, q)
    torch._dynamo.reset()
    flagged = torch.compile(lambda q, k, v: fmha.attention(q, k, v, causal=1, backend="reference"), fullgraph=True,
                            backend="eager")
    with pytest.raises(Exception, match=r"causal: expected a bool"):
        flagged(q, k, v)
    torch._dynamo.reset()  # inputs that require grad: the op runs below autograd, the traced wrapper refuses them
    graded = torch.compile(lambda q, k, v: fmha.attention(q, k, v, backend="reference"), fullgraph=True,
                           backend="eager")
    with pytest.raises(Exception, match=r"q: requires_grad=True, but fmha computes no gradients"):
        graded(q.clone().requires_grad_(), k, v)


@pytest.mark.parametrize("kwargs,message", (
    (dict(sinks=[0.0] * 8), r"sinks: expected a contiguous float32 tensor .*or None, got list"),
    (dict(cache_seqlens=3), r"cache_seqlens: expected an int32 tensor .*or None, got int"),
    (dict(block_table=[[0]]), r"block_table: expected an int32 tensor .* or None, got list"),
    (dict(backend=None), r"backend: unknown backend None"),
    (dict(softmax_scale="x"), r"softmax_scale: expected a real number .* got str"),
    (dict(k_cache=[1]), r"k_cache: expected a torch.Tensor"),
))
def test_torch_compile_names_arguments_of_the_wrong_type(kwargs, message):
    """Arguments the custom op's schema would refuse are refused by name while tracing, as in an eager call."""
    q, k, v, _ = make_inputs(1, 1, 8, 2, 24, 64, device=DEVICE)
    kwargs = {"backend": "reference", **kwargs}
    k = kwargs.pop("k_cache", k)
    torch._dynamo.reset()
    compiled = torch.compile(lambda q, v: fmha.attention(q, k, v, **kwargs), fullgraph=True, backend="eager")
    with pytest.raises(Exception, match=message):
        compiled(q, v)
    with pytest.raises((TypeError, ValueError), match=message):
        fmha.attention(q, k, v, **kwargs)


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_GPU, reason="CUDA graphs need a GPU")
@pytest.mark.parametrize("backend", GPU_BACKENDS + ["reference"])
def test_cuda_graph_capture_and_replay(backend):
    q, k, v, sl = make_inputs(2, 4, 16, 2, 300, 128, device="cuda", seqlens=[300, 77])
    out = poisoned_out(q)
    fmha.attention(q, k, v, sl, backend=backend, out=out)  # warm-up: compile / build outside capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        _, lse = fmha.attention(q, k, v, sl, backend=backend, out=out, return_lse=True)
    for seed in (5, 6):
        q2, k2, v2, _ = make_inputs(2, 4, 16, 2, 300, 128, device="cuda", seed=seed)
        q.copy_(q2), k.copy_(k2), v.copy_(v2)
        sl.copy_(torch.tensor([150 + seed, 300], dtype=torch.int32))
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        ref, ref_lse = attention_reference(q, k, v, sl, 128 ** -0.5, True)
        compare(out, lse, ref, ref_lse, q.dtype, vmax=v.abs().max().item(), what=f"{backend} graph replay")


def test_compare_reports_every_backend_and_failures(monkeypatch):
    q, k, v, sl = make_inputs(2, 2, 8, 2, 40, 64, device=DEVICE, seqlens=[40, 0])
    report = fmha.compare(q, k, v, sl)
    assert report.ok, str(report)
    assert {r.backend for r in report.results} == set(fmha.available_backends())
    assert all(r.median_us is not None and r.cosine > 0.99999 for r in report.results)
    assert "triton" in str(report) and "auto" in str(report)
    # a failing backend is reported, never hidden
    from fmha.backends import registry

    def broken(*args, **kwargs):
        raise RuntimeError("kernel exploded")
    monkeypatch.setattr(registry()["triton"], "run", broken)
    report = fmha.compare(q, k, v, sl, backends=["triton", "reference"], timing=False)
    assert not report.ok
    assert report.results[0].status.startswith("failed: RuntimeError: kernel exploded")


def test_compare_flags_a_disagreeing_backend(monkeypatch):
    q, k, v, _ = make_inputs(1, 1, 4, 1, 16, 64, device=DEVICE)
    from fmha.backends import registry
    real = registry()["triton"].run

    def off_by_a_bit(p, q, k, v, sl, out, lse):
        real(p, q, k, v, sl, out, lse)
        out.add_(0.1)
    monkeypatch.setattr(registry()["triton"], "run", off_by_a_bit)
    report = fmha.compare(q, k, v, backends=["triton"], timing=False)
    assert report.results[0].status.startswith("DISAGREES: max abs err")


def test_compare_flags_a_zeroed_or_negated_output_that_fits_the_absolute_bound(monkeypatch):
    """A long cache averages V towards 0, so a zeroed output fits 2 u max|v|; junk in slots past a length must
    not widen the bound either (max |v| is taken over the keys each sequence has)."""
    from fmha.backends import registry
    real = registry()["reference"].run
    q, k, v, _ = make_inputs(1, 1, 4, 1, 2048, 64, device=DEVICE)
    monkeypatch.setattr(registry()["triton"], "run", lambda p, q, k, v, sl, out, lse: (real(p, q, k, v, sl, out, lse),
                                                                                   out.zero_()))
    r = fmha.compare(q, k, v, backends=["triton"], timing=False).results[0]
    assert r.status.startswith("DISAGREES") and "cosine 0.0000000" in r.status, r.status
    # longer still, the true output itself is inside the bound of zero: all zeros are flagged all the same
    q_long, k_long, v_long, _ = make_inputs(1, 1, 4, 1, 32768, 128, device=DEVICE)
    r = fmha.compare(q_long, k_long, v_long, backends=["triton"], timing=False)
    assert r.results[0].max_abs_err <= r.tolerance, str(r)
    assert r.results[0].status.startswith("DISAGREES") and "cosine 0.0000000" in r.results[0].status, str(r)
    sl = torch.tensor([32], dtype=torch.int32, device=DEVICE)
    v[0, 32:] = 2000.0  # past the length: may hold anything
    monkeypatch.setattr(registry()["triton"], "run", lambda p, q, k, v, sl, out, lse: (real(p, q, k, v, sl, out, lse),
                                                                                   out.neg_()))
    report = fmha.compare(q, k, v, sl, backends=["triton"], timing=False)
    assert report.tolerance < 0.1 and report.results[0].status.startswith("DISAGREES: max abs err"), str(report)


def test_compare_flags_an_output_scaled_by_a_wrong_factor(monkeypatch):
    """A long cache's output is small: off by 3% it fits the abs bound and keeps the cosine, not the norm."""
    from fmha.backends import registry
    real = registry()["reference"].run

    def scaled(p, q, k, v, sl, out, lse):
        real(p, q, k, v, sl, out, lse)
        out.mul_(0.97)
    q, k, v, _ = make_inputs(1, 1, 4, 1, 2048, 64, device=DEVICE)
    monkeypatch.setattr(registry()["triton"], "run", scaled)
    r = fmha.compare(q, k, v, backends=["triton"], timing=False).results[0]
    assert r.max_abs_err <= fmha.compare(q, k, v, backends=["reference"], timing=False).tolerance
    assert r.cosine > 0.99999, r
    assert re.fullmatch(r"DISAGREES: output norm off by 3\.0% in sequence 0, head \d", r.status), r.status
    # the tests' own comparison too
    ref, ref_lse = attention_reference(q, k, v, None, 64 ** -0.5, True)
    bad = ref.clone()
    bad *= 0.97
    compare(ref, ref_lse, ref, ref_lse, q.dtype, vmax=v.abs().max().item())
    with pytest.raises(AssertionError, match=r"output norm off by 3\.00% at \(0, \d\)"):
        compare(bad, ref_lse, ref, ref_lse, q.dtype, vmax=v.abs().max().item())


def test_compare_judges_each_sequence_on_its_own_keys(monkeypatch):
    """A sequence of large values (or junk before a left pad, which no row reads) must not widen another
    sequence's bound or hide its error in a batch-wide cosine: a backend that reads 16 wrong keys of sequence 3
    is flagged, naming it."""
    from fmha.backends import registry
    real = registry()["triton"].run

    def wrong_keys(p, q, k, v, sl, out, lse, **kw):
        v = v.clone()
        v[3, 256:272] = v[3, :16]  # sequence 3 reads 16 of its keys' values from elsewhere
        real(p, q, k, v, sl, out, lse, **kw)
    monkeypatch.setattr(registry()["triton"], "run", wrong_keys)
    q, k, v, sl = make_inputs(4, 3, 28, 4, 300, 128, device=DEVICE, seqlens=[20, 300, 40, 300], seed=5)
    v[0] *= 30
    r = fmha.compare(q, k, v, sl, backends=["triton"], timing=False).results[0]
    assert r.status.startswith("DISAGREES: max abs err") and "in sequence 3" in r.status, r.status
    monkeypatch.setattr(registry()["triton"], "run", real)
    q, k, v, sl = make_inputs(2, 1, 8, 2, 40, 64, device=DEVICE, seqlens=[40, 30], seed=6)
    lp = torch.tensor([0, 10], dtype=torch.int32, device=DEVICE)
    v[1, :10] = 1e4  # before sequence 1's left pad: never read
    report = fmha.compare(q, k, v, sl, cache_leftpad=lp, backends=["triton"], timing=False)
    assert report.ok and report.tolerance < 0.1, str(report)


def test_compare_flags_a_backend_whose_second_run_differs(monkeypatch):
    """Bits that move between two runs (a race) or LSE entries a backend never writes are flagged, even inside
    the tolerance: the second run goes into NaN-filled out and LSE."""
    from fmha.backends import registry
    real = registry()["triton"].run
    calls = []

    def racy(p, q, k, v, sl, out, lse, **kw):
        real(p, q, k, v, sl, out, lse, **kw)
        calls.append(1)
        out[0, 0, 0, 0] += 2 ** -7 * len(calls)  # a last-bit change, run to run
    monkeypatch.setattr(registry()["triton"], "run", racy)
    q, k, v, sl = make_inputs(2, 1, 8, 2, 40, 64, device=DEVICE, seqlens=[40, 17])
    r = fmha.compare(q, k, v, sl, backends=["triton"], timing=False).results[0]
    assert r.status.startswith("DISAGREES: a second run into NaN-filled out and LSE gave other bits"), r.status

    def lazy_lse(p, q, k, v, sl, out, lse, **kw):
        keep = lse.clone()
        real(p, q, k, v, sl, out, lse, **kw)
        lse[1].copy_(keep[1])  # sequence 1's entries left as they were
    monkeypatch.setattr(registry()["triton"], "run", lazy_lse)
    r = fmha.compare(q, k, v, sl, backends=["triton"], timing=False).results[0]
    assert r.status.startswith("DISAGREES"), r.status


def test_compare_reports_a_second_run_that_raises_and_passes_tiny_outputs(monkeypatch):
    """A second run that raises is reported as failed, never raised; a sequence whose outputs lie within its own
    bound of zero (fp16 values near the subnormals) is judged by that bound, not by a cosine of rounding noise."""
    from fmha.backends import registry
    real = registry()["triton"].run
    calls = []

    def once(p, q, k, v, sl, out, lse, **kw):
        calls.append(1)
        if len(calls) > 1:
            raise RuntimeError("CUDA error: an illegal memory access was encountered")
        real(p, q, k, v, sl, out, lse, **kw)
    monkeypatch.setattr(registry()["triton"], "run", once)
    q, k, v, sl = make_inputs(2, 1, 8, 2, 40, 64, device=DEVICE, seqlens=[40, 17])
    r = fmha.compare(q, k, v, sl, backends=["triton"], timing=False).results[0]
    assert r.status.startswith("failed: second run: RuntimeError: CUDA error"), r.status
    monkeypatch.setattr(registry()["triton"], "run", real)
    q, k, v, sl = make_inputs(2, 1, 8, 2, 40, 64, dtype=torch.float16, device=DEVICE, seqlens=[40, 17])
    v[1] *= 3e-6
    assert fmha.compare(q, k, v, sl, backends=["triton", "reference"], timing=False).ok


def test_compare_judges_implementations_of_your_own():
    """others= runs your own implementations beside the backends, judged against the same reference (LSE where
    returned), timed, and refused by name where they cannot be told apart from a backend."""
    from fmha.reference import attention_reference
    q, k, v, sl = make_inputs(2, 3, 8, 2, 40, 64, device=DEVICE, seqlens=[40, 17])
    seen = {}

    def mine(q, k_cache, v_cache, cache_seqlens, **options):
        seen.update(options)
        out, lse = attention_reference(q, k_cache, v_cache, cache_seqlens, options["softmax_scale"],
                                       options["causal"])
        return out.to(q.dtype), lse

    def off(q, k_cache, v_cache, cache_seqlens, **options):
        return mine(q, k_cache, v_cache, cache_seqlens, **options)[0] + 0.1  # out only, wrong

    report = fmha.compare(q, k, v, sl, backends=["triton"], timing=True, reps=2,
                          others={"mine": mine, "off": off, "narrow": lambda *args, **options: q[..., :32]})
    r = {x.backend: x for x in report.results}
    assert r["mine"].status == "ok" and r["mine"].lse_max_err is not None and r["mine"].median_us > 0
    assert r["off"].status.startswith("DISAGREES: max abs err") and r["off"].lse_max_err is None
    assert r["narrow"].status == "failed: returned [2, 3, 8, 32]; expected out [2, 3, 8, 64] or (out, lse)"
    assert seen["softmax_scale"] == 64 ** -0.5 and seen["causal"] is True and seen["block_table"] is None
    assert ("triton", "mine") in report.pairwise and not report.ok
    with pytest.raises(ValueError, match=r"others: name 'triton' must be a str other than a backend's"):
        fmha.compare(q, k, v, sl, others={"triton": mine})
    with pytest.raises(TypeError, match=r"others: 'mine' is int, not a callable"):
        fmha.compare(q, k, v, sl, others={"mine": 3})


def test_compare_is_not_ok_for_what_did_not_run(monkeypatch):
    """ok needs every named backend to have run and agreed (a window is no problem of the cuda kernel's, on any
    machine); FMHA_BACKEND naming a backend that cannot serve the problem does not stop the comparison."""
    q, k, v, sl = make_inputs(2, 1, 8, 2, 40, 64, device=DEVICE, seqlens=[40, 17])
    report = fmha.compare(q, k, v, sl, window_size=(8, -1), backends=["cuda"], timing=False)
    assert report.results[0].status.startswith("unsupported") and not report.ok
    assert "ok is False: a backend named in backends= did not run" in str(report)
    monkeypatch.setenv("FMHA_BACKEND", "cuda")
    report = fmha.compare(q, k, v, sl, window_size=(8, -1), backends=["triton", "reference"], timing=False)
    assert report.ok and report.auto_backend.startswith(
        "none (backend 'cuda' (asked for by the environment variable FMHA_BACKEND) cannot serve"), str(report)


def test_compare_names_nan_in_the_keys_a_row_reads_and_scales_the_lse_bound():
    """NaN in a key a row attends to is the inputs' fault, said before any backend runs; a large LSE (scores of
    1e4) is held to a bound that grows with it, as fp32 arithmetic does."""
    q, k, v, sl = make_inputs(2, 1, 8, 2, 40, 64, device=DEVICE, seqlens=[40, 17])
    bad = v.clone()
    bad[1, 5, 0, 0] = float("nan")
    with pytest.raises(ValueError, match=r"q, k_cache, v_cache: the fp32 reference's output of sequence\(s\) \[1\] is "
                                         r"NaN"):
        fmha.compare(q, k, bad, sl, timing=False)
    bad = v.clone()
    bad[1, 30:] = float("nan")  # past the length: fine
    assert fmha.compare(q, k, bad, sl, backends=["triton"], timing=False).ok
    from fmha.compare import LSE_ATOL, lse_tolerance
    assert lse_tolerance(torch.tensor([0.0, 16724.0])).tolist() == pytest.approx([LSE_ATOL, LSE_ATOL + 4 * 2 ** -23 * 16724])
    q60, k60 = (q.float() * 60).to(q.dtype), (k.float() * 60).to(k.dtype)
    assert fmha.compare(q60, k60, v, sl, backends=["triton"], timing=False).ok


def test_compare_refuses_bad_arguments_before_running():
    q, k, v, _ = make_inputs(1, 1, 4, 1, 16, 64, device=DEVICE)
    for kwargs, exc, said in (({"reps": 0}, ValueError, r"reps: expected an int >= 1"),
                              ({"reps": 2.5}, ValueError, r"reps: expected an int >= 1"),
                              ({"timing": "no"}, TypeError, r"timing: expected a bool"),
                              ({"backends": []}, ValueError, r"backends: an empty list compares nothing"),
                              ({"backends": ["reference", "reference"]}, ValueError, r"names a backend twice"),
                              ({"backends": 5}, TypeError, r"backends: expected a backend name or a list of names"),
                              ({"backends": b"reference"}, TypeError, r"backends: expected a backend name")):
        with pytest.raises(exc, match=said):
            fmha.compare(q, k, v, **kwargs)
    with pytest.raises(ValueError, match=r"q: a meta tensor has no data"):
        fmha.compare(*(t.to("meta") for t in (q, k, v)))
    with pytest.raises(ValueError, match=r"q: requires_grad=True"):
        fmha.compare(q.clone().requires_grad_(), k, v)


def test_compare_refuses_an_unknown_backend_like_attention():
    q, k, v, _ = make_inputs(1, 1, 4, 1, 16, 64, device=DEVICE)
    with pytest.raises(ValueError, match=r"backend: unknown backend 'nope'; valid names: .*triton.*reference"):
        fmha.attention(q, k, v, backend="nope")
    with pytest.raises(ValueError, match=r"backends: unknown backend 'nope'; valid names: .*triton.*reference"):
        fmha.compare(q, k, v, backends=["triton", "nope"])
    with pytest.raises(ValueError, match=r"backends: unknown backend 3"):
        fmha.compare(q, k, v, backends=[3])
    report = fmha.compare(q, k, v, backends="reference", timing=False)  # one name as a string
    assert [r.backend for r in report.results] == ["reference"] and report.ok


def test_compare_bandwidth_counts_the_keys_each_sequence_has():
    """GB/s counts q, out and the K/V rows of the valid keys (cache_seqlens clamped to [0, S]), not the cache."""
    from fmha.problem import validate

    q, k, v, _ = make_inputs(3, 1, 8, 2, 64, 64, device=DEVICE)
    sl = torch.tensor([64, 10, 100], dtype=torch.int32, device=DEVICE)  # 100 is clamped to 64
    report = fmha.compare(q, k, v, sl, backends=["reference"], reps=4)
    r = report.results[0]
    p = validate(q, k, v, sl)
    # 2-byte elements: q and out [3, 1, 8, 64], then the K and V rows (2 KV heads of 64) of 64 + 10 + 64 keys
    valid = 2 * (2 * 3 * 1 * 8 * 64 + (64 + 10 + 64) * 2 * (64 + 64))
    assert p.bytes_moved(64 + 10 + 64) == valid and p.bytes_moved() == 2 * (2 * 3 * 8 * 64 + 3 * 64 * 2 * 128)
    assert r.gbps == pytest.approx(valid / (r.median_us * 1e-6) / 1e9)
    assert "GB/s (valid KV)" in str(report) and "keys each sequence has" in str(report)


def test_compare_says_how_close_auto_was():
    from fmha.compare import BackendResult, CompareReport

    def report(cuda_us, triton_us, within_noise=False):
        return CompareReport("P", "cuda", 1e-2, [BackendResult("cuda", "ok", median_us=cuda_us),
                                                 BackendResult("triton", "ok", median_us=triton_us),
                                                 BackendResult("reference", "ok", median_us=1.0)],
                             auto_within_noise=within_noise)

    assert report(10.0, 12.0).auto_remark() == ""  # auto's pick ran fastest, by more than the noise
    assert "within noise (1.0% apart)" in report(10.1, 10.0).auto_remark()
    text = report(79.2, 71.2).auto_remark()
    assert "triton ran 11% faster than cuda (71.2 vs 79.2 us)" in text and "--write-tuning" in text, text
    close = report(10.0, 12.0, within_noise=True)
    assert "noise margin, so auto took cuda for its lower per-call cost" in close.auto_remark()
    assert any("cuda (auto, within noise)" in row for row in close.rows())
    assert "auto picks cuda (the table's times were within" in str(close)


def test_available_backends_without_the_interpreter_and_python_m_fmha_say_why():
    """In a fresh CPU process without TRITON_INTERPRET, available_backends() lists no triton and the backend says
    why; `python -m fmha` enables the interpreter itself and says so."""
    import os
    import subprocess
    import sys

    if HAS_GPU:
        pytest.skip("with a GPU, triton is available either way")
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join([repo, env.get("PYTHONPATH", "")])
    script = ("import fmha; from fmha.backends import registry; print(fmha.available_backends()); "
              "print(registry()['triton'].unavailable_reason())")
    r = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "'triton'" not in r.stdout.splitlines()[0] and "TRITON_INTERPRET=1 is not set" in r.stdout, r.stdout
    assert "TRITON_INTERPRET=1" in fmha.available_backends.__doc__
    r = subprocess.run([sys.executable, "-m", "fmha", "--no-timing"], env=env, capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "this command set TRITON_INTERPRET=1" in r.stdout and "triton     available" in r.stdout, r.stdout


def test_main_runs_and_checks(capsys):
    from fmha.__main__ import main
    assert main(["--no-timing"] if not HAS_GPU else []) == 0
    text = capsys.readouterr().out
    assert "reference" in text and "triton" in text and "max abs err" in text
