"""The latent narrow loop's two schedules on batches of mixed cache lengths, in one process.

    python tools/latent_lengths.py [--lib PATH] [--rounds 9]

For each batch below (576/512 unless it says 512; 16 query heads on one latent KV head; the lengths drawn with a
fixed seed), the cuda backend's own plan is timed with FMHA_CUDA_SCHEDULE=static (one CTA a sequence) and =balanced
(the tiles dealt by cache length, docs/deepseek.md): 20 calls captured in a CUDA graph, the median over --rounds
replays, µs per call and the cache bytes read (sum of the lengths) per second. The balanced output is compared with
the static one (largest absolute difference: pieces merged in another order, not another answer). --lib: a prebuilt
library (python -m fmha.cuda.build --out DIR), else the library the backend builds. Needs an sm_90a GPU.
"""
from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # run from a checkout

# (name, B, T, S, D, lengths): "equal" every sequence S long; "uniform" drawn from [1, S]; "longtail" 8 of S and the
# rest S / 8; "zipf" S / rank.
BATCHES = [
    ("equal", 128, 1, 4096, 576), ("equal", 128, 2, 4096, 576),
    ("uniform", 128, 1, 4096, 576), ("uniform", 128, 2, 4096, 576), ("uniform", 256, 1, 4096, 576),
    ("uniform", 128, 1, 4096, 512), ("longtail", 128, 1, 8192, 576), ("zipf", 132, 1, 8192, 576),
    ("uniform", 32, 1, 8192, 576), ("zipf", 16, 1, 16384, 576),  # (split grids: the plan's CTAs a sequence)
]


def lengths(kind, B, S, gen):
    import torch
    if kind == "uniform":
        return torch.randint(1, S + 1, (B,), device="cuda", dtype=torch.int32, generator=gen)
    if kind == "longtail":
        sl = torch.full((B,), S // 8, device="cuda", dtype=torch.int32)
        sl[:8] = S
        return sl
    if kind == "zipf":
        return (S / torch.arange(1, B + 1, device="cuda")).clamp(min=1).to(torch.int32)
    return torch.full((B,), S, device="cuda", dtype=torch.int32)


def graph_us(fn, rounds, calls=20):
    import torch
    fn()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(calls):
            fn()
    times = []
    for _ in range(rounds):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        g.replay()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) * 1e3 / calls)
    return sorted(times)[len(times) // 2]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lib", default=None, help="a prebuilt library (default: the backend's own build)")
    ap.add_argument("--rounds", type=int, default=9)
    args = ap.parse_args(argv)
    import torch

    import fmha.cuda.backend as cb
    from fmha.problem import validate

    if not torch.cuda.is_available():
        ap.error("needs a CUDA GPU")
    if args.lib:
        from tools._cuda import library_backend
        make = lambda: library_backend(args.lib)  # noqa: E731
    else:
        make = cb.CudaBackend
    gen = torch.Generator(device="cuda").manual_seed(0)
    for kind, B, T, S, D in BATCHES:
        q = torch.randn(B, T, 16, D, device="cuda", dtype=torch.bfloat16, generator=gen)
        kv = torch.randn(B, S, 1, D, device="cuda", dtype=torch.bfloat16, generator=gen)
        sl = lengths(kind, B, S, gen)
        v = kv[..., :512]
        p = validate(q, kv, v, sl, D ** -0.5, True)
        cache_bytes = sl.double().sum().item() * D * 2
        outs = {}
        for schedule in cb.SCHEDULES:
            os.environ[cb.SCHEDULE_ENV] = schedule  # read when the backend first plans p
            b = make()
            out = torch.empty(B, T, 16, 512, device="cuda", dtype=torch.bfloat16)
            lse = torch.empty(B, 16, T, device="cuda", dtype=torch.float32)
            us = graph_us(lambda: b.run(p, q, kv, v, sl, out, lse), args.rounds)
            outs[schedule] = out
            diff = (out.float() - outs["static"].float()).abs().max().item()
            print(f"{kind:8s} B{B} T{T} S{S} D{D}  {schedule:8s} {us:7.1f} us  {cache_bytes / us / 1e6:5.2f} TB/s"
                  f"  max |out - static| {diff:.1e}  ({b.launch_plan(p, 0)[0].name.lower()})", flush=True)
    os.environ.pop(cb.SCHEDULE_ENV, None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
