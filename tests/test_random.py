"""Random problems: every backend that serves one, against the fp32 reference.

Each problem draws from its seed every axis a caller may vary: dtype; head dims, the latent pairs with V as K
itself, as K's leading columns or as a tensor of its own; query and KV heads (GQA 28/4, MQA up to 128 heads); T;
batch; cache length; per-sequence lengths (empty ones included) or none; page size and pool layout; a q that is a
slice of a fused QKV tensor; causal or not; softmax_scale; sinks; the `cuda` backend's schedule
(FMHA_CUDA_SCHEDULE); and, which only some backends take, a sliding window, a score cap and left padding. Every
cache slot that no query may see holds NaN, the output buffer is NaN, and output and LSE are compared as in every
other test (_util.compare), then produced again into NaN buffers, bit for bit. A backend that refuses a problem by
name (NotImplementedError) is skipped for it; the draws of a GPU run give the `cuda` backend at least a third of the
problems.

FMHA_RANDOM_PROBLEMS sets how many (default: 48 without a GPU, where Triton runs under its interpreter, 300 with one)
and FMHA_RANDOM_SEED the first seed (0). A failure names its seed: FMHA_RANDOM_SEED=<seed> FMHA_RANDOM_PROBLEMS=1
draws that problem again.
"""
from __future__ import annotations

import os
import random

import pytest
import torch

import fmha
from _util import PAGED_LAYOUTS, compare, make_paged, paged_latent, run_poisoned
from conftest import DEVICE, HAS_GPU
from fmha.backends import registry
from fmha.problem import validate
from fmha.reference import attention_reference, visible_mask

N_PROBLEMS = int(os.environ.get("FMHA_RANDOM_PROBLEMS", "300" if HAS_GPU else "48"))
FIRST_SEED = int(os.environ.get("FMHA_RANDOM_SEED", "0"))
BACKENDS = [b for b in ("cuda", "triton") if b in fmha.available_backends()]


def draw(seed: int, gpu: bool) -> dict:
    """One problem's description. Without a GPU the sizes stay small (the Triton interpreter)."""
    r = random.Random(seed)
    latent = r.random() < 0.45
    if latent:
        D, Dv = r.choice([(576, 512), (512, 512)])
        v_mode = r.choice(["slice", "slice", "separate"] if D == 576 else ["self", "self", "separate"])
        Hkv = r.choice([1, 1, 1, 2, 4])
        G = r.choice([1, 4, 7, 16, 16, 64, 128] if Hkv == 1 else [1, 4, 7, 16])
    else:
        D = Dv = r.choice([64, 128, 128, 256, 512])
        v_mode = r.choice(["separate", "separate", "self"])
        Hkv = r.choice([1, 2, 4, 8])
        G = r.choice([1, 2, 4, 5, 7, 8, 16])
    if not gpu:
        G = min(G, 16)
    T = r.choice([1, 1, 1, 2, 3, 4, 5, 8])
    B = r.randint(1, 6 if gpu else 3)
    S = r.choice([1, r.randint(2, 64), r.randint(65, 700 if gpu else 160), r.randint(700, 3000) if gpu else 129])
    if gpu and r.random() < 0.1:  # a grid of about one wave or more: the balanced schedule's and the plan's edges
        B, S = r.randint(40, 150), r.randint(1, 400)
    paged = r.random() < 0.4
    with_lengths = paged or r.random() < 0.75
    lengths = [r.choice([0, S, r.randint(0, S), r.randint(0, S)]) for _ in range(B)] if with_lengths else None
    causal = r.random() < 0.85
    window, softcap, leftpad = (-1, -1), 0.0, None
    if r.random() < 0.12:
        left = r.randint(0, S)
        window = (left, -1) if causal else (left, r.choice([-1, 0, r.randint(0, 40)]))
    if r.random() < 0.1:
        softcap = r.choice([5.0, 30.0, 50.0])
    if lengths is not None and r.random() < 0.1:
        leftpad = [r.randint(0, n) for n in lengths]
    return dict(
        seed=seed, dtype=r.choice([torch.bfloat16, torch.bfloat16, torch.float16]), D=D, Dv=Dv, v_mode=v_mode,
        Hkv=Hkv, Hq=Hkv * G, T=T, B=B, S=S, lengths=lengths, causal=causal,
        page_size=r.choice([1, 5, 16, 32, 64, 64, 128, 256]) if paged else None,
        layout=r.choice(PAGED_LAYOUTS) if v_mode == "separate" and D == Dv else "separate",
        fused_q=r.random() < 0.15,
        scale=None if r.random() < 0.8 else r.uniform(0.02, 0.3),
        sinks=(None if r.random() < 0.7 else
               [r.choice([r.uniform(-20, 20), r.uniform(-3, 3), float("-inf")]) for _ in range(Hkv * G)]),
        window=window, softcap=softcap, leftpad=leftpad,
        q_scale=r.choice([1.0, 1.0, 4.0]),
        schedule=r.choice(["auto", "auto", "static", "balanced"]),  # FMHA_CUDA_SCHEDULE
    )


