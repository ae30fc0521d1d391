"""Time library builds of the CUDA kernel interleaved in one process: build variants (extra nvcc flags),
probe builds, prebuilt libraries and launch-plan overrides, against the triton backend and cuDNN SDPA.

    python tools/variants.py --variant base= --variant nopdl="-DFMHA_DISABLE_PDL=1" --only 2
    python tools/variants.py --variant base= --variant alone=probe:stream_only --only 2,7
    python tools/variants.py --variant plan= --variant deep=@deep --variant s8="@deep @splits=8" --shape 1,1,32,8,32768,128

A variant is NAME=SPEC, SPEC words among: nvcc flags (on top of FMHA_NVCC_FLAGS; the feature flags
-DFMHA_DISABLE_PDL=1, -DFMHA_DISABLE_CLUSTER_MERGE=1, -DFMHA_DISABLE_ROW_BLOCK_PAIRS=1, -DFMHA_DISABLE_Q_TMA=1), one
probe build
`probe:MODE` (timestamps; stream_only and no_combine give wrong results by design: consumers release each stage as
soon as it lands, split partials are not merged) and plan tokens (@wide, @deep, @stream, @pairs, @seesaw, @split_qk,
@wide_gather, the @latent_* configurations where V is K's memory, @splits=N; see tools/_cuda.py force_plan). Every
variant is built into its own library (cached by flags) and loaded side by side in this process. For each shape the
contenders (every variant, the triton backend and cuDNN SDPA) are timed in turn, round after round (--rounds), each
round starting one contender later, so slow drifts of the GPU's state (power cap, clocks, temperature) hit them alike: on
an H200 the same kernel timed minutes apart in separate processes moved by up to 12%. Each timing is the median of
30 CUDA-graph replays over rotating input sets larger than 3x L2; the table shows the median over rounds, the spread
(max - min) / median and, where NVML answers, the median SM clock the contender was timed at (perf/clocks.py). Every
contender's output, cuDNN's included, is checked against the triton backend's (maxdiff; "wrong by design" marks the
probe modes whose results are not meant to be right). Units: us per call, GB/s decimal (q + k + v + out bytes). --separate puts a
one-element add after every call (see its help).

By default each replay is timed on its own (the host waits for it before launching the next), which
leaves the GPU a short gap between replays. --sustained times as `python -m perf` does instead: the
graph is first replayed for --settle-ms, then the replays run back to back. Kernels at the H200's
700 W cap may rank differently in the two regimes.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # run from a checkout

from tools.ncu_probe import KV_LAYOUTS  # noqa: E402

SHAPES = [  # B, T, Hq, Hkv, S, D (--shapes N keeps the first N; --only i,j picks some)
    (128, 1, 32, 8, 8192, 128), (32, 1, 32, 8, 4096, 128), (1, 1, 32, 8, 65536, 128), (1, 1, 32, 8, 8192, 128),
    (4, 1, 32, 8, 512, 128), (32, 4, 32, 8, 4096, 128), (8, 16, 32, 8, 8192, 128), (32, 1, 32, 8, 8192, 64),
    (32, 1, 16, 8, 8192, 256), (128, 1, 16, 1, 4096, 512), (64, 1, 128, 1, 4096, 512), (1, 1, 32, 8, 262144, 128),
    (16, 1, 32, 8, 32768, 128), (8, 1, 32, 8, 8192, 128), (1, 1, 8, 1, 8192, 128), (1, 1, 8, 1, 32768, 128),
    (1, 1, 32, 8, 16384, 128), (2, 1, 32, 8, 8192, 128),
]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--variant", action="append", default=[],
                    help="NAME=SPEC: nvcc flags, probe:MODE and plan tokens (repeatable; default base=)")
    ap.add_argument("--lib", action="append", default=[], help="NAME=PATH of a prebuilt library, e.g. an older "
                    "commit's (repeatable; its C API and FmhaDecodeArgs layout must match this checkout's)")
    ap.add_argument("--rounds", type=int, default=4, help="rounded up to even (perf.timing.even_rounds)")
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
    ap.add_argument("--page", type=int, default=0,
                    help="page size: every call reads page pools through a shuffled block table "
                         "(perf/paged.py page_pools); the contiguous call of the product library runs beside "
                         "the variants as `contiguous` (default: contiguous caches)")
    ap.add_argument("--kv-layout", choices=KV_LAYOUTS, default="bshd",
                    help="cache storage order: bshd [B, S, Hkv, D] (the tokens of all heads side by side), or bhsd: "
                         "stored [B, Hkv, S, D] and passed as its transposed view (each head's tokens contiguous)")
    ap.add_argument("--latent", action="store_true",
                    help="DeepSeek's shared latent: v_cache is k_cache (D = 512) or its first 512 columns (D = 576), "
                         "so the @latent_* configurations serve (with --page: one pool, V its view); without peers")
    args = ap.parse_args()
    from tools._cuda import library_backend, parse_variant, variant_backend

    specs = dict(v.split("=", 1) if "=" in v else (v, "") for v in args.variant)
    if not specs and not args.lib:
        specs = {"base": ""}
    try:
        variants = {name: parse_variant(spec) for name, spec in specs.items()}
    except ValueError as e:
        ap.error(str(e))
    libs = [x.split("=", 1) for x in args.lib]
    if any(len(x) != 2 for x in libs):
        ap.error(f"--lib takes NAME=PATH, got {args.lib}")

    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    import fmha
    from fmha.problem import validate
    from perf.clocks import ClockSampler, nvml_for
    from perf.paged import page_pools
    from perf.timing import even_rounds, l2_cache_bytes, round_order, rotation_count, time_graph
    from tools.ncu_probe import random_cache

    try:
        backends = {name: variant_backend(v)[0] for name, v in variants.items()}
    except ValueError as e:
        ap.error(str(e))
    backends.update({name: library_backend(path) for name, path in libs})
    wrong_by_design = {name for name, v in variants.items() if not v.correct}
    print(f"kv layout {args.kv_layout}; variants: " + "; ".join(
        [f"{n} = {specs.get(n) or 'the product library, its plan'}" for n in variants] +
        [f"{n} = library {path}" for n, path in libs]), flush=True)

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
        sampler = ClockSampler(nvml_for(torch.device("cuda")))
        if args.sustained:  # the suite's own timer (perf/timing.py)
            del g
            us = statistics.median(time_graph(lambda i: calls[i](), len(calls), replays, args.settle_ms / 1e3,
                                              sampler))
            return us, sampler.summary().get("sm_mhz")
        times = []
        for _ in range(replays):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            g.replay()
            b.record()
            sampler.sample()
            b.synchronize()
            times.append(a.elapsed_time(b) * 1e3 / len(calls))
        return statistics.median(times), sampler.summary().get("sm_mhz")

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
        per = (1 if args.latent else 2) * B * S * Hkv * D * 2 + 2 * B * T * Hq * D * 2  # a set's bytes, q and out in
        n = rotation_count(per, l2_cache_bytes(torch.device("cuda")))
        if args.latent and D not in (512, 576):
            ap.error(f"--latent: D must be 512 or 576, got {D}")
        sets = [(torch.randn(B, T, Hq, D, device="cuda", dtype=torch.bfloat16),
                 random_cache(B, S, Hkv, D, args.kv_layout), None if args.latent else random_cache(B, S, Hkv, D,
                                                                                                  args.kv_layout))
                for _ in range(n)]
        if args.latent:  # V: the latent's first 512 columns, a view of K's memory
            sets = [(q, k, k[..., :512]) for q, k, _ in sets]
        outs = [q.new_empty(*q.shape[:3], v.shape[-1]) for q, _, v in sets]
        lse = torch.empty(B, Hq, T, device="cuda")
        contenders = {}
        if args.page:
            if S % args.page:
                ap.error(f"--page {args.page} must divide S = {S}")
            seqlens = torch.full((B,), S, dtype=torch.int32, device="cuda")
            paged = []  # (block_table, [k_pool, v_pool]) a set
            for _, k, v in sets:
                if args.latent:  # one pool, V the view of it that v is of k
                    (kp,), bt = page_pools((k,), args.page)
                    paged.append((bt, [kp, kp[..., :v.shape[-1]]]))
                else:
                    paged.append(page_pools((k, v), args.page)[::-1])
            p = validate(sets[0][0], *paged[0][1], seqlens, causal=causal, block_table=paged[0][0])
            contenders["contiguous"] = [lambda q=q, k=k, v=v, o=o: fmha.attention(q, k, v, seqlens, causal=causal,
                                                                                  backend="cuda", out=o)
                                        for (q, k, v), o in zip(sets, outs)]
            for name, b in backends.items():
                contenders[name] = [lambda q=q, kv=kv, bt=bt, o=o, b=b: b.run(p, q, kv[0], kv[1], seqlens, o, lse,
                                                                               block_table=bt)
                                    for (q, _, _), (bt, kv), o in zip(sets, paged, outs)]
        else:
            p = validate(*sets[0], causal=causal)
            for name, b in backends.items():
                contenders[name] = [lambda q=q, k=k, v=v, o=o, b=b: b.run(p, q, k, v, None, o, lse)
                                    for (q, k, v), o in zip(sets, outs)]
        if not args.no_peers and not args.page and not args.latent:
            contenders["triton"] = [lambda q=q, k=k, v=v, o=o: fmha.attention(q, k, v, causal=causal, backend="triton",
                                                                             out=o) for (q, k, v), o in zip(sets, outs)]
            cd = cudnn_calls(sets, causal)
            if cd is not None:
                contenders["sdpa-cudnn"] = cd
        q, k, v = sets[0]
        ref = fmha.attention(q, k, v, causal=causal, backend="triton")
        check = {}
        for name, b in backends.items():
            o = torch.full_like(outs[0], float("nan"))
            if args.page:
                bt, kv = paged[0]
                b.run(p, q, kv[0], kv[1], seqlens, o, lse, block_table=bt)
            else:
                b.run(p, q, k, v, None, o, lse)
            check[name] = (o.float() - ref.float()).abs().max().item()
        for name, calls in contenders.items():  # the others (fmha calls into outs[0], cuDNN's [B, H, T, D] return)
            if name not in check:
                outs[0].fill_(float("nan"))
                got = calls[0]()
                o = got.transpose(1, 2) if name == "sdpa-cudnn" else outs[0]
                check[name] = (o.float() - ref.float()).abs().max().item()
        if args.separate:
            contenders = {name: separated(calls) for name, calls in contenders.items()}
            contenders["(separator)"] = [separator] * n
        times = {name: [] for name in contenders}
        clocks = {name: [] for name in contenders}
        for r in range(even_rounds(args.rounds)):
            for name, calls in round_order(contenders.items(), r):
                us, mhz = graph_time_us(calls)
                times[name].append(us)
                if mhz is not None:
                    clocks[name].append(mhz)
        if args.separate:
            # Not subtracted: a graph of adds alone pays graph-launch overhead per call (8.7 us at 2 sets on
            # an H200) that a graph of attention calls hides, so the difference would overstate bandwidth.
            # Differences between contenders are exact either way.
            sep = times.pop("(separator)")
            clocks.pop("(separator)")
            print(f"  (times include one add per call; a graph of the adds alone: {statistics.median(sep):.1f} us "
                  f"per call)", flush=True)
        # (a latent is read once: its K rows, with q and out; bytes_moved counts the V view's rows again)
        gb = (p.bytes_moved() - (B * S * Hkv * p.head_dim_v * 2 if args.latent else 0)) / 1e9
        cells = []
        for name, ts in times.items():
            med = statistics.median(ts)
            spread = (max(ts) - min(ts)) / med * 100
            diff = f" maxdiff {check[name]:.1e}" if name in check else ""
            diff += " (wrong by design)" if name in wrong_by_design else ""
            mhz = f" @{statistics.median(clocks[name]):.0f}MHz" if clocks[name] else ""
            cells.append(f"{name} {med:.1f}us {gb / med * 1e6:.0f}GB/s (±{spread:.0f}%){mhz}{diff}")
        print(f"{shape}: " + "; ".join(cells), flush=True)
        if args.per_round:
            print("  per round (us): " + "; ".join(f"{name} " + " ".join(f"{t:.1f}" for t in ts)
                                                  for name, ts in times.items()), flush=True)
        del sets, outs, contenders
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
