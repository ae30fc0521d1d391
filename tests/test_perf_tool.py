"""The benchmark tool's CPU smoke run (`python -m perf --dry-run`): every output file, both timing regimes.

The figures of a dry run mean nothing (tiny shapes, wall-clock timing on the CPU); this checks that the
suite's plumbing (contenders, reference check, tables, JSON) works without a GPU.
"""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import pytest
import torch
from conftest import DEVICE

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.skipif(torch.cuda.is_available(), reason="the dry run checks the pipeline where no GPU is; with one, "
                    "`python -m perf` itself is the check (and the H200 machine's Triton 3.6 interpreter cannot run a "
                    "loop over tensor bounds under NumPy 2: int() of a 1-element array)")
def test_dry_run_writes_both_regimes(tmp_path):
    out = tmp_path / "perf"
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": REPO}
    cmd = [sys.executable, "-m", "perf", "--dry-run", "--also-separate", "--preset", "quick", "--shapes", "S512",
           "--contenders", "triton,sdpa-flash", "--out", str(out)]
    r = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    log = r.stdout[-3000:] + r.stderr[-3000:]
    assert r.returncode == 0, log
    md = (out / "results.md").read_text()
    assert "## Per call, CUDA graph" in md and "each call followed by a one-element add" in md, md
    res = json.loads((out / "results.json").read_text())
    assert res["meta"]["also_separate"] is True
    ceil = res["ceilings"]  # the read ceiling timed again after the shapes, beside the figure % uses
    assert ceil["read_after_gbps"] > 0 and ceil["read_after"]["what"].endswith(", after the shapes")
    assert "when timed again after the shapes" in md
    (shape,) = res["shapes"]
    triton = shape["results"]["triton"]
    assert triton["status"] == "ok" and triton["us"] > 0 and triton["separate_us"] > 0, (triton, log)


def test_ceiling_text_and_a_failed_second_read():
    """The results state the read ceiling % uses and, where it was timed again after the shapes, that figure; a
    second read that fails is noted and changes nothing."""
    from perf.timing import ceiling_text, read_again
    ceil = {"read_gbps": 4555.2, "read_source": "read_triton"}
    assert ceiling_text(ceil) == "4555 GB/s, read_triton"
    ceil["read_after_gbps"] = 4490.4
    assert ceiling_text(ceil) == "4555 GB/s, read_triton; 4490 GB/s when timed again after the shapes"
    broken = {"read_gbps": 1.0, "read_source": "read_triton", "tensor_bytes": 64, "read_triton": {}}
    read_again(torch.device("cpu"), broken)  # (no config recorded: KeyError)
    assert broken["read_after"]["error"].startswith("KeyError") and "read_after_gbps" not in broken
    assert ceiling_text(broken) == "1 GB/s, read_triton"


def test_separate_and_also_separate_exclude_each_other():
    from perf.bench import parse_args
    with pytest.raises(SystemExit):
        parse_args(["--separate", "--also-separate"])


def test_write_tuning_refuses_fp16():
    """The dispatcher's table is measured in bf16: an fp16 run may not overwrite it."""
    from perf.bench import parse_args
    assert parse_args(["--dtype", "fp16"]).dtype == "fp16"
    with pytest.raises(SystemExit):
        parse_args(["--dtype", "fp16", "--write-tuning"])


@pytest.mark.skipif(torch.cuda.is_available(), reason="CPU dry run (see test_dry_run_writes_both_regimes)")
def test_dry_run_fp16(tmp_path):
    out = tmp_path / "perf"
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": REPO}
    cmd = [sys.executable, "-m", "perf", "--dry-run", "--dtype", "fp16", "--preset", "quick", "--shapes", "S512",
           "--contenders", "triton", "--out", str(out)]
    r = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    res = json.loads((out / "results.json").read_text())
    assert res["meta"]["dtype"] == "float16" and res["shapes"][0]["dtype"] == "float16"
    assert res["shapes"][0]["results"]["triton"]["status"] == "ok"
    assert "float16 throughout" in (out / "results.md").read_text()


# ---- --preset paged (perf/paged.py): shapes, inputs, the FlashInfer adapter -------------------------------

def test_paged_preset_cases():
    """Issue 26's shapes, taken from the suite's own definitions; page size 1 on two shapes only."""
    from perf.shapes import MQA, PAGE_SIZES, PRESETS, paged_cases
    cases = paged_cases()
    names = [s.name for s, _ in cases]
    assert names == ["serve/B128-T1-Hq32-Hkv8-S8192-D128", "serve/B1-T1-Hq32-Hkv8-S65536-D128",
                     "spec/B32-T4-Hq32-Hkv8-S4096-D128-causal", "d64/B32-T1-Hq32-Hkv8-S8192-D64",
                     "d256/B32-T1-Hq16-Hkv8-S8192-D256", "mqa/B128-T1-Hq16-Hkv1-S4096-D512"]
    assert {s.D for s, _ in cases} == {64, 128, 256, 512}
    assert all(s in PRESETS["full"] for s, _ in cases)  # the suite's shapes, not look-alikes
    (d512,) = [s for s, _ in cases if s.D == 512]
    assert d512 == MQA[0] and (d512.Hq, d512.Hkv) == (16, 1)
    assert PAGE_SIZES == (256, 64, 16, 1)
    for s, ps in cases:
        assert ps[:3] == [256, 64, 16] and all(s.S % p == 0 for p in ps)
    assert [s.name for s, ps in cases if 1 in ps] == names[:2]
    assert paged_cases("D512", [16, 64]) == [(d512, [16, 64])]


def test_paged_preset_arguments():
    from perf.bench import parse_args
    from perf.paged import cases, make_contenders
    args = parse_args(["--preset", "paged", "--page-sizes", "64,16", "--shapes", "spec"])
    assert args.budget_s == 360
    ((shape, ps),) = cases(args)
    assert shape.T == 4 and ps == [64, 16]
    cont, paged = make_contenders(args)
    assert [c.name for c in cont] == ["cuda", "triton", "sdpa-cudnn"]
    assert [c.name for c in paged] == ["cuda", "triton", "flashinfer"]
    cont, paged = make_contenders(parse_args(["--preset", "paged", "--no-flashinfer",
                                              "--contenders", "triton,flashinfer"]))
    assert [c.name for c in cont] == ["triton"] and [c.name for c in paged] == ["triton"]
    dry = cases(parse_args(["--preset", "paged", "--dry-run"]))
    assert len(dry) == 6 and all(s.B <= 2 and s.S <= 256 for s, _ in dry)
    for bad in (["--preset", "paged", "--page-sizes", "0"], ["--preset", "paged", "--page-sizes", "x"]):
        with pytest.raises(SystemExit):
            cases(parse_args(bad))
    for bad in (["--page-sizes", "16"], ["--no-flashinfer"], ["--preset", "paged", "--write-tuning"]):
        with pytest.raises(SystemExit):
            parse_args(bad)
    with pytest.raises(SystemExit):
        make_contenders(parse_args(["--preset", "paged", "--contenders", "flex"]))


