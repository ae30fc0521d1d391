"""Time build variants of the CUDA kernel (tuning knobs given as nvcc flags), interleaved in one process.

    python perf/variants.py --variant base= --variant deep4="-DFMHA_SM90_DEEP_SMALL_D_STAGES=4"

Every variant is built into its own library (cached by flags) and loaded side by side in this
process. For each shape the contenders (every variant, the triton backend and cuDNN SDPA) are timed
in turn, round after round (--rounds), so slow drifts of the GPU's state (power cap, clocks,
temperature) hit them alike: on an H200 the same kernel timed minutes apart in separate processes
moved by up to 12%. Each timing is the median of 30 CUDA-graph replays over rotating input sets
larger than 3x L2; the table shows the median over rounds and the spread (max - min) / median.
Every variant's output is checked against the triton backend's. Units: us per call, GB/s decimal
(q + k + v + out bytes). --separate puts a one-element add after every call (see its help; first run in
run bp, whose script still subtracted the adds' time: compare its rows within a row only).

By default each replay is timed on its own (the host waits for it before launching the next), which
leaves the GPU a short gap between replays. --sustained times as `python -m perf` does instead: the
graph is first replayed for --settle-ms, then the replays run back to back. Kernels at the H200's
700 W cap may rank differently in the two regimes (D=512: perf/RESULTS.md, runs at and au).
"""
from __future__ import annotations

import argparse
import ctypes
import shlex
import statistics
from unittest import mock

from perf.shapes import KV_LAYOUTS

SHAPES = [  # B, T, Hq, Hkv, S, D (--shapes N keeps the first N; --only i,j picks some)
    (128, 1, 32, 8, 8192, 128), (32, 1, 32, 8, 4096, 128), (1, 1, 32, 8, 65536, 128), (1, 1, 32, 8, 8192, 128),
    (4, 1, 32, 8, 512, 128), (32, 4, 32, 8, 4096, 128), (8, 16, 32, 8, 8192, 128), (32, 1, 32, 8, 8192, 64),
    (32, 1, 16, 8, 8192, 256), (128, 1, 16, 1, 4096, 512), (64, 1, 128, 1, 4096, 512), (1, 1, 32, 8, 262144, 128),
    (16, 1, 32, 8, 32768, 128), (8, 1, 32, 8, 8192, 128), (1, 1, 8, 1, 8192, 128), (1, 1, 8, 1, 32768, 128),
    (1, 1, 32, 8, 16384, 128), (2, 1, 32, 8, 8192, 128),
]


class _OlderLibrary:
    """A library built from an older commit: C API entry points it lacks read as 0 ("no")."""

    def __init__(self, lib):
        self._lib = lib

    def __getattr__(self, name):
        try:
            return getattr(self._lib, name)
        except AttributeError:
            def missing(*args):
                return 0
            return missing


def bound_backend(lib):
    """A cuda backend bound to `lib`, a loaded (and declared) library instead of the one fmha builds."""
    from fmha.cuda import backend as cb
    from fmha.cuda import loader

    b = cb.CudaSm90Backend()
    with mock.patch.object(loader, "load", return_value=lib):
        b._bind()
    return b


def library_backend(path: str):
    """A cuda backend bound to a prebuilt library file (e.g. one built from an older commit)."""
    from fmha.cuda import loader

    return bound_backend(loader._declare(_OlderLibrary(ctypes.CDLL(path))))


def variant_backend(flags: str):
    """A cuda backend bound to the library built with `flags` (on top of FMHA_NVCC_FLAGS).

    Tokens among the flags override launch_plan's choice (see force_plan).
    """
    from fmha.cuda import loader

    words = shlex.split(flags)
    build = [w for w in words if not w.startswith("@")]
    b = bound_backend(loader._declare(ctypes.CDLL(str(loader.build(extra_flags=build)))))
    force_plan(b, [w for w in words if w.startswith("@")])
    return b


