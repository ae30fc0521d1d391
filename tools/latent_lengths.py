"""The latent narrow loop's two schedules on batches of mixed cache lengths, in one process.

    python tools/latent_lengths.py [--lib PATH] [--rounds 9] [--peers] [--only KIND] [--batch KIND:B:T:S:D ...]
                                   [--heads 16]

For each batch below (576/512 unless it says 512; --heads query heads on one latent KV head; the lengths drawn with a
fixed seed per batch), the cuda backend's own plan is timed with FMHA_CUDA_SCHEDULE=static (one CTA a sequence) and
=balanced (the tiles dealt by cache length, docs/deepseek.md): --calls calls (20) captured in a CUDA graph, rotating
over --sets input sets (1; the suite's regime is --calls 2 --sets 2; each set's page pool behind one block table for
the paged rows and the peers), the median over --rounds replays, µs per call
and the cache bytes read (sum of the lengths) per second. Every output is compared with the static one (largest
absolute difference: pieces merged in another order, not another answer). --lib: a prebuilt library (python -m
fmha.cuda.build --out DIR), else the library the backend builds. --peers: the same batch on a 64-token page pool
(pages shuffled, perf/paged.py page_pools) as well, for both fmha schedules and for FlashInfer's MLA decode and
FlashMLA where they import (perf/README.md says how), which plan by the cache lengths too; where some sequences are
empty, a peer's output is compared on the others and described on those (zeros, NaN, not zero), and a peer that
fails says so. Needs an sm_90a GPU.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # run from a checkout

# (name, B, T, S, D, lengths): "equal" every sequence S long; "uniform" drawn from [1, S]; "longtail" 8 of S and the
# rest S / 8; "zipf" S / rank; "padded" half of them S, the rest empty (a batch padded to a captured size).
BATCHES = [
    ("equal", 128, 1, 4096, 576), ("equal", 128, 2, 4096, 576),
    ("uniform", 128, 1, 4096, 576), ("uniform", 128, 2, 4096, 576), ("uniform", 256, 1, 4096, 576),
    ("uniform", 128, 1, 4096, 512), ("longtail", 128, 1, 8192, 576), ("zipf", 132, 1, 8192, 576),
    ("padded", 256, 1, 4096, 576), ("padded", 128, 2, 4096, 512),
    ("uniform", 32, 1, 8192, 576), ("zipf", 16, 1, 16384, 576),  # (split grids: the plan's CTAs a sequence)
]
KINDS = ("equal", "uniform", "longtail", "zipf", "padded")
PAGE = 64  # the page pool of --peers (FlashMLA's only page size)


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
    if kind == "padded":
        sl = torch.zeros((B,), device="cuda", dtype=torch.int32)
        sl[:B // 2] = S
        return sl
    return torch.full((B,), S, device="cuda", dtype=torch.int32)


def graph_us(fn, rounds, calls=20, sets=1):
    """µs a call: `calls` calls fn(c % sets) in one CUDA graph (perf/timing.py's timer), the median over `rounds`
    replays."""
    import torch

    from perf.timing import time_graph
    for c in range(sets):
        fn(c)
    torch.cuda.synchronize()
    return statistics.median(time_graph(lambda c: fn(c % sets), calls, rounds))


def failure(e) -> str:
    """A peer's exception in one line."""
    return f"failed: {type(e).__name__}: {str(e).splitlines()[0][:120] if str(e) else ''}"


def peer_calls(kind, B, T, S, D, sets, sl, block_table):
    """The --peers contenders on the page pools of sets [(q, kv, pool)]: (name, fn(set)) where they import, (name,
    reason) where not."""
    from perf import deepseek
    from perf.peers import Unsupported
    from perf.shapes import LatentShape
    inputs = deepseek.LatentInputs.of_tensors(LatentShape(kind, B=B, S=S, Hq=sets[0][0].shape[2], T=T, D=D, Dv=512),
                                              sets, sl, block_table, PAGE)
    calls = []
    for contender in (deepseek.FlashInferMLA(), deepseek.FlashMLA()):
        try:
            fn = contender.prepare(inputs)
            contender.first_call(fn, 0)
            calls.append((contender.name, fn))
        except Unsupported as e:
            calls.append((contender.name, str(e)))
        except Exception as e:  # (one that fails on these lengths: said, not raised)
            calls.append((contender.name, failure(e)))
    return calls


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lib", default=None, help="a prebuilt library (default: the backend's own build)")
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--peers", action="store_true", help="also on a 64-token page pool, with FlashInfer and FlashMLA")
    ap.add_argument("--only", default=None, help="only the batches of this kind (equal, uniform, padded, ...)")
    ap.add_argument("--calls", type=int, default=20, help="calls a graph replay holds (the suite's: 2)")
    ap.add_argument("--sets", type=int, default=1,
                    help="input sets the calls rotate over (the suite's: 2)")
    ap.add_argument("--batch", action="append", default=[], metavar="KIND:B:T:S:D",
                    help="time this batch instead of the list above (repeatable), e.g. equal:136:1:4096:576")
    ap.add_argument("--heads", type=int, default=16, help="query heads on the latent KV head (64, 128: the 64-key "
                    "seesaw's balanced schedule)")
    args = ap.parse_args(argv)
    batches = BATCHES
    if args.batch:
        try:
            batches = [(kind, *map(int, rest)) for kind, *rest in (b.split(":") for b in args.batch)]
        except ValueError:
            ap.error(f"--batch takes KIND:B:T:S:D with integers B, T, S, D; got {args.batch}")
        if any(len(b) != 5 or b[0] not in KINDS or b[4] not in (512, 576) for b in batches):
            ap.error(f"--batch: KIND one of {', '.join(KINDS)}, D 512 or 576; got {args.batch}")
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
    gen = torch.Generator(device="cuda")
    for i, (kind, B, T, S, D) in enumerate(batches):
        if args.only and kind != args.only:
            continue
        gen.manual_seed(i)  # (a batch's lengths and values do not depend on which batches ran before it)
        q = torch.randn(B, T, args.heads, D, device="cuda", dtype=torch.bfloat16, generator=gen)
        kv = torch.randn(B, S, 1, D, device="cuda", dtype=torch.bfloat16, generator=gen)
        sl = lengths(kind, B, S, gen)
        more = [(torch.randn_like(q), torch.randn_like(kv)) for _ in range(args.sets - 1)]  # (rotated, not checked)
        cache_bytes = sl.double().sum().item() * D * 2
        contiguous = [(q, kv)] + more
        layouts = [("", kv, None, contiguous)]
        if args.peers:
            from perf.paged import page_pools
            pools, block_table = page_pools([c for _, c in contiguous], PAGE, torch.Generator().manual_seed(B * S))
            paged = [(qs, pool) for (qs, _), pool in zip(contiguous, pools)]
            layouts.append((f"p{PAGE} ", pools[0], block_table, paged))
        outs = {}

        def report(name, us, out, note="", peer=False):
            diff = (out.float() - outs["static"].float()).abs().max().item()
            empty = sl == 0
            if peer and bool(empty.any()):  # a peer on empty sequences: the rest compared, those described
                diff = (out[~empty].float() - outs["static"][~empty].float()).abs().max().item()
                rows = out[empty].float()
                what = "NaN" if bool(rows.isnan().any()) else "zeros" if bool((rows == 0).all()) else "not zero"
                note += f"  (empty sequences: {what})"
            print(f"{kind:8s} B{B} T{T} Hq{args.heads} S{S} D{D}  {name:14s} {us:7.1f} us  "
                  f"{cache_bytes / us / 1e6:5.2f} TB/s"
                  f"  max |out - static| {diff:.1e}{note}", flush=True)

        for prefix, cache, block_table, sets in layouts:
            v = cache[..., :512]
            p = validate(q, cache, v, sl, D ** -0.5, True, block_table=block_table)
            sets = [(qs, cs, cs[..., :512]) for qs, cs in sets]
            for schedule in ("static", "balanced"):  # (auto is one of them: the plan's choice)
                os.environ[cb.SCHEDULE_ENV] = schedule  # read when the backend first plans p
                b = make()
                out = torch.empty(B, T, args.heads, 512, device="cuda", dtype=torch.bfloat16)
                lse = torch.empty(B, args.heads, T, device="cuda", dtype=torch.float32)
                us = graph_us(lambda i: b.run(p, *sets[i], sl, out, lse, block_table), args.rounds, args.calls,
                              len(sets))
                b.run(p, q, cache, v, sl, out, lse, block_table)  # (the first set's output, compared below)
                outs.setdefault(prefix + schedule, out)
                report(prefix + schedule, us, out, f"  ({b.launch_plan(p, 0)[0].name.lower()})")
        if args.peers:
            peer_sets = [(qs, c, pool) for (qs, c), (_, pool) in zip(contiguous, layouts[1][3])]
            for name, fn in peer_calls(kind, B, T, S, D, peer_sets, sl, layouts[1][2]):
                if isinstance(fn, str):
                    print(f"{kind:8s} B{B} T{T} Hq{args.heads} S{S} D{D}  {name:14s} not run: {fn}", flush=True)
                    continue
                try:
                    us = graph_us(fn, args.rounds, args.calls, len(peer_sets))
                    report(name, us, fn(0).view(B, T, args.heads, 512), peer=True)
                except Exception as e:  # (a peer that refuses empty sequences)
                    print(f"{kind:8s} B{B} T{T} Hq{args.heads} S{S} D{D}  {name:14s} {failure(e)}", flush=True)
                    torch.cuda.synchronize()
        del q, kv, more, layouts, outs
        torch.cuda.empty_cache()
    os.environ.pop(cb.SCHEDULE_ENV, None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