@pytest.mark.parametrize("page_size", [1, 4, 7, 16, 64])
def test_build_paged_holds_the_contiguous_cache(page_size):
    from perf.paged import build_paged
    B, S, H, D = 3, 40, 2, 8
    k = torch.randn(B, S, H, D, dtype=torch.bfloat16)
    v = torch.randn(B, S, H, D, dtype=torch.bfloat16)
    kp, vp, bt = build_paged(k, v, page_size, torch.Generator().manual_seed(0))
    nbps = -(-S // page_size)
    assert bt.dtype == torch.int32 and tuple(bt.shape) == (B, nbps) and bt.is_contiguous()
    assert tuple(kp.shape) == tuple(vp.shape) == (B * nbps, page_size, H, D)
    assert torch.equal(bt.flatten().sort().values, torch.arange(B * nbps, dtype=torch.int32))  # a permutation
    if B * nbps > 8:  # shuffled: pages that follow each other in a sequence mostly do not in memory
        assert (bt[:, 1:] - bt[:, :-1] != 1).float().mean() > 0.5
    j = torch.arange(S)
    rows = bt.long()[:, j // page_size]  # [B, S]
    assert torch.equal(kp[rows, j % page_size], k) and torch.equal(vp[rows, j % page_size], v)
    if S % page_size:
        assert not kp[bt[:, -1].long(), S % page_size:].any()


def test_paged_inputs_on_cpu():
    from perf.paged import PagedInputs
    from perf.shapes import Shape
    s = Shape("t", B=2, S=48, T=2, Hq=4, Hkv=2, D=64)
    inp = PagedInputs(s, 2, torch.device("cpu"), 0, torch.bfloat16)
    assert inp.cache_seqlens.tolist() == [48, 48] and inp.cache_seqlens.dtype == torch.int32
    for P in (16, 1, 32):
        inp.page(P)
        assert inp.page_size == P and len(inp.paged_sets) == 2 and inp.num_blocks == 2 * -(-48 // P)
        for (q, k, v), (qp, kp, vp, bt) in zip(inp.sets, inp.paged_sets):
            assert qp is q
            j = torch.arange(48)
            assert torch.equal(kp[bt.long()[:, j // P], j % P], k) and torch.equal(vp[bt.long()[:, j // P], j % P], v)
    first, second = inp.paged_sets[0][3], inp.paged_sets[1][3]
    assert not torch.equal(first, second)  # each input set has a table of its own
    inp.release_pages()
    assert inp.paged_sets is None and inp.sets is not None
    inp.release()
    assert inp.sets is None


def test_flashinfer_plan_args_from_a_block_table():
    from perf.paged import flashinfer_plan_args
    bt = torch.tensor([[5, 2, 9, 0], [1, 7, 3, 4], [8, 6, 10, 11], [12, 13, 14, 15], [16, 17, 18, 19]],
                      dtype=torch.int32)
    seqlens = torch.tensor([40, 64, 0, 1, 100], dtype=torch.int32)  # 100 > capacity 64: clamped
    indptr, indices, last = flashinfer_plan_args(bt, seqlens, 16)
    assert indptr.dtype == indices.dtype == last.dtype == torch.int32
    assert indptr.tolist() == [0, 3, 7, 7, 8, 12]
    assert indices.tolist() == [5, 2, 9, 1, 7, 3, 4, 12, 16, 17, 18, 19]
    assert last.tolist() == [8, 16, 0, 1, 16]
    # page size 1 and one page per sequence
    indptr, indices, last = flashinfer_plan_args(bt, torch.tensor([4, 2, 1, 3, 4], dtype=torch.int32), 1)
    assert indptr.tolist() == [0, 4, 6, 7, 10, 14] and last.tolist() == [1] * 5
    assert indices.tolist() == [5, 2, 9, 0, 1, 7, 8, 12, 13, 14, 16, 17, 18, 19]
    indptr, indices, last = flashinfer_plan_args(bt[:, :1], torch.tensor([3, 256, 255, 1, 0], dtype=torch.int32), 256)
    assert indptr.tolist() == [0, 1, 2, 3, 4, 4] and indices.tolist() == [5, 1, 8, 12]
    assert last.tolist() == [3, 256, 255, 1, 0]


class _FakeFlashInfer:
    """Stands in for `flashinfer`: wrappers that record their arguments and compute attention from what plan()
    was given (indptr / indices / last_page_len), so that a wrong plan fails the suite's correctness gate."""

    def __init__(self, fail_plan=None):
        self.calls = []
        self.fail_plan = fail_plan
        fake = self

        class _Wrapper:
            kind = None

            def __init__(self, workspace, kv_layout="NHD", **kw):
                self.workspace, self.kv_layout, self.kw = workspace, kv_layout, kw
                fake.calls.append(("init", self.kind, kv_layout, kw))

            def _plan(self, qo_indptr, indptr, indices, last, Hq, Hkv, D, page_size, **kw):
                if fake.fail_plan:
                    raise RuntimeError(fake.fail_plan)
                fake.calls.append(("plan", self.kind, qo_indptr, indptr, indices, last, Hq, Hkv, D, page_size, kw))
                self.plan_args = (qo_indptr, indptr, indices, last, page_size, kw)

            def run(self, q, paged_kv_cache, *extra, **kw):
                from fmha.reference import attention_reference
                import math
                fake.calls.append(("run", self.kind, q, paged_kv_cache, extra))
                sinks = None
                if self.kind == "sink":  # its additional tensor and scalar: sink, sm_scale
                    sinks, sm_scale = extra
                    assert sm_scale == 1.0 / math.sqrt(q.shape[-1])
                kp, vp = paged_kv_cache
                out = kw.pop("out", None)  # given, or FlashInfer's prefill run() zero-fills one inside the timing
                assert out is not None and out.shape == q.shape[:-1] + vp.shape[-1:] and out.dtype == q.dtype
                qo_indptr, indptr, indices, last, P, kw = self.plan_args
                B = len(last)
                T = q.shape[0] // B
                for b in range(B):
                    pages = indices[indptr[b]:indptr[b + 1]].long()
                    n = (len(pages) - 1) * P + int(last[b])
                    k = kp[pages].reshape(-1, *kp.shape[2:])[:n]
                    v = vp[pages].reshape(-1, *vp.shape[2:])[:n]
                    o, _ = attention_reference(q[b * T:(b + 1) * T][None], k[None], v[None], None,
                                               1.0 / math.sqrt(q.shape[-1]), bool(kw.get("causal", False)),
                                               window_size=(kw.get("window_left", -1), -1),
                                               softcap=kw.get("logits_soft_cap") or 0.0, sinks=sinks)
                    out[b * T:(b + 1) * T] = o[0].to(q.dtype)
                return out

        class BatchDecodeWithPagedKVCacheWrapper(_Wrapper):
            kind = "decode"

            def plan(self, indptr, indices, last, Hq, Hkv, D, page_size, **kw):
                self._plan(None, indptr, indices, last, Hq, Hkv, D, page_size, **kw)

        class BatchPrefillWithPagedKVCacheWrapper(_Wrapper):
            kind = "prefill"

            def plan(self, qo_indptr, indptr, indices, last, Hq, Hkv, D, page_size, **kw):
                self._plan(qo_indptr, indptr, indices, last, Hq, Hkv, D, page_size, **kw)

        class BatchAttentionWithAttentionSinkWrapper(BatchPrefillWithPagedKVCacheWrapper):
            kind = "sink"

            # FlashInfer 0.7.2's keywords (a subset), so that a misspelt one fails here too
            def __init__(self, workspace, kv_layout="NHD", use_cuda_graph=False, backend="auto",
                         q_data_type=torch.bfloat16, kv_data_type=torch.bfloat16, head_dim_qk=128, head_dim_vo=128,
                         window_left=-1):
                super().__init__(workspace, kv_layout, backend=backend, q_data_type=q_data_type,
                                 kv_data_type=kv_data_type, head_dim_qk=head_dim_qk, head_dim_vo=head_dim_vo,
                                 window_left=window_left)

            def plan(self, *args, **kw):
                assert kw.get("window_left", -1) == self.kw["window_left"]  # compiled for its window
                super().plan(*args, **kw)

            def run(self, q, paged_kv_cache, *extra, **kw):
                sink = extra[0]
                assert sink.dtype == torch.float32 and tuple(sink.shape) == (q.shape[1],)
                return super().run(q, paged_kv_cache, *extra, **kw)

        self.BatchDecodeWithPagedKVCacheWrapper = BatchDecodeWithPagedKVCacheWrapper
        self.BatchPrefillWithPagedKVCacheWrapper = BatchPrefillWithPagedKVCacheWrapper
        self.BatchAttentionWithAttentionSinkWrapper = BatchAttentionWithAttentionSinkWrapper


def _paged_run(contender, shape, page_size):
    import time as _time
    from perf.bench import parse_args, reference_rows
    from perf.paged import PagedInputs, _run
    args = parse_args(["--preset", "paged", "--dry-run"])
    inp = PagedInputs(shape, 2, torch.device("cpu"), 0, torch.bfloat16)
    inp.page(page_size)
    rows, ref = reference_rows(inp)
    return _run(contender, inp, rows, ref, args, torch.device("cpu"), _time.monotonic() + 600), inp


@pytest.mark.parametrize("T,page_size", [(1, 16), (1, 1), (1, 64), (3, 16)])
def test_flashinfer_adapter_with_a_fake_module(T, page_size):
    from perf.paged import FlashInferPaged
    from perf.shapes import Shape
    fake = _FakeFlashInfer()
    c = FlashInferPaged(loader=lambda: fake, require_cuda=False)
    s = Shape("t", B=3, S=40, T=T, Hq=4, Hkv=2, D=64)
    r, inp = _paged_run(c, s, page_size)
    assert r["status"] == "ok" and r["cosine"] >= 0.9999, r  # the attention of what plan() described
    kind = "decode" if T == 1 else "prefill"
    inits = [x for x in fake.calls if x[0] == "init"]
    plans = [x for x in fake.calls if x[0] == "plan"]
    assert len(inits) == len(plans) == 2  # one wrapper per input set, planned once, outside timing
    for _, k, layout, kw in inits:
        assert k == kind and layout == "NHD"
        assert kw == ({"use_tensor_cores": True} if T == 1 else {"backend": "fa2"})
    nbps = -(-40 // page_size)
    for (_, k, qo_indptr, indptr, indices, last, Hq, Hkv, D, P, kw), (q, kp, vp, bt) in zip(plans, inp.paged_sets):
        assert (Hq, Hkv, D, P) == (4, 2, 64, page_size)
        assert kw["q_data_type"] == kw["kv_data_type"] == torch.bfloat16
        assert indptr.tolist() == [0, nbps, 2 * nbps, 3 * nbps]
        assert torch.equal(indices, bt.flatten()) and last.tolist() == [40 - (nbps - 1) * page_size] * 3
        if T == 1:
            assert qo_indptr is None and "causal" not in kw
        else:
            assert qo_indptr.tolist() == [0, T, 2 * T, 3 * T] and kw["causal"] is True
    runs = [x for x in fake.calls if x[0] == "run"]
    assert runs and all(tuple(x[2].shape) == (3 * T, 4, 64) for x in runs)
    assert any(x[3][0] is inp.paged_sets[0][1] and x[3][1] is inp.paged_sets[0][2] for x in runs)  # the pools, no copy


@pytest.mark.parametrize("T,cap", [(1, 0.0), (3, 0.0), (1, 30.0)])
def test_flashinfer_on_the_contiguous_cache_with_a_window(T, cap):
    """--preset window: FlashInfer reads the suite's contiguous caches as pools of pages in order (views, no copy)
    and plans the window (window_left) and the cap (logits_soft_cap); the suite's reference gate passes only where
    the fake computed what plan() described."""
    from perf.bench import ShapeInputs, parse_args, reference_rows, run_contender
    from perf.paged import FlashInferContiguous
    from perf.shapes import Shape
    fake = _FakeFlashInfer()
    c = FlashInferContiguous(page_size=16, loader=lambda: fake, require_cuda=False)
    s = Shape("t", B=3, S=64, T=T, Hq=4, Hkv=2, D=64, window=20, softcap=cap)
    args = parse_args(["--preset", "window", "--dry-run", "--no-graph"])
    inp = ShapeInputs(s, 2, torch.device("cpu"), 0, torch.bfloat16)
    rows, ref = reference_rows(inp)
    r = run_contender(c, inp, rows, ref, args, torch.device("cpu"))
    assert r["status"] == "ok" and r["cosine"] >= 0.9999, r
    plans = [x for x in fake.calls if x[0] == "plan"]
    assert len(plans) == 2
    for (_, _, _, indptr, indices, last, Hq, Hkv, D, P, kw), (q, k, v) in zip(plans, inp.sets):
        assert P == 16 and indptr.tolist() == [0, 4, 8, 12] and indices.tolist() == list(range(12))
        assert last.tolist() == [16] * 3 and kw["window_left"] == 20
        assert kw.get("logits_soft_cap") == (cap or None)
    runs = [x for x in fake.calls if x[0] == "run"]
    assert any(x[3][0].data_ptr() == inp.sets[0][1].data_ptr() for x in runs)  # the cache itself
    assert "window_left" in c.note and "64-token" not in c.note and "16-token pages" in c.note
    odd = Shape("t", B=1, S=40, Hq=4, Hkv=2, D=64, window=8)  # not a whole number of pages
    r = run_contender(c, ShapeInputs(odd, 2, torch.device("cpu"), 0, torch.bfloat16), [0], ref[:1], args,
                      torch.device("cpu"))
    assert r["status"] == "unsupported" and "multiple of the 16-token pages" in r["reason"], r


@pytest.mark.parametrize("T", [1, 3])
def test_sinks_beside_flashinfer_flex_and_sdpa(T):
    """gpt-oss rows carry sink logits: fmha takes them, FlashInfer through its attention-sink wrapper (sink and
    sm_scale at run(), the window at construction and plan()), Flex by rescaling its rows from its LSE, SDPA
    refuses; the gate fails a contender that drops them."""
    from perf.bench import FmhaContender, ShapeInputs, parse_args, reference_rows, run_contender
    from perf.paged import FlashInferContiguous
    from perf.peers import FlexContender, SdpaContender
    from perf.shapes import Shape
    s = Shape("swa", B=2, S=64, T=T, Hq=4, Hkv=2, D=64, window=20, sinks=True)
    assert s.name.endswith("-W20-sinks")
    args = parse_args(["--preset", "window", "--dry-run", "--no-graph"])
    dev = torch.device(DEVICE)  # (the Triton contender takes CPU tensors only under the interpreter)
    inp = ShapeInputs(s, 2, dev, 0, torch.bfloat16)
    assert inp.sinks.shape == (4,) and inp.sinks.dtype == torch.float32
    assert 3 <= inp.sinks.min() and inp.sinks.max() <= 7
    rows, ref = reference_rows(inp)
    fake = _FakeFlashInfer()
    for c in (FlashInferContiguous(page_size=16, loader=lambda: fake, require_cuda=False),
              FlexContender(compile=False), FmhaContender("triton")):
        r = run_contender(c, inp, rows, ref, args, dev)
        assert r["status"] == "ok" and r["cosine"] >= 0.9999, (c.name, r)
    inits = [x for x in fake.calls if x[0] == "init"]
    assert inits and all(k == "sink" and kw["window_left"] == 20 and kw["head_dim_qk"] == 64 and kw["backend"] == "fa2"
                         for _, k, _, kw in inits)
    runs = [x for x in fake.calls if x[0] == "run"]
    assert all(x[4][0] is inp.sinks for x in runs)
    r = run_contender(SdpaContender("sdpa-cudnn"), inp, rows, ref, args, dev)
    assert r["status"] == "unsupported" and "sinks" in r["reason"], r
    no_sinks = ShapeInputs(s, 2, dev, 0, torch.bfloat16)
    no_sinks.sinks = None  # a contender that dropped them: the gate catches it
    r = run_contender(FlexContender(compile=False), no_sinks, rows, ref, args, dev)
    assert r["status"] == "WRONG" and r["cosine"] < 0.9999, r


def test_window_preset_shapes_and_masks():
    from perf.bench import ShapeInputs, parse_args, problem_of
    from perf.shapes import WINDOW, Shape, select
    assert select("window") == WINDOW and all(s.window >= 0 and s.S > s.window + s.T for s in WINDOW)
    s = Shape("swa", B=2, S=10, T=3, Hq=2, Hkv=1, D=64, window=4)
    assert s.name == "swa/B2-T3-Hq2-Hkv1-S10-D64-causal-W4" and s.kv_tokens == 2 * 7 and s.masked
    mask = ShapeInputs(s, 1, torch.device("cpu"), 0, torch.bfloat16).bottom_right_mask()
    j = torch.arange(10)
    for t in range(3):  # query t at i = 7 + t sees keys i - 4 .. i
        assert mask[t].tolist() == ((j >= 3 + t) & (j <= 7 + t)).tolist()
    assert not Shape("swa", B=1, S=10, window=9).masked  # a window over the whole cache hides nothing
    p = problem_of(Shape("swa", B=1, S=64, D=64, window=16, softcap=5.0), torch.device("cpu"), torch.bfloat16)
    assert (p.window_left, p.softcap) == (16, 5.0)
    tiny = WINDOW[0].tiny()
    assert tiny.window == tiny.S // 4 and tiny.window >= 1
    with pytest.raises(SystemExit):
        parse_args(["--preset", "window", "--write-tuning"])
    assert parse_args(["--preset", "window", "--no-flashinfer"]).no_flashinfer
    from perf.bench import make_contenders  # --contenders as the paged preset reads it
    names = [c.name for c in make_contenders(parse_args(["--preset", "window", "--contenders", "triton,flashinfer"]))]
    assert names == ["triton", "flashinfer"]
    args = parse_args(["--preset", "window", "--no-flashinfer", "--contenders", "triton,flashinfer"])
    assert [c.name for c in make_contenders(args)] == ["triton"]
    with pytest.raises(SystemExit):  # FlashInfer is a contender of the window preset only
        make_contenders(parse_args(["--preset", "quick", "--contenders", "flashinfer"]))


@pytest.mark.skipif(torch.cuda.is_available(), reason="CPU dry run (see test_dry_run_writes_both_regimes)")
def test_dry_run_window(tmp_path):
    out = tmp_path / "perf"
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": REPO}
    cmd = [sys.executable, "-m", "perf", "--preset", "window", "--dry-run", "--shapes", "T4,cap50", "--contenders",
           "triton,sdpa-efficient,flex,flashinfer", "--out", str(out)]
    r = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    log = r.stdout[-3000:] + r.stderr[-3000:]
    assert r.returncode == 0, log
    assert not (out / "results.md").exists()  # the window preset's files are its own
    md = (out / "window.md").read_text()
    assert "causal window 8 sinks |" in md and "window 16 softcap 50 |" in md, md
    res = json.loads((out / "window.json").read_text())
    assert [s["window"] for s in res["shapes"]] == [8, 16]
    for shape in res["shapes"]:
        assert shape["results"]["triton"]["status"] == "ok", log
        assert shape["results"]["flex"]["status"] == "ok", log
        assert shape["results"]["flashinfer"]["status"] == "unsupported"
    assert "softcap" in res["shapes"][1]["results"]["sdpa-efficient"]["reason"]
    assert [s["sinks"] for s in res["shapes"]] == [True, False]  # gpt-oss's layer carries its sinks
    assert "sinks" in res["shapes"][0]["results"]["sdpa-efficient"]["reason"]
    assert (out / "raw" / "window-samples.json").exists()


def test_flashinfer_failures_never_break_the_run(monkeypatch):
    from perf import paged
    from perf.peers import Unsupported
    from perf.shapes import Shape
    s = Shape("t", B=2, S=32, Hq=4, Hkv=2, D=64)
    # no flashinfer to import: a reason, said once
    monkeypatch.setattr(paged, "_FLASHINFER", {})
    monkeypatch.setitem(sys.modules, "flashinfer", None)
    with pytest.raises(Unsupported, match="import flashinfer failed"):
        paged.import_flashinfer()
    r, _ = _paged_run(paged.FlashInferPaged(), s, 16)
    assert r["status"] == "unsupported" and "import flashinfer failed" in r["reason"]
    # a module build failure: reported, and not compiled again for the next page size
    fake = _FakeFlashInfer(fail_plan="ninja: build stopped: subcommand failed.")
    c = paged.FlashInferPaged(loader=lambda: fake, require_cuda=False)
    r, _ = _paged_run(c, s, 16)
    assert r["status"] == "unsupported" and "ninja" in r["reason"]
    fake.fail_plan = None
    r, _ = _paged_run(c, s, 64)
    assert r["status"] == "unsupported" and "not retried" in r["reason"]
    assert not [x for x in fake.calls if x[0] == "plan"]
    # a refusal of one shape (no build failure) is per page size
    fake2 = _FakeFlashInfer(fail_plan="page_size 1 not supported")
    c2 = paged.FlashInferPaged(loader=lambda: fake2, require_cuda=False)
    assert _paged_run(c2, s, 1)[0]["status"] == "unsupported"
    fake2.fail_plan = None
    assert _paged_run(c2, s, 16)[0]["status"] == "ok"
    # the real module on a CPU-only run
    c3 = paged.FlashInferPaged(loader=lambda: fake, require_cuda=True)
    r, _ = _paged_run(c3, Shape("u", B=2, S=32, Hq=4, Hkv=2, D=128), 16)
    assert r["status"] == "unsupported" and "CUDA" in r["reason"]


def test_paged_summary_and_targets():
    from perf.paged import markdown, summary_rows, target_for
    assert target_for(256)[0] == target_for(64)[0] == 1.03
    assert abs(target_for(16)[0] - 1 / 0.9) < 1e-12 and target_for(1)[0] is None
    ok = lambda us: {"status": "ok", "us": us, "gbps": 1000.0, "pct_read_ceiling": 20.0, "is_fmha": True}
    rec = {"name": "serve/B1-T1-Hq32-Hkv8-S8192-D128", "family": "serve", "B": 1, "T": 1, "Hq": 32, "Hkv": 8,
           "S": 8192, "D": 128, "causal": True,
           "contiguous": {"cuda": ok(100.0), "triton": ok(200.0), "sdpa-cudnn": ok(110.0)},
           "paged": {"64": {"page_size": 64, "results": {"cuda": ok(102.0), "triton": ok(210.0),
                                                          "flashinfer": ok(120.0)}},
                     "16": {"page_size": 16, "results": {"cuda": ok(115.0), "triton": ok(230.0),
                                                          "flashinfer": {"status": "unsupported", "reason": "no"}},
                            "contiguous_again": {"cuda": ok(102.0), "triton": {"status": "error", "reason": "x"}}},
                     "1": {"page_size": 1, "results": {"cuda": ok(300.0), "triton": {"status": "error",
                                                                                      "reason": "boom"}}}}}
    rows = summary_rows([rec])
    r64, r16, r1 = rows
    assert abs(r64["cuda_ratio"] - 1.02) < 1e-9 and r64["target_met"] is True
    assert abs(r64["cuda_speedup_vs_flashinfer"] - 120 / 102) < 1e-9 and r64["cudnn_contiguous_us"] == 110.0
    assert r16["target_met"] is False and r16["flashinfer_paged_us"] is None
    # the contiguous call timed again after a page size's calls is that row's baseline (else the first timing)
    assert r16["cuda_contiguous_us"] == 102.0 and r16["cuda_contiguous_first_us"] == 100.0
    assert abs(r16["cuda_ratio"] - 115 / 102) < 1e-9 and r16["triton_contiguous_us"] == 200.0
    assert r1["target_met"] is None and r1["triton_paged_us"] is None
    meta = {"gpu": "X", "date": "d", "command": "c", "torch": "t", "triton": "t", "fmha": "f", "elapsed_s": 1,
            "replays": 30, "settle_ms": 200, "min_cosine": 0.9999}
    md = markdown({"meta": meta, "ceilings": {"read_gbps": 4000.0, "read_source": "read_triton"},
                   "shapes": [rec], "rows": rows})
    assert "| 64 | 102.0 | 100.0 | 1.020 | met" in md and "**MISSED**" in md and "error: boom" in md


@pytest.mark.skipif(torch.cuda.is_available(), reason="CPU dry run (see test_dry_run_writes_both_regimes)")
def test_dry_run_paged(tmp_path):
    out = tmp_path / "perf"
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": REPO}
    cmd = [sys.executable, "-m", "perf", "--preset", "paged", "--dry-run", "--shapes", "serve/B1-", "--page-sizes",
           "64,1", "--contenders", "triton,sdpa-cudnn,flashinfer", "--out", str(out)]
    r = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    log = r.stdout[-3000:] + r.stderr[-3000:]
    assert r.returncode == 0, log
    md = (out / "paged.md").read_text()
    assert "| serve B1 T1 8/2h S256 D128 | 64 |" in md and "| serve B1 T1 8/2h S256 D128 | 1 |" in md, md
    res = json.loads((out / "paged.json").read_text())
    (shape,) = res["shapes"]
    assert shape["contiguous"]["triton"]["status"] == "ok", log
    assert shape["contiguous"]["sdpa-cudnn"]["status"] == "unsupported"
    assert set(shape["paged"]) == {"64", "1"} and [r["page_size"] for r in res["rows"]] == [64, 1]
    for entry in shape["paged"].values():
        assert entry["results"]["triton"]["status"] != "WRONG"
        assert entry["results"]["flashinfer"]["status"] == "unsupported"
    assert (out / "raw" / "paged-samples.json").exists()


# ---- --preset deepseek (perf/deepseek.py): shapes, inputs, targets, the FlashInfer MLA adapter --------------

def test_deepseek_preset_shapes():
    """Issue 27's table at T = 1, 2, 4 with (576, 512), and the two V4 shapes at (512, 512)."""
    from perf.deepseek import memory_bound
    from perf.shapes import DEEPSEEK, PRESETS, select
    assert PRESETS["deepseek"] == DEEPSEEK and len(DEEPSEEK) == 14
    mla = [s for s in DEEPSEEK if s.family == "mla"]
    assert {(s.B, s.Hq, s.S) for s in mla} == {(128, 16, 4096), (64, 128, 4096), (16, 128, 4096), (32, 64, 8192)}
    assert sorted(s.T for s in mla) == [1] * 4 + [2] * 4 + [4] * 4
    assert all((s.D, s.Dv, s.Hkv, s.causal) == (576, 512, 1, True) for s in mla)
    v4 = [s for s in DEEPSEEK if s.family == "v4"]
    assert [(s.B, s.Hq, s.S, s.T, s.D, s.Dv) for s in v4] == [(32, 64, 8192, 1, 512, 512), (64, 128, 4096, 1, 512, 512)]
    assert DEEPSEEK[0].name == "mla/B128-T1-Hq16-Hkv1-S4096-D576-Dv512"
    assert DEEPSEEK[1].name == "mla/B128-T2-Hq16-Hkv1-S4096-D576-Dv512-causal"
    assert len({s.name for s in DEEPSEEK}) == 14
    assert [s.name for s in DEEPSEEK if memory_bound(s)] == [
        "mla/B128-T1-Hq16-Hkv1-S4096-D576-Dv512", "mla/B128-T2-Hq16-Hkv1-S4096-D576-Dv512-causal",
        "mla/B128-T4-Hq16-Hkv1-S4096-D576-Dv512-causal", "mla/B32-T1-Hq64-Hkv1-S8192-D576-Dv512",
        "v4/B32-T1-Hq64-Hkv1-S8192-D512-Dv512"]
    assert select("deepseek", "v4") == v4
    tiny = DEEPSEEK[5].tiny()
    assert (tiny.B, tiny.S, tiny.Hq, tiny.T, tiny.D, tiny.Dv) == (2, 128, 4, 4, 576, 512)


def test_deepseek_bytes_and_flops():
    from fmha.reference import visible_mask
    from perf.deepseek import TARGET_READ_FRACTION, flops, latent_bytes
    from perf.shapes import DEEPSEEK, LatentShape
    first = DEEPSEEK[0]
    assert latent_bytes(first) == 128 * 4096 * 576 * 2
    # the issue's figure: B = 128, 16 heads, S = 4096 at 95% of an H200's ~4.65 TB/s read ceiling
    assert 136 < latent_bytes(first) / (TARGET_READ_FRACTION * 4652e9) * 1e6 <= 137
    assert flops(first) == 2 * 128 * 16 * 4096 * (576 + 512)
    assert flops(DEEPSEEK[-1], 512, 512) == flops(DEEPSEEK[-1])
    for T in (1, 2, 4, 7):  # causal rows see fewer keys: the reference's own mask, counted
        s = LatentShape("t", B=3, S=50, Hq=4, T=T)
        keys = int(visible_mask(torch.full((3,), 50, dtype=torch.int32), T, 50, True).sum())
        assert flops(s) == 2 * 4 * keys * (576 + 512), T


def test_deepseek_preset_arguments():
    from perf.bench import parse_args
    from perf.deepseek import CONTENDERS, cases, make_contenders
    args = parse_args(["--preset", "deepseek"])
    assert args.budget_s == 300 and len(cases(args)) == 14
    assert [c.name for c in make_contenders(args)] == list(CONTENDERS)
    args = parse_args(["--preset", "deepseek", "--no-flashinfer", "--shapes", "v4",
                       "--contenders", "fmha-triton,flashinfer-mla,fmha-cuda-separate"])
    assert [c.name for c in make_contenders(args)] == ["fmha-triton", "fmha-cuda-separate"]
    assert [s.family for s in cases(args)] == ["v4", "v4"]
    dry = cases(parse_args(["--preset", "deepseek", "--dry-run"]))
    assert [(s.family, s.T) for s in dry] == [("mla", 1), ("mla", 2), ("mla", 4), ("v4", 1)]
    assert all(s.B <= 2 and s.S == 128 and s.Hq <= 4 for s in dry)
    for bad in (["--preset", "deepseek", "--page-sizes", "64"], ["--preset", "deepseek", "--write-tuning"]):
        with pytest.raises(SystemExit):
            parse_args(bad)
    with pytest.raises(SystemExit):
        make_contenders(parse_args(["--preset", "deepseek", "--contenders", "cuda"]))


def _deepseek_run(contender, shape):
    import time as _time
    from perf.bench import parse_args
    from perf.deepseek import PAGE_SIZE, LatentInputs
    from perf.paged import _run
    args = parse_args(["--preset", "deepseek", "--dry-run"])
    inp = LatentInputs(shape, 2, torch.device("cpu"), 0, torch.bfloat16)
    inp.build_separate()
    inp.build_pages(PAGE_SIZE)
    rows, refs = inp.references()
    deadline = _time.monotonic() + 600
    return _run(contender, inp, rows, refs[contender.reference], args, torch.device("cpu"), deadline), inp


_DS_SHAPES = {"mla": dict(B=3, S=100, Hq=4, T=1), "mla-causal": dict(B=3, S=100, Hq=4, T=3),
              "v4": dict(B=2, S=130, Hq=4, D=512, Dv=512)}


def test_deepseek_inputs_on_cpu():
    from perf.deepseek import LatentInputs
    from perf.shapes import LatentShape
    s = LatentShape("mla", **_DS_SHAPES["mla-causal"])
    inp = LatentInputs(s, 2, torch.device("cpu"), 0, torch.bfloat16)
    inp.build_separate()
    inp.build_pages(64)
    assert inp.cache_seqlens.tolist() == [100] * 3 and inp.softmax_scale == 1 / math.sqrt(576)
    j = torch.arange(100)
    for (q, kv), (qs, k, v), (qp, pool, bt) in zip(inp.sets, inp.separate_sets, inp.paged_sets):
        assert tuple(q.shape) == (3, 3, 4, 576) and tuple(kv.shape) == (3, 100, 1, 576) and qp is q
        assert torch.equal(qs, q[..., :512]) and torch.equal(k, kv[..., :512]) and torch.equal(v, kv[..., :512])
        assert k.is_contiguous() and v.data_ptr() != k.data_ptr()  # two tensors: 2 x 512 columns read
        assert tuple(pool.shape) == (3 * 2, 64, 1, 576) and torch.equal(pool[bt.long()[:, j // 64], j % 64], kv)
    rows, refs = inp.references()
    assert rows == [0, 2] and tuple(refs["latent"].shape) == tuple(refs["separate"].shape) == (2, 3, 4, 512)
    assert not torch.allclose(refs["latent"], refs["separate"])  # the rope columns count in the latent problem
    inp.release()
    assert inp.sets is None and inp.paged_sets is None


@pytest.mark.parametrize("kind", list(_DS_SHAPES))
@pytest.mark.parametrize("layout", ["latent", "paged", "separate"])
def test_deepseek_fmha_calls(kind, layout):
    """Each fmha call shape of the preset, on the fp32 reference backend: the gate compares it with the right
    reference (the separate call computes the 512-column problem)."""
    from perf.deepseek import FmhaCall
    from perf.shapes import LatentShape
    r, _ = _deepseek_run(FmhaCall("x", "reference", layout), LatentShape(kind.split("-")[0], **_DS_SHAPES[kind]))
    assert r["status"] == "ok" and r["cosine"] >= 0.9999, r


class _FakeFlashInferMLA:
    """Stands in for `flashinfer` with its MLA wrapper: plan() records its arguments, run() computes the attention
    they describe (pages, lengths, causal, sm_scale) from the q_nope / q_pe and ckv / kpe tensors it is given, so
    that a wrong plan or a wrong view fails the suite's correctness gate."""

    def __init__(self, fail_plan=None):
        import types
        self.calls, self.fail_plan = [], fail_plan
        fake = self

        class MLAPlanMetadata:
            def __init__(self, *tensors):
                self.tensors = tensors

            @classmethod
            def csr(cls, qo_indptr, kv_indptr, kv_indices, kv_len_arr):
                return cls(qo_indptr, kv_indptr, kv_indices, kv_len_arr)

        class BatchMLAPagedAttentionWrapper:
            _planned_backend_name = "fake"

            def __init__(self, workspace, backend="auto"):
                fake.calls.append(("init", backend))

            def plan(self, *, metadata, **kw):
                if fake.fail_plan:
                    raise RuntimeError(fake.fail_plan)
                self.metadata, self.kw = metadata, kw
                fake.calls.append(("plan", metadata.tensors, kw))

            def run(self, *, query, kv_cache, out):
                from fmha.reference import attention_reference
                fake.calls.append(("run", query, kv_cache, out))
                (q_nope, q_pe), (ckv, kpe) = query, kv_cache
                qo, indptr, indices, kv_len = self.metadata.tensors
                q = torch.cat([q_nope, q_pe], -1).float()
                for b in range(len(kv_len)):
                    pages = indices[indptr[b]:indptr[b + 1]].long()
                    k = torch.cat([ckv[pages], kpe[pages]], -1).flatten(0, 1)[:int(kv_len[b])].float()
                    o, _ = attention_reference(q[None, qo[b]:qo[b + 1]], k[None, :, None],
                                               k[None, :, None, :ckv.shape[-1]], None, self.kw["sm_scale"],
                                               self.kw["causal"])
                    out[qo[b]:qo[b + 1]] = o[0].to(out.dtype)
                return out

        self.mla = types.SimpleNamespace(BatchMLAPagedAttentionWrapper=BatchMLAPagedAttentionWrapper,
                                         MLAPlanMetadata=MLAPlanMetadata)


@pytest.mark.parametrize("kind", list(_DS_SHAPES))
def test_flashinfer_mla_adapter_with_a_fake_module(kind):
    from perf.deepseek import FlashInferMLA
    from perf.paged import flashinfer_plan_args
    from perf.shapes import LatentShape
    fake = _FakeFlashInferMLA()
    s = LatentShape(kind.split("-")[0], **_DS_SHAPES[kind])
    r, inp = _deepseek_run(FlashInferMLA(loader=lambda: fake, require_cuda=False), s)
    assert r["status"] == "ok" and r["cosine"] >= 0.9999, r  # the attention of what plan() described
    assert "planned 'fake'" in r["note"] and r["plan_s"] >= 0
    plans = [x for x in fake.calls if x[0] == "plan"]
    assert [x for x in fake.calls if x[0] == "init"] == [("init", "auto")] * 2 and len(plans) == 2
    ckv, kpe = s.Dv, s.D - s.Dv
    for (_, (qo, indptr, indices, kv_len), kw), (q, pool, bt) in zip(plans, inp.paged_sets):
        assert kw == {"num_heads": 4, "head_dim_ckv": ckv, "head_dim_kpe": kpe, "page_size": 64,
                      "causal": s.T > 1, "sm_scale": 1 / math.sqrt(s.D), "q_data_type": torch.bfloat16,
                      "kv_data_type": torch.bfloat16}
        want = flashinfer_plan_args(bt, inp.cache_seqlens, 64)
        assert qo.tolist() == [s.T * b for b in range(s.B + 1)] and kv_len is inp.cache_seqlens
        assert torch.equal(indptr, want[0]) and torch.equal(indices, want[1])
    for _, (q_nope, q_pe), (ckv_cache, kpe_cache), out in [x for x in fake.calls if x[0] == "run"]:
        pools = [p for _, p, _ in inp.paged_sets if p.data_ptr() == ckv_cache.data_ptr()]
        assert pools, "ckv_cache is not a view of a page pool"  # the same pool fmha-cuda-paged64 reads
        assert tuple(ckv_cache.shape[1:]) == (64, ckv) and kpe_cache.shape[-1] == q_pe.shape[-1] == kpe
        assert tuple(q_nope.shape) == (s.B * s.T, 4, ckv)
        if kpe:  # the columns right after ckv's, rows as ckv's (an empty view has no address)
            assert kpe_cache.data_ptr() == ckv_cache.data_ptr() + 2 * ckv and kpe_cache.stride() == ckv_cache.stride()
            assert q_pe.data_ptr() == q_nope.data_ptr() + 2 * ckv and q_pe.stride() == q_nope.stride()
        assert tuple(out.shape) == (s.B * s.T, 4, ckv)


def test_flashinfer_mla_refusals(monkeypatch):
    from perf import deepseek, paged
    from perf.shapes import LatentShape
    s = LatentShape("mla", **_DS_SHAPES["mla"])
    monkeypatch.setattr(paged, "_FLASHINFER", {})
    monkeypatch.setitem(sys.modules, "flashinfer", None)
    r, _ = _deepseek_run(deepseek.FlashInferMLA(), s)
    assert r["status"] == "unsupported" and "import flashinfer failed" in r["reason"]
    r, _ = _deepseek_run(deepseek.FlashInferMLA(loader=lambda: _FakeFlashInferMLA()), s)
    assert r["status"] == "unsupported" and "CUDA" in r["reason"]
    r, _ = _deepseek_run(deepseek.FlashInferMLA(loader=lambda: object(), require_cuda=False), s)
    assert r["status"] == "unsupported" and "0.7 plan API" in r["reason"]
    # a module build failure is not compiled again for the next shape with the same head dims, only for others
    fake = _FakeFlashInferMLA(fail_plan="ninja: build stopped: subcommand failed.")
    c = deepseek.FlashInferMLA(loader=lambda: fake, require_cuda=False)
    assert "ninja" in _deepseek_run(c, s)[0]["reason"]
    fake.fail_plan = None
    r, _ = _deepseek_run(c, LatentShape("mla", **_DS_SHAPES["mla-causal"]))
    assert r["status"] == "unsupported" and "not retried" in r["reason"]
    assert _deepseek_run(c, LatentShape("v4", **_DS_SHAPES["v4"]))[0]["status"] == "ok"


class _FakeFlashMLA:
    """Stands in for `flash_mla` (its current API): get_mla_metadata() returns an empty scheduling object that the
    first flash_mla_with_kvcache() fills; the call computes the attention its arguments describe (page pool, block
    table, lengths, causal, softmax_scale) with fmha's reference, so a wrong argument fails the correctness gate."""
    __version__ = "fake"

    def __init__(self):
        self.metas, self.calls = [], []

    def get_mla_metadata(self, *args, **kwargs):
        import types
        self.metas.append(types.SimpleNamespace(filled=False))
        return self.metas[-1], None

    def flash_mla_with_kvcache(self, q, k_cache, block_table, cache_seqlens, head_dim_v, tile_scheduler_metadata,
                               num_splits=None, softmax_scale=None, causal=False):
        from fmha.reference import attention_reference
        assert num_splits is None and k_cache.shape[1] == 64 and k_cache.shape[-1] == q.shape[-1] == 576
        self.calls.append((q, k_cache, block_table, (head_dim_v, softmax_scale, causal), tile_scheduler_metadata.filled))
        tile_scheduler_metadata.filled = True
        out, lse = attention_reference(q, k_cache, k_cache[..., :head_dim_v], cache_seqlens, softmax_scale, causal,
                                       block_table=block_table)
        return out.to(q.dtype), lse


@pytest.mark.parametrize("kind", list(_DS_SHAPES))
def test_flashmla_adapter_with_a_fake_module(kind, monkeypatch):
    from perf import deepseek
    from perf.shapes import LatentShape
    fake = _FakeFlashMLA()
    s = LatentShape(kind.split("-")[0], **_DS_SHAPES[kind])
    r, inp = _deepseek_run(deepseek.FlashMLA(loader=lambda: fake, require_cuda=False), s)
    if kind == "v4":  # K = V of 512 columns: FlashMLA's kernel is compiled for 576 / 512 only
        assert r["status"] == "unsupported" and "576" in r["reason"] and not fake.calls, r
        return
    assert r["status"] == "ok" and r["cosine"] >= 0.9999, r
    assert len(fake.metas) == 2 and all(m.filled for m in fake.metas)  # filled in prepare(), outside timing
    assert [filled for *_, filled in fake.calls[:2]] == [False, False]  # the untimed first call of each set
    for q, pool, bt, kw, _ in fake.calls:  # the same q, pool and table objects flashinfer-mla and fmha read
        assert any(q is q0 and pool is p0 and bt is b0 for q0, p0, b0 in inp.paged_sets)
        assert kw == (512, 1 / math.sqrt(576), s.T > 1)
    monkeypatch.setattr(deepseek, "_FLASH_MLA", {})
    monkeypatch.setitem(sys.modules, "flash_mla", None)
    r, _ = _deepseek_run(deepseek.FlashMLA(), s)
    assert r["status"] == "unsupported" and "import flash_mla failed" in r["reason"]
    r, _ = _deepseek_run(deepseek.FlashMLA(loader=lambda: fake), s)
    assert r["status"] == "unsupported" and "CUDA" in r["reason"]


def test_deepseek_summary_and_targets():
    from perf.deepseek import markdown, summary_rows
    read = 4652.0

    def ok(us, **kw):
        return {"status": "ok", "us": us, "gbps_latent": 1.0, "pct_read_ceiling": 100.0 * 604e6 / us / 1e3 / read,
                "tflops": kw.get("tflops", 100.0), "is_fmha": True}

    def rec(name, family, Hq, T, results):
        return {"name": name, "family": family, "B": 128, "T": T, "Hq": Hq, "Hkv": 1, "S": 4096, "D_qk": 576,
                "D_v": 512, "causal": True, "latent_bytes": 604e6, "flops": 1e12, "memory_bound": Hq * T <= 64,
                "results": results}

    records = [rec("a", "mla", 16, 1, {"fmha-cuda": ok(130.0), "flashinfer-mla": ok(150.0),
                                       "fmha-cuda-paged64": ok(151.0)}),
               rec("b", "mla", 128, 2, {"fmha-cuda": ok(500.0, tflops=550.0), "flashinfer-mla": ok(450.0)}),
               rec("c", "mla", 16, 2, {"fmha-cuda": {"status": "unsupported", "reason": "no shared latent"},
                                       "flashinfer-mla": ok(150.0)}),
               rec("d", "v4", 64, 1, {"fmha-cuda": ok(100.0), "fmha-cuda-separate": ok(190.0)})]
    a, b, c, d = rows = summary_rows(records, read)
    assert [(t["met"], t["figure"]) for t in a["targets"]] == [(True, "1.15x"), (True, "99.9%, 130.0 µs")]
    assert "<= 136.7 µs" in a["targets"][1]["target"]
    assert [t["met"] for t in b["targets"]] == [False, False] and b["targets"][1]["figure"] == "550 TFLOP/s"
    assert [t["met"] for t in c["targets"]] == [None, None] and c["targets"][0]["figure"] == "fmha-cuda unsupported"
    assert [(t["met"], t["figure"]) for t in d["targets"]] == [(True, "1.90x")]
    assert abs(d["speedup_vs_separate"] - 1.9) < 1e-9 and abs(a["speedup_vs_flashinfer"] - 150 / 130) < 1e-9
    # FlashInfer against fmha on its own page pool: a figure beside the verdict, which the issue sets on fmha-cuda
    assert abs(a["paged_speedup_vs_flashinfer"] - 150 / 151) < 1e-9 and b["paged_speedup_vs_flashinfer"] is None
    # Near a bound the figures say which side of it a miss lies: 0.999x, not 1.00x; 1.797x, not 1.80x; and the
    # time limit and the share of the ceiling with a decimal.
    near = [rec("e", "mla", 16, 4, {"fmha-cuda": ok(137.0), "flashinfer-mla": ok(136.9)}),
            rec("f", "v4", 64, 1, {"fmha-cuda": ok(100.0), "fmha-cuda-separate": ok(179.7)})]
    near.append(rec("g", "mla", 16, 1, {"fmha-cuda": ok(136.7), "flashinfer-mla": ok(150.0)}))  # 94.98%
    e, f, g = summary_rows(near, read)
    assert g["targets"][1]["met"] is False and g["targets"][1]["figure"] == "94.98%, 136.7 µs"
    assert [(t["met"], t["figure"]) for t in e["targets"]] == [(False, "0.999x"), (False, "94.8%, 137.0 µs")]
    assert [(t["met"], t["figure"]) for t in f["targets"]] == [(False, "1.797x")]
    meta = {"gpu": "X", "date": "d", "command": "c", "torch": "t", "triton": "t", "fmha": "f", "elapsed_s": 1,
            "replays": 30, "settle_ms": 200, "min_cosine": 0.9999}
    md = markdown({"meta": meta, "ceilings": {"read_gbps": read, "read_source": "read_triton"},
                   "contenders": {n: "call" for n in ("fmha-cuda", "flashinfer-mla", "fmha-cuda-separate")},
                   "shapes": records, "rows": rows})
    assert "| mla B128 T1 16h S4096 576/512 | 130.0 | 150.0 | — | 1.15x | 0.99x | — | faster than flashinfer-mla: met" in md
    assert "**MISSED** (550 TFLOP/s)" in md and "unsupported: no shared latent [1]" in md
    assert "SM clock" not in md  # no clock was recorded (no NVML)
    records[0]["results"]["fmha-cuda"].update(sm_mhz=1965.0, power_capped=0.0)
    records[0]["results"]["flashinfer-mla"].update(sm_mhz=1635.0, power_capped=1.0)
    md = markdown({"meta": meta, "ceilings": {"read_gbps": read, "read_source": "read_triton"},
                   "contenders": {n: "call" for n in ("fmha-cuda", "flashinfer-mla", "fmha-cuda-separate")},
                   "shapes": records, "rows": rows})
    assert "## SM clock while timed" in md and "| mla B128 T1 16h S4096 576/512 | 1965 | 1635 (cap 100%) | — |" in md
    assert "## Rounds" not in md  # one round each
    records[0]["results"]["fmha-cuda"].update(round_us=[130.04, 129.96], round_mhz=[1965.0, 1980.0])
    records[0]["results"]["flashinfer-mla"].update(round_us=[150.0, 151.0])  # (no clock recorded)
    md = markdown({"meta": meta, "ceilings": {"read_gbps": read, "read_source": "read_triton"},
                   "contenders": {n: "call" for n in ("fmha-cuda", "flashinfer-mla", "fmha-cuda-separate")},
                   "shapes": records, "rows": rows})
    assert "## Rounds" in md and "| mla B128 T1 16h S4096 576/512 | 130.0 @ 1965 · 130.0 @ 1980 | 150.0 · 151.0 | — |" in md


def test_round_order_rotates_without_a_contender_twice_in_a_row():
    """perf/timing.py round_order: round k is the list rotated by k, so over consecutive rounds no contender is
    timed twice in a row and the slots after a boundary go to a different contender each time; two alternate
    strictly (a reversal would time one of them twice in a row)."""
    from perf.timing import even_rounds, round_order
    names = ["cuda", "paged", "triton", "separate", "flashinfer", "flashmla"]
    rounds = [round_order(names, k) for k in range(even_rounds(3))]
    assert rounds[1] == ["paged", "triton", "separate", "flashinfer", "flashmla", "cuda"]
    run = [n for r in rounds for n in r]
    assert all(a != b for a, b in zip(run, run[1:]))
    assert len({r[1] for r in rounds}) == len({r[0] for r in rounds}) == len(rounds)
    assert [round_order("ab", k) for k in range(4)] == [["a", "b"]] * 4
    assert round_order([], 3) == [] and round_order(["x"], 5) == ["x"]


def test_deepseek_rounds_rotate_and_take_the_median(monkeypatch):
    """perf/bench.py more_rounds: rounds 2 .. N (N rounded up to even) time the kept contenders, each round
    starting one contender later; `us` and the clock become the medians over the rounds; a contender that was not
    timed is left alone, and one whose round fails keeps the rounds before it, with the error noted."""
    import types
    import perf.clocks
    import perf.timing
    from perf.bench import more_rounds
    order, times = [], {"a": iter([90.0, 110.0, 120.0]), "b": iter([205.0, 195.0, 190.0]), "x": iter([50.0])}

    def fake_time_graph(fn, n_sets, replays, settle_s=0.0, sampler=None):
        order.append(fn.name)
        sampler.sample()
        t = next(times[fn.name], None)
        if t is None:
            raise RuntimeError("CUDA error: an illegal memory access was encountered")
        return [t, t]

    class FakeNvml:
        def sm_mhz(self):
            return 1500

        def reasons(self):
            return 0x4

    monkeypatch.setattr(perf.timing, "time_graph", fake_time_graph)
    monkeypatch.setattr(perf.timing, "warm_up", lambda fn, n_sets, device: None)
    monkeypatch.setattr(perf.clocks, "nvml_for", lambda device: FakeNvml())
    contenders = [types.SimpleNamespace(name=n) for n in ("a", "b", "c", "x")]
    kept = {n: types.SimpleNamespace(name=n) for n in ("a", "b", "x")}
    results = {"a": {"status": "ok", "us": 100.0, "graph_us": 100.0, "sm_mhz": 1700.0, "power_capped": 0.0},
               "b": {"status": "ok", "us": 200.0, "graph_us": 200.0},
               "c": {"status": "unsupported", "reason": "no"},
               "x": {"status": "ok", "us": 40.0, "graph_us": 40.0}}
    args = types.SimpleNamespace(rounds=3, replays=30, settle_ms=200.0)
    cpu = types.SimpleNamespace(type="cpu")
    more_rounds(results, contenders, kept, 2, args, cpu, deadline=float("inf"))
    # 3 rounds run as 4, the timed ones (a b x) rotated by 1 and 2; x fails in the third round, and the fourth
    # (a b rotated by 3: b a) starts one later, since b ended the round before
    assert order == ["b", "x", "a", "x", "a", "b", "a", "b"]
    assert results["a"]["round_us"] == [100.0, 90.0, 110.0, 120.0] and results["a"]["us"] == 105.0
    assert results["a"]["sm_mhz"] == 1500.0 and abs(results["a"]["power_capped"] - 3 / 4) < 1e-12
    assert results["b"]["us"] == results["b"]["graph_us"] == 197.5 and results["b"]["sm_mhz"] == 1500.0
    assert results["c"] == {"status": "unsupported", "reason": "no"}
    assert results["x"]["round_us"] == [40.0, 50.0] and results["x"]["us"] == 45.0
    assert results["x"]["round_error"].startswith("round 3: RuntimeError: CUDA error") and "x" not in kept
    order.clear()
    more_rounds(results, contenders, kept, 2, types.SimpleNamespace(rounds=1, replays=30, settle_ms=0.0), cpu, 0.0)
    assert order == []
    # a shape whose first round ran rotated by 1 (b c x a: a ended it): its next rounds go on from there, the
    # timed ones (a b) rotated by 2, 3 and 4, each moved on by one where it would start with the contender that
    # ended the round before, so that two contenders alternate
    times.update(a=iter([1.0] * 3), b=iter([1.0] * 3))
    more_rounds(results, contenders, kept, 2, args, cpu, deadline=float("inf"), start=1)
    assert order == ["b", "a", "b", "a", "b", "a"]


@pytest.mark.skipif(torch.cuda.is_available(), reason="the refusals of a machine without a GPU")
def test_latent_ab_refuses_bad_arguments():
    """tools/latent_ab.py: --lib must be NAME=PATH, and it needs a GPU (it says so rather than failing later)."""
    for argv, said in ((["--lib", "=x.so"], "NAME=PATH"), (["--lib", "new=x.so"], "needs a CUDA GPU"), ([], "--lib"),
                       (["--lib", "new=x.so@latent_seesaw64@nope"], "plan token '@nope'"),
                       (["--lib", "new=x.so@splits=0"], "@splits=N"), (["--lib", "new=@deep"], "no library path")):
        r = subprocess.run([sys.executable, os.path.join(REPO, "tools", "latent_ab.py"), *argv], cwd=REPO,
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 2 and said in r.stderr, (argv, r.stderr)


@pytest.mark.skipif(torch.cuda.is_available(), reason="the refusals of a machine without a GPU")
def test_ncu_probe_refuses_bad_plans():
    """tools/ncu_probe.py --plan takes plan tokens for the cuda backend only, and names a bad one."""
    tool = os.path.join(REPO, "tools", "ncu_probe.py")
    for argv, said in ((["--plan", "@nope"], "plan token '@nope'"), (["--plan", "latent_seesaw64"], "plan token"),
                       (["--plan", "@deep", "--backend", "triton"], "--plan runs the cuda backend"),
                       (["--plan", "@deep=3"], "plan token '@deep=3'")):
        r = subprocess.run([sys.executable, tool, "--shape", "1,1,8,8,64,128", *argv], cwd=REPO,
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 2 and said in r.stderr, (argv, r.stderr)


def test_force_plan_forces_only_what_serves_the_problem():
    """tools/_cuda.py force_plan: a latent configuration only where V is K's memory, LATENT_NARROW only up to its
    narrow rows, the first serving token in the order given; @splits=N everywhere."""
    import types

    from tools._cuda import CONFIGS, force_plan

    class Lib:
        def fmha_config_tile_n(self, d, c):
            return 64 if (d in (512, 576) and c in (4, 5, 6, 7, 8, 9)) or (d == 128 and c in (0, 1, 2)) else 0

        def fmha_config_narrow_rows(self, d, c):
            return 32 if c == CONFIGS["latent_narrow"] else 0

    def plan_of(tokens, **problem):
        b = types.SimpleNamespace(launch_plan=lambda p, index: (-1, 3))
        force_plan(b, Lib(), tokens)
        p = types.SimpleNamespace(**{"head_dim": 576, "kv_shared": True, "seqlen_q": 1, "group_size": 16, **problem})
        return b.launch_plan(p, 0)

    assert plan_of(["@latent_narrow"]) == (CONFIGS["latent_narrow"], 3)
    assert plan_of(["@latent_narrow"], group_size=128) == (-1, 3)  # 128 rows: the plan's choice
    assert plan_of(["@latent_narrow", "@latent_seesaw64"], group_size=128) == (CONFIGS["latent_seesaw64"], 3)
    assert plan_of(["@latent_seesaw64", "@latent_narrow"]) == (CONFIGS["latent_seesaw64"], 3)  # the first serving
    assert plan_of(["@latent_seesaw64"], head_dim=512, kv_shared=False) == (-1, 3)  # separate V
    assert plan_of(["@seesaw", "@splits=2"], head_dim=512, kv_shared=False) == (CONFIGS["seesaw"], 2)
    assert plan_of(["@deep"]) == (-1, 3)  # no D = 576 kernel of that configuration


def test_build_flashmla_refuses_missing_checkouts(tmp_path):
    """tools/build_flashmla.py names the checkout or file it lacks before compiling anything."""
    tool = os.path.join(REPO, "tools", "build_flashmla.py")
    fm, cutlass = tmp_path / "FlashMLA", tmp_path / "cutlass"
    (fm / "flash_mla").mkdir(parents=True)
    cutlass.mkdir()
    for argv, said in (([str(tmp_path / "none"), str(cutlass)], "missing FlashMLA checkout"),
                       ([str(fm), str(tmp_path / "none")], "missing CUTLASS checkout"),
                       ([str(fm), str(cutlass)], "missing FlashMLA source file")):
        r = subprocess.run([sys.executable, tool, "--flashmla", argv[0], "--cutlass", argv[1], "--dry-run"],
                           cwd=REPO, capture_output=True, text=True, timeout=120)
        assert r.returncode == 1 and said in r.stderr, (argv, r.stderr)


class _FakeNvmlLib:
    """libnvidia-ml's calls as perf/clocks.py makes them: 0 for success, values through byref."""

    def __init__(self, uuids=("GPU-abc",), clocks=(1500,), reasons=(0x4,)):
        self.uuids, self.clocks, self.reasons, self.i = list(uuids), list(clocks), list(reasons), 0

    def nvmlInit_v2(self):
        return 0

    def nvmlDeviceGetHandleByUUID(self, key, ref):
        return 0 if key.decode() in self.uuids else 13

    def nvmlDeviceGetCount_v2(self, ref):
        ref._obj.value = len(self.uuids)
        return 0

    def nvmlDeviceGetHandleByIndex_v2(self, i, ref):
        return 0

    def nvmlDeviceGetClockInfo(self, handle, which, ref):
        assert which == 1  # NVML_CLOCK_SM
        ref._obj.value = self.clocks[min(self.i, len(self.clocks) - 1)]
        self.i += 1
        return 0

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle, ref):
        ref._obj.value = self.reasons[min(self.i - 1, len(self.reasons) - 1)]
        return 0


def test_clock_sampler_and_nvml_without_a_driver():
    """perf/clocks.py: no NVML (a CPU machine) means no clock and no error; samples summarise to the median clock
    and the share of samples under the power cap."""
    from perf.clocks import ClockSampler, Nvml

    def missing(name):
        raise OSError(f"{name}: cannot open shared object file")

    assert Nvml.open(None, loader=missing) is None
    sampler = ClockSampler(None)
    sampler.sample()
    assert sampler.summary() == {}
    # one GPU whose UUID torch cannot tell (no CUDA here): NVML's only device is taken
    lib = _FakeNvmlLib(uuids=("GPU-x",), clocks=(1980, 1500, 1470, 1485), reasons=(0x0, 0x4, 0x4, 0x4))
    nvml = Nvml.open(None, loader=lambda name: lib)
    assert nvml is not None
    sampler = ClockSampler(nvml)
    for _ in range(4):
        sampler.sample()
    assert sampler.summary() == {"sm_mhz": 1492.5, "power_capped": 0.75, "clock_samples": 4}
    # two GPUs and no UUID to tell them apart: no clocks rather than another GPU's
    assert Nvml.open(None, loader=lambda name: _FakeNvmlLib(uuids=("GPU-a", "GPU-b"))) is None

    class NoReasons:  # a driver without either name of the clock-event call
        def __init__(self):
            self.inner = _FakeNvmlLib(clocks=(1600,))

        def __getattr__(self, name):
            if "Reasons" in name:
                raise AttributeError(name)
            return getattr(self.inner, name)

    lib = NoReasons()
    sampler = ClockSampler(Nvml.open(None, loader=lambda name: lib))
    sampler.sample()
    assert sampler.summary() == {"sm_mhz": 1600, "power_capped": 0.0, "clock_samples": 1}

    class Failing(_FakeNvmlLib):
        def nvmlDeviceGetClockInfo(self, handle, which, ref):
            raise OSError("NVML went away")

    sampler = ClockSampler(Nvml.open(None, loader=lambda name: Failing()))
    sampler.sample()  # never raises into a timing: the sampler stops
    sampler.sample()
    assert sampler.nvml is None and sampler.summary() == {}


@pytest.mark.skipif(torch.cuda.is_available(), reason="CPU dry run (see test_dry_run_writes_both_regimes)")
def test_dry_run_deepseek(tmp_path):
    out = tmp_path / "perf"
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": REPO}
    cmd = [sys.executable, "-m", "perf", "--preset", "deepseek", "--dry-run", "--shapes", "mla/B128-T2", "--out",
           str(out)]
    r = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    log = r.stdout[-3000:] + r.stderr[-3000:]
    assert r.returncode == 0, log
    md = (out / "deepseek.md").read_text()
    assert "| mla B2 T2 4h S128 576/512 causal |" in md, md
    res = json.loads((out / "deepseek.json").read_text())
    (shape,) = res["shapes"]
    results = shape["results"]
    assert list(results) == ["fmha-cuda", "fmha-cuda-paged64", "fmha-triton", "fmha-cuda-separate", "flashinfer-mla",
                             "flashmla"]
    assert results["fmha-triton"]["status"] == "ok" and results["fmha-triton"]["cosine"] >= 0.9999, log
    for name in ("fmha-cuda", "fmha-cuda-paged64", "fmha-cuda-separate", "flashinfer-mla", "flashmla"):
        assert results[name]["status"] == "unsupported" and results[name]["reason"], (name, results[name])
    (row,) = res["rows"]
    assert [t["met"] for t in row["targets"]] == [None, None]
    assert (out / "raw" / "deepseek-samples.json").exists()


def _git_checkout() -> bool:
    try:
        r = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True)
    except OSError:  # no git
        return False
    return r.returncode == 0


@pytest.mark.skipif(torch.cuda.is_available(), reason="CPU dry run (see test_dry_run_writes_both_regimes)")
def test_checkouts_times_a_commit_in_its_own_export(tmp_path):
    """tools/checkouts.py: the commit exported (--prepare), its own suite run there, the times tabled (no build:
    dry run)."""
    if not _git_checkout():
        pytest.skip("not a git checkout")
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    tool = [sys.executable, "tools/checkouts.py"]
    prepare = [*tool, "HEAD", "--prepare", "--no-build", "--workdir", str(tmp_path)]
    r = subprocess.run(prepare, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    (export,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    assert (export / "fmha" / "__init__.py").exists() and not (export / "round1").exists()
    # where git knows no history (a GPU machine's copy of the tree), the commit is found among the exports
    cmd = [*tool, export.name[:7], "--no-build", "--rounds", "1", "--workdir", str(tmp_path),
           "--", "--dry-run", "--preset", "quick", "--shapes", "S512", "--contenders", "triton"]
    r = subprocess.run(cmd, cwd=REPO, env={**env, "GIT_DIR": str(tmp_path / "no-git")}, capture_output=True,
                       text=True, timeout=600)
    log = r.stdout[-3000:] + r.stderr[-3000:]
    assert r.returncode == 0, log
    assert (export / "round1" / "results.json").exists(), log
    row = [line for line in r.stdout.splitlines() if line.startswith("| small/")]
    assert len(row) == 1 and "| triton |" in row[0], log


def test_checkouts_refuses_a_commit_twice_and_an_out_of_its_own(tmp_path, capsys):
    if not _git_checkout():
        pytest.skip("not a git checkout")
    from tools.checkouts import main
    ours = ["--no-build", "--workdir", str(tmp_path)]
    for argv, says in ((["HEAD", "HEAD~0", *ours], "a commit is named twice"),
                       (["HEAD", *ours, "--", "--out", str(tmp_path)], "--out is set per commit and round")):
        with pytest.raises(SystemExit):
            main(argv)
        assert says in capsys.readouterr().err
    assert not any(tmp_path.iterdir())  # refused before anything was exported


def test_contender_notes_name_each_setup_the_shapes_used():
    """A contender whose setup differs between shapes (FlashInfer's wrapper) is described by every setup it ran, in
    shape order, not by the last shape's alone."""
    from types import SimpleNamespace
    from perf.bench import shape_notes
    c = SimpleNamespace(name="flashinfer", note="the last shape's")
    records = [{"results": {"flashinfer": {"setup": "sink wrapper", "note": "sink wrapper; eager timing only"}}},
               {"results": {"flashinfer": {"setup": "decode wrapper"}}},
               {"results": {"flashinfer": {"setup": "sink wrapper"}, "fmha": {"setup": "x"}}},
               {"results": {"fmha": {"setup": "x"}}}]
    assert shape_notes(records, c) == "sink wrapper / decode wrapper"
    assert shape_notes(records[3:], c) == "the last shape's"


def test_an_eager_fallback_enters_no_ratio_and_no_tuning_table():
    """A contender whose graph capture failed is timed eagerly (Python and launch included): it is neither the
    best peer nor given a speedup, and the tuning table leaves it out."""
    from perf.bench import summarize
    from perf.report import tuning_table
    rec = {"name": "s", "B": 1, "T": 1, "G": 4, "S": 64, "D": 64, "Hq": 4, "Hkv": 1, "causal": True,
           "bytes_moved": 1e6,
           "results": {"cuda": {"status": "ok", "us": 10.0, "timing": "graph", "is_fmha": True},
                       "triton": {"status": "ok", "us": 30.0, "timing": "eager", "is_fmha": True},
                       "sdpa-cudnn": {"status": "ok", "us": 12.0, "timing": "graph", "is_fmha": False},
                       "flex": {"status": "ok", "us": 5.0, "timing": "eager", "is_fmha": False}}}
    summarize(rec, {"read_gbps": 1000.0})
    assert rec["best_peer"] == "sdpa-cudnn" and rec["speedup_vs_best_peer"] == {"cuda": 1.2, "triton": None}
    table = tuning_table({"contenders": {"cuda": {"fmha": True}, "triton": {"fmha": True}}, "shapes": [rec],
                          "meta": {"gpu": "g", "date": "d", "command": "c", "torch": "t", "triton": "t"}})
    assert table["entries"][0]["median_us"] == {"cuda": 10.0, "triton": None}


def test_the_gate_judges_each_output_row_and_the_whole():
    """perf/bench.py cosine: one wrong row (a mask ignored on a few rows) fails it though the whole output's cosine
    stays near 1, and so do rows scaled apart (sinks dropped), which keep every row's direction."""
    import math
    from perf.bench import cosine
    g = torch.Generator().manual_seed(0)
    ref = torch.randn(2, 4, 8, 64, generator=g)
    out = ref.clone()
    out[0, 3, 5] = torch.randn(64, generator=g)
    assert torch.nn.functional.cosine_similarity(out.flatten(), ref.flatten(), dim=0).item() > 0.98
    assert cosine(out, ref) < 0.5
    assert cosine(ref * torch.linspace(0.5, 1.5, 8)[None, None, :, None], ref) < 0.9999
    zero_row = ref.clone()
    zero_row[1, 0, 0] = 0
    assert cosine(ref, ref) > 0.99999 and cosine(zero_row, zero_row) > 0.99999 and cosine(ref, zero_row) == 0.0
    assert math.isnan(cosine(torch.full_like(ref, float("nan")), ref))


def test_an_eager_time_enters_no_ratio_of_the_presets():
    """perf/paged.py _ok_us (the paged and deepseek ratios and verdicts): a graph time counts, an eager one (a
    capture that failed: Python and launch included) does not."""
    from perf.paged import _ok_us
    assert _ok_us({"us": 100.0, "status": "ok"}) == 100.0
    assert _ok_us({"us": 400.0, "status": "ok", "timing": "eager"}) is None
    assert _ok_us({"us": 100.0, "status": "WRONG"}) is None and _ok_us(None) is None