def tensors(c: dict):
    """(q, k, v, cache_seqlens, k_in, v_in, block_table, sinks, leftpad): the clean caches for the reference, and the
    caches the backends read: NaN in every slot no query of its sequence sees, or page pools with NaN in every
    slot no sequence owns."""
    g = torch.Generator().manual_seed(c["seed"])
    B, T, Hq, Hkv, S, D, Dv = c["B"], c["T"], c["Hq"], c["Hkv"], c["S"], c["D"], c["Dv"]

    def rnd(*shape):
        return torch.randn(*shape, generator=g).to(DEVICE, c["dtype"])

    if c["fused_q"]:  # q a strided slice of one QKV tensor
        q = (rnd(B, T, Hq + 2 * Hkv, D) * c["q_scale"])[:, :, :Hq]
    else:
        q = rnd(B, T, Hq, D) * c["q_scale"]
    k = rnd(B, S, Hkv, D)
    v = {"self": lambda: k, "slice": lambda: k[..., :Dv], "separate": lambda: rnd(B, S, Hkv, Dv)}[c["v_mode"]]()
    sl = None if c["lengths"] is None else torch.tensor(c["lengths"], dtype=torch.int32, device=DEVICE)
    leftpad = None if c["leftpad"] is None else torch.tensor(c["leftpad"], dtype=torch.int32, device=DEVICE)
    sinks = None if c["sinks"] is None else torch.tensor(c["sinks"], dtype=torch.float32, device=DEVICE)
    lengths = sl if sl is not None else torch.full((B,), S, dtype=torch.int32, device=DEVICE)
    seen = visible_mask(lengths, T, S, c["causal"], *c["window"], leftpad=leftpad).any(1)  # [B, S]
    k_in = k.clone()
    k_in[~seen] = float("nan")
    if c["v_mode"] == "separate":
        v_in = v.clone()
        v_in[~seen] = float("nan")
    else:
        v_in = k_in[..., :Dv]
    table = None
    if c["page_size"] is not None:
        if c["v_mode"] == "separate" and D == Dv:  # (every pool layout)
            k_in, v_in, table = make_paged(k_in, v_in, c["page_size"], sl, layout=c["layout"], seed=c["seed"])
        else:
            k_in, v_in, table = paged_latent(k_in, v_in, c["page_size"], sl, c["v_mode"], seed=c["seed"])
    return q, k, v, sl, k_in, v_in, table, sinks, leftpad


def options(c: dict, table, sinks, leftpad) -> dict:
    kw = dict(block_table=table, causal=c["causal"], softmax_scale=c["scale"], sinks=sinks, cache_leftpad=leftpad)
    if c["window"] != (-1, -1):
        kw["window_size"] = c["window"]
    if c["softcap"]:
        kw["softcap"] = c["softcap"]
    return kw