def force_plan(b, tokens):
    """Override b.launch_plan by plan tokens: @deep / @wide run every problem with that instantiation, @stream
    the D = 128 problems (the plan's choice elsewhere), @pairs the D = 64 ones as KV-head pairs (unsplit),
    @splits=N with N KV splits (else the plan's count)."""
    from fmha.cuda import backend as cb

    plan = dict(w[1:].partition("=")[::2] for w in tokens)
    if not plan:
        return
    planned = b.launch_plan

    def forced(p, index):
        variant, splits = planned(p, index)
        if "stream" in plan and b._tile_n[(p.head_dim, cb.STREAM)]:  # stream exists at D = 128 only
            variant = cb.STREAM
        variant = cb.DEEP if "deep" in plan else cb.WIDE if "wide" in plan else variant
        if "pairs" in plan and p.head_dim == 64:
            return cb.PAIRS, 1
        return variant, int(plan.get("splits") or splits)

    b.launch_plan = forced  # type: ignore[method-assign]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--variant", action="append", default=[], help="NAME=FLAGS (repeatable)")
    ap.add_argument("--lib", action="append", default=[], help="NAME=PATH of a prebuilt library, e.g. an older "
                    "commit's (repeatable; its FmhaDecodeArgs layout must match this checkout's)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--shapes", type=int, default=len(SHAPES))
    ap.add_argument("--only", default=None, help="comma-separated indices into SHAPES")
    ap.add_argument("--shape", action="append", default=[],
                    help="B,T,Hq,Hkv,S,D of a shape not in SHAPES (repeatable; replaces --shapes / --only)")
    ap.add_argument("--no-peers", action="store_true", help="variants only (no triton / cuDNN)")
    ap.add_argument("--sustained", action="store_true",
                    help="settle, then time the replays back to back (as python -m perf does)")
    ap.add_argument("--settle-ms", type=float, default=200.0, help="with --sustained: replay this long before timing")
    ap.add_argument("--per-round", action="store_true", help="also print every round's time of every contender")
    ap.add_argument("--separate", action="store_true",
                    help="follow every call in the graph by a one-element add (a kernel launched without PDL, as "
                         "another op of a model would be); without it, consecutive calls of one contender follow "
                         "each other directly, and fmha's PDL launches overlap a call with the previous one's tail. "
                         "Times then include one add per call: compare contenders within a row, not absolute GB/s")
    ap.add_argument("--kv-layout", choices=KV_LAYOUTS, default="bshd",
                    help="cache storage order: bshd [B, S, Hkv, D] (the tokens of all heads side by side), or bhsd: "
                         "stored [B, Hkv, S, D] and passed as its transposed view (each head's tokens contiguous)")
    args = ap.parse_args()

    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    import fmha
    from fmha.problem import validate
    from perf.ncu_probe import random_cache
    from perf.timing import time_graph

    variants = [v.split("=", 1) for v in args.variant] or ([] if args.lib else [["base", ""]])
    backends = {name: variant_backend(flags) for name, flags in variants}
    backends.update({name: library_backend(path) for name, path in (x.split("=", 1) for x in args.lib)})
    print(f"kv layout {args.kv_layout}; variants: " + "; ".join([f"{n} = {f or 'defaults'}" for n, f in variants] +
                                   [f"{x.split('=', 1)[0]} = library {x.split('=', 1)[1]}" for x in args.lib]), flush=True)

    capture_stream = torch.cuda.Stream()
    separator_buf = torch.zeros(1, device="cuda")

    def separator():
        separator_buf.add_(1.0)

    def separated(calls):
        return [lambda c=c: (c(), separator()) for c in calls]

    def graph_time_us(calls, replays=30):
        # Warm up on the capture stream, as a serving loop that captures where it runs.
        capture_stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(capture_stream):
            for c in calls:
                c()
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g, stream=capture_stream):
            for c in calls:
                c()
        g.replay()
        torch.cuda.synchronize()
        if args.sustained:  # the suite's own timer (perf/timing.py)
            del g
            return statistics.median(time_graph(lambda i: calls[i](), len(calls), replays, args.settle_ms / 1e3))
        times = []
        for _ in range(replays):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            g.replay()
            b.record()
            b.synchronize()
            times.append(a.elapsed_time(b) * 1e3 / len(calls))
        return statistics.median(times)

    def cudnn_calls(sets, causal):
        T, S = sets[0][0].shape[1], sets[0][1].shape[1]
        mask = None
        if causal:
            j, t = torch.arange(S, device="cuda"), torch.arange(T, device="cuda")
            mask = j[None, :] <= S - T + t[:, None]  # bottom-right
        calls = []
        for q, k, v in sets:
            qt, kt, vt = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)

            def call(qt=qt, kt=kt, vt=vt):
                with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
                    return F.scaled_dot_product_attention(qt, kt, vt, attn_mask=mask, enable_gqa=True)
            calls.append(call)
        try:
            calls[0]()
            return calls
        except Exception:
            return None

    shapes = SHAPES[:args.shapes] if args.only is None else [SHAPES[int(i)] for i in args.only.split(",")]
    if args.shape:
        shapes = [tuple(int(x) for x in sh.split(",")) for sh in args.shape]
        if any(len(sh) != 6 for sh in shapes):
            ap.error(f"--shape takes B,T,Hq,Hkv,S,D, got {args.shape}")
    for shape in shapes:
        B, T, Hq, Hkv, S, D = shape
        causal = T > 1
        per = 2 * B * S * Hkv * D * 2
        n = max(2, min(16, -(-3 * 60 * 2 ** 20 // per)))
        sets = [(torch.randn(B, T, Hq, D, device="cuda", dtype=torch.bfloat16),
                 random_cache(B, S, Hkv, D, args.kv_layout), random_cache(B, S, Hkv, D, args.kv_layout))
                for _ in range(n)]
        p = validate(*sets[0], None, None, causal, None)
        outs = [torch.empty_like(q) for q, _, _ in sets]
        lse = torch.empty(B, Hq, T, device="cuda")
        contenders = {}
        for name, b in backends.items():
            contenders[name] = [lambda q=q, k=k, v=v, o=o, b=b: b.run(p, q, k, v, None, o, lse)
                                for (q, k, v), o in zip(sets, outs)]
        if not args.no_peers:
            contenders["triton"] = [lambda q=q, k=k, v=v, o=o: fmha.attention(q, k, v, causal=causal, backend="triton",
                                                                             out=o) for (q, k, v), o in zip(sets, outs)]
            cd = cudnn_calls(sets, causal)
            if cd is not None:
                contenders["sdpa-cudnn"] = cd
        q, k, v = sets[0]
        ref = fmha.attention(q, k, v, causal=causal, backend="triton")
        check = {}
        for name, b in backends.items():
            o = torch.full_like(q, float("nan"))
            b.run(p, q, k, v, None, o, lse)
            check[name] = (o.float() - ref.float()).abs().max().item()
        if args.separate:
            contenders = {name: separated(calls) for name, calls in contenders.items()}
            contenders["(separator)"] = [separator] * n
        times = {name: [] for name in contenders}
        for _ in range(args.rounds):
            for name, calls in contenders.items():
                times[name].append(graph_time_us(calls))
        if args.separate:
            # Not subtracted: a graph of adds alone pays graph-launch overhead per call (8.7 us at 2 sets,
            # 1.5 at 64, run bp) that a graph of attention calls hides, so the difference would overstate
            # bandwidth. Differences between contenders are exact either way.
            sep = times.pop("(separator)")
            print(f"  (times include one add per call; a graph of the adds alone: {statistics.median(sep):.1f} us "
                  f"per call)", flush=True)
        gb = p.bytes_moved() / 1e9
        cells = []
        for name, ts in times.items():
            med = statistics.median(ts)
            spread = (max(ts) - min(ts)) / med * 100
            diff = f" maxdiff {check[name]:.1e}" if name in check else ""
            cells.append(f"{name} {med:.1f}us {gb / med * 1e6:.0f}GB/s (±{spread:.0f}%){diff}")
        print(f"{shape}: " + "; ".join(cells), flush=True)
        if args.per_round:
            print("  per round (us): " + "; ".join(f"{name} " + " ".join(f"{t:.1f}" for t in ts)
                                                  for name, ts in times.items()), flush=True)
        del sets, outs, contenders
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
