"""A/B of CUDA library builds on the DeepSeek latent shapes, beside FlashInfer's MLA decode, in rounds.

    python tools/latent_ab.py --lib base=old/libfmha.so --lib new=new/libfmha.so --shapes mla/B64-T1,v4/B64
    python tools/latent_ab.py --lib new=new/libfmha.so --rounds 7 --no-flashinfer
    python tools/latent_ab.py --lib plan=lib.so --lib s2=lib.so@latent_seesaw64@splits=2 --shapes mla/B16-T1

For each shape of `--preset deepseek` (perf/shapes.py) whose name starts with one of --shapes, every library
(prebuilt .so files loaded side by side, as `tools/variants.py --lib`; their C API and FmhaDecodeArgs layout must
match this checkout's; PATH@TOKEN@... applies plan tokens (a PATH holds no '@'), tools/_cuda.py force_plan: @CONFIG
runs the shapes that configuration serves with it, @splits=N forces the split count) and FlashInfer's
`BatchMLAPagedAttentionWrapper` (when importable, on 64-token pages) are timed in --rounds rounds, each starting one
contender later (perf/timing.py round_order). Each timing is the suite's: the median of 30 CUDA-graph replays over
rotating input sets larger than 3x L2, after --settle-ms of untimed replays, with the SM clock sampled through NVML
(perf/clocks.py). Printed per contender: the median over rounds and every round's time and clock. At the H200's
power cap the clock drifts by 100-300 MHz while a shape is measured, so one round of two contenders can rank them
either way; several rounds, rotating, do not. Each contender's output is checked against the fp32 reference on the first and last sequence
(cosine, as the suite's gate). Needs an sm_90a GPU; FlashInfer as for the suite (perf/README.md).
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # run from a checkout


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lib", action="append", default=[], required=True,
                    help="NAME=PATH of a prebuilt library (repeatable; the first is the baseline)")
    ap.add_argument("--shapes", default="mla/,v4/", help="comma-separated prefixes of deepseek shape names")
    ap.add_argument("--rounds", type=int, default=6, help="rounded up to even (perf.timing.even_rounds)")
    ap.add_argument("--settle-ms", type=float, default=200.0)
    ap.add_argument("--no-flashinfer", action="store_true")
    args = ap.parse_args(argv)
    pairs = [x.split("=", 1) for x in args.lib]
    if any(len(x) != 2 or not x[0] for x in pairs):
        ap.error(f"--lib takes NAME=PATH, got {args.lib}")
    from tools._cuda import check_plan_tokens

    libs = []  # (name, path, plan tokens)
    for name, spec in pairs:
        path, *words = spec.split("@")
        tokens = ["@" + w for w in words]
        if not path:
            ap.error(f"--lib {name}={spec}: no library path before the plan tokens")
        try:
            check_plan_tokens(tokens, spec)
        except ValueError as e:
            ap.error(f"--lib {name}=...: {e}")
        libs.append((name, path, tokens))

    import torch
    from fmha.problem import validate
    from perf.bench import MIN_COSINE, cosine
    from perf.deepseek import PAGE_SIZE, FlashInferMLA, LatentInputs
    from perf.peers import Unsupported
    from perf.shapes import select
    from perf.timing import even_rounds, graph_round, l2_cache_bytes, round_order, rotation_count
    from tools._cuda import CONFIG_NAMES, library_backend

    if not torch.cuda.is_available():
        ap.error("needs a CUDA GPU")
    dev = torch.device("cuda")
    backends = {name: library_backend(path, tokens) for name, path, tokens in libs}
    prefixes = [s for s in args.shapes.split(",") if s]
    shapes = [s for s in select("deepseek", None) if any(s.name.startswith(p) for p in prefixes)]
    if not shapes:
        ap.error(f"--shapes {args.shapes!r} matches no deepseek shape")
    fi = None if args.no_flashinfer else FlashInferMLA()
    for shape in shapes:
        n_sets = rotation_count(shape.B * shape.S * shape.Hkv * shape.D * 2, l2_cache_bytes(dev))
        inp = LatentInputs(shape, n_sets, dev, 1, torch.bfloat16)
        if fi is not None:
            inp.build_pages(PAGE_SIZE)
        rows, refs = inp.references()
        seqlens = inp.cache_seqlens

        def v_of(kv):
            return kv if kv.shape[-1] == shape.Dv else kv[..., :shape.Dv]

        p = validate(inp.sets[0][0], inp.sets[0][1], v_of(inp.sets[0][1]), seqlens, inp.softmax_scale, True)
        outs = [q.new_empty(shape.B, shape.T, shape.Hq, shape.Dv) for q, _ in inp.sets]
        lses = [torch.empty(shape.B, shape.Hq, shape.T, device=dev, dtype=torch.float32) for _ in inp.sets]
        calls, plans = {}, {}
        for name, b in backends.items():
            config, splits = b.launch_plan(p, dev.index or 0)  # what the row says it timed (forced or planned)
            plans[name] = f"{CONFIG_NAMES.get(config, config)}" + (f" x{splits}" if splits > 1 else "")
            def call(i, b=b):
                q, kv = inp.sets[i]
                b.run(p, q, kv, v_of(kv), seqlens, outs[i], lses[i])
                return outs[i]
            calls[name] = call
        if fi is not None:
            try:
                calls["flashinfer-mla"] = fi.prepare(inp)
            except Unsupported as e:
                print(f"{shape.name}: flashinfer-mla unsupported ({e})", flush=True)
        checks = {}
        for name, fn in calls.items():
            out = fn(0)
            torch.cuda.synchronize()
            checks[name] = cosine(out[rows], refs["latent"])
        times = {name: [] for name in calls}
        for r in range(even_rounds(args.rounds)):
            for name in round_order(calls, r):
                us, clock = graph_round(calls[name], n_sets, dev, settle_s=args.settle_ms / 1e3)
                times[name].append((us, clock.get("sm_mhz")))
        base = statistics.median(u for u, _ in times[libs[0][0]])
        for name, ts in times.items():
            med = statistics.median(u for u, _ in ts)
            gate = "" if checks[name] >= MIN_COSINE else f" WRONG (cosine {checks[name]:.6f})"
            rounds = " ".join(f"{u:.1f}" + (f"@{m:.0f}" if m is not None else "") for u, m in ts)
            print(f"{shape.name:46s} {name:16s} {med:8.1f} us  {base / med:5.3f}x of {libs[0][0]}  "
                  f"[{rounds}]{gate}" + (f"  ({plans[name]})" if name in plans else ""), flush=True)
        del calls, inp, outs, lses
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