@pytest.mark.parametrize("seed", range(FIRST_SEED, FIRST_SEED + N_PROBLEMS))
def test_random_problem(seed, monkeypatch):
    c = draw(seed, HAS_GPU)
    # The drawn schedule, read when the cuda backend first plans a shape: its plans of earlier tests forgotten.
    monkeypatch.setenv("FMHA_CUDA_SCHEDULE", c["schedule"])
    if "cuda" in BACKENDS:
        monkeypatch.setattr(registry()["cuda"], "_launches", {})
    q, k, v, sl, k_in, v_in, table, sinks, leftpad = tensors(c)
    kw = options(c, table, sinks, leftpad)
    scale = c["scale"] if c["scale"] is not None else c["D"] ** -0.5
    ref, ref_lse = attention_reference(q, k, v, sl, scale, c["causal"], sinks=sinks, window_size=c["window"],
                                       softcap=c["softcap"], cache_leftpad=leftpad)
    vmax = v.float().abs().max().item()
    what = ", ".join(f"{key}={val}" for key, val in c.items() if key != "sinks") + f", sinks={sinks is not None}"
    for backend in BACKENDS:
        try:
            out, lse = run_poisoned(backend, q, k_in, v_in, sl, **kw)  # (and again into NaN buffers, the same bits)
        except NotImplementedError:
            continue
        compare(out, lse, ref, ref_lse, q.dtype, vmax=vmax, what=f"{backend}: {what}")


def meta_problem(c: dict):
    """The Problem a drawn problem poses, from meta tensors of its shapes, as on the first GPU."""
    import dataclasses

    B, T, Hq, Hkv, S, D, Dv, P = c["B"], c["T"], c["Hq"], c["Hkv"], c["S"], c["D"], c["Dv"], c["page_size"]
    meta = dict(dtype=c["dtype"], device="meta")
    index = dict(dtype=torch.int32, device="meta")
    q = torch.empty(B, T, Hq, D, **meta)
    k = torch.empty(B, S, Hkv, D, **meta) if P is None else torch.empty(B * -(-S // P) + 3, P, Hkv, D, **meta)
    v = {"self": lambda: k, "slice": lambda: k[..., :Dv],
         "separate": lambda: torch.empty(*k.shape[:-1], Dv, **meta)}[c["v_mode"]]()
    table = None if P is None else torch.empty(B, -(-S // P), **index)
    sl = None if c["lengths"] is None else torch.empty(B, **index)
    leftpad = None if c["leftpad"] is None else torch.empty(B, **index)
    sinks = None if c["sinks"] is None else torch.empty(Hq, dtype=torch.float32, device="meta")
    p = validate(q, k, v, sl, c["scale"], c["causal"], None, table, sinks, window_size=c["window"],
                 softcap=c["softcap"], cache_leftpad=leftpad)
    # (a meta slice of k is not seen as k's memory: meta tensors have none)
    return dataclasses.replace(p, device=torch.device("cuda", 0), kv_shared=c["v_mode"] != "separate")


def test_cuda_serves_a_share_of_the_gpu_draws(cuda_as_if_present):
    """The draws a GPU run makes give the `cuda` backend (as on a Hopper machine) at least a third of the problems,
    and the shared latent each of the configurations its plan takes for it (d512_config, 132 SMs)."""
    from fmha.cuda.backend import Config, d512_config, latent_ring
    seeds = range(FIRST_SEED, FIRST_SEED + max(N_PROBLEMS, 300))
    problems = [meta_problem(draw(seed, True)) for seed in seeds]
    served = [p for p in problems if cuda_as_if_present.unsupported_reason(p) is None]
    assert len(served) >= len(problems) / 3, f"{len(served)} of {len(problems)}"
    configs = {d512_config(p, 90, 132) for p in served if latent_ring(p)}
    assert {Config.LATENT_NARROW, Config.LATENT_SEESAW64, Config.LATENT_SEESAW48} <= configs, configs
