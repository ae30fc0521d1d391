"""Where a K/V tile's time goes in the sm90 decode kernel: the timing probe's stamps per ring position.

    python tools/stream_probe.py --shape 1,1,32,8,65536,128
    python tools/stream_probe.py --shape 8,16,32,8,8192,128 --causal
    python tools/stream_probe.py --shape 32,2,64,1,8192,576 --causal --latent --repeat 20
    python tools/stream_probe.py --shape 64,2,128,1,4096,576 --causal --latent --schedule balanced \
        --flags="-DFMHA_PROBE_RING_TILES=160 -DFMHA_PROBE_GLOBAL_TIMER=1"

Runs the cuda backend on the probe build of the library (fmha.cuda.loader.load_probe("timestamps"): results
stay correct; the product library has none of the probe's code), runs the shape once, zeroes the stamps,
runs it again, and prints for the probed CTAs (the first 256 of the grid, their first 64 ring positions),
in SM cycles (clock64, per SM: only stamps of one CTA are compared):

  consumer wait   consumer thread 0 waiting for the K (V) tile of a ring position
  issue -> ready  the producer's TMA issue of that tile -> the consumer has it, over the positions where
                  the consumer waited (so the tile's arrival is what ended the wait)
  producer wait   the producer lane waiting for a free stage before issuing the tile
  cycles/tile     steady state: consumer's K arrival of the last probed position minus that of
                  position 3, over the positions between

for ring positions 0-2 (the ring's first fill) and 3 onwards; then the 64-row loop's phases where that loop
ran. Last, each CTA's timeline in %globaltimer ns (entry, past griddepcontrol.wait, first K tile in, last V
tile in, end; in the 64-key seesaw also each warpgroup's loop end, which splits the tail into the last tiles' math and
the epilogue): start-up, stream and tail over the grid, which SMs stream fastest and slowest, how many CTAs
stream over the call, the probed CTAs' K/V bytes landed per 2 us (GB/s; only where every tile of a CTA is
stamped) and the stream time per KV head, and where SMs run CTAs in turn, the time each SM's stream stops between
one CTA's last V tile and the next one's first K tile; under --schedule balanced (the 64-key seesaw), each visit's
epilogue and Q load and the stream's stop between one visit's last tile and the next one's first. --repeat N reads
the last of N calls back to back (the suite's regime); --flags adds nvcc flags and plan tokens (tools/_cuda.py),
among them the probe's own:
-DFMHA_PROBE_RING_TILES=N stamps N ring positions instead of 64, -DFMHA_PROBE_GLOBAL_TIMER=1 stamps them in
%globaltimer ns (comparable across CTAs; the "cycles" figures are then ns).
"""
from __future__ import annotations

import argparse
import ctypes
import os
import statistics
import sys
from collections import Counter

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # run from a checkout

from tools.ncu_probe import KV_LAYOUTS  # noqa: E402

# The stamps' layout (fmha/cuda/csrc/common/probe.cuh): per CTA, ring positions of EVENTS, then one timeline
# row of TIMELINE.
TIMELINE = ("entry", "griddep", "first_k", "last_v", "end", "smid", "loop_done", "loop_done_wg1", "epilogue_done_wg1")
EVENTS = ("k_empty_wait", "k_issued", "v_empty_wait", "v_issued", "k_full_wait", "k_full", "v_full_wait", "v_full",
          # the 64-row loop's phases, per loop iteration
          "loop_issued", "qk_landed", "qk_landed_wg1", "exchanged", "softmax_done", "pv_landed", "operands_ready",
          # the balanced schedule's visits, under the ring position of each visit's first tile
          "visit_q_issued", "visit_q_landed", "visit_epilogue", "visit_end")
# The 64-row loop's phases in the order they happen: (label, from event, to event, iterations later the to
# event is stamped), then the whole iteration.
LOOP_PHASES = (("operands ready -> wgmmas issued", "operands_ready", "loop_issued", 0),
               ("issue -> Q K^T(it+1) landed", "loop_issued", "qk_landed", 0),
               ("Q K^T landed -> scores exchanged", "qk_landed", "exchanged", 0),
               ("exchanged -> softmax done", "exchanged", "softmax_done", 0),
               ("softmax done -> P V(it) landed", "softmax_done", "pv_landed", 0),
               ("P V landed -> next operands ready", "pv_landed", "operands_ready", 1),
               ("issue -> next issue", "loop_issued", "loop_issued", 1),
               ("Q K^T landed: warpgroup 1 - 0", "qk_landed", "qk_landed_wg1", 0))


def probe_backend(words=()):
    """(backend, library): a CudaBackend bound to the timestamps probe build, with extra nvcc flags and plan
    tokens (@stream, @splits=16, ...: tools/_cuda.py force_plan) among `words`."""
    from tools._cuda import parse_variant, variant_backend

    v = parse_variant(" ".join(["probe:timestamps", *words]))
    return variant_backend(v)


def read_stamps(lib, clear: bool):
    ctas, tiles, events = ctypes.c_int(), ctypes.c_int(), ctypes.c_int()
    if lib.fmha_probe_layout(ctypes.byref(ctas), ctypes.byref(tiles), ctypes.byref(events)) != 0:
        raise RuntimeError(lib.fmha_last_error().decode())
    if events.value != len(EVENTS):
        raise RuntimeError(f"probe layout has {events.value} events, this script knows {len(EVENTS)}")
    buf = (ctypes.c_uint64 * (ctas.value * tiles.value * events.value))()
    if lib.fmha_probe_read(buf, ctypes.sizeof(buf), 1 if clear else 0) != 0:
        raise RuntimeError(lib.fmha_last_error().decode())
    n_t, n_e = tiles.value, events.value
    return [[list(buf[(c * n_t + t) * n_e:(c * n_t + t + 1) * n_e]) for t in range(n_t)] for c in range(ctas.value)]


def summary(values):
    if not values:
        return "-"
    values = sorted(values)
    return f"median {statistics.median(values):8.0f}  p90 {values[int(0.9 * (len(values) - 1))]:8.0f}  (n={len(values)})"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shape", required=True, help="B,T,Hq,Hkv,S,D")
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--flags", default="", help="more nvcc flags for the probed library, e.g. -DFMHA_DISABLE_PDL=1 "
                    "(--flags=-D...: a value that starts with '-' needs the '='); plan tokens "
                    "(@wide, @deep, @stream, @pairs, @seesaw, @split_qk, @wide_gather, @splits=N) force the launch "
                    "plan")
    ap.add_argument("--repeat", type=int, default=1,
                    help="calls back to back (no host sync between) before reading: the stamps are the last call's")
    ap.add_argument("--kv-layout", choices=KV_LAYOUTS, default="bshd",
                    help="cache storage order (tools/ncu_probe.py random_cache): bhsd keeps each head's tokens contiguous")
    ap.add_argument("--latent", action="store_true",
                    help="DeepSeek's shared latent (tools/ncu_probe.py random_inputs): v_cache is k_cache or its first "
                         "512 columns; D = 512 or 576")
    ap.add_argument("--schedule", choices=("static", "balanced"), default=None,
                    help="the latent launches' schedule (FMHA_CUDA_SCHEDULE), with cache_seqlens of S each: balanced "
                         "also prints each visit's phases (the 64-key seesaw)")
    a = ap.parse_args()
    if a.schedule:
        from fmha.cuda.backend import SCHEDULE_ENV
        os.environ[SCHEDULE_ENV] = a.schedule

    import torch
    from fmha.problem import validate
    from tools._cuda import CONFIG_NAMES, KV_HEAD_PAIRS, tile_bytes
    from tools.ncu_probe import random_inputs

    q, k, v, out = random_inputs(a.shape, a.kv_layout, a.latent)
    lse = torch.empty(q.shape[0], q.shape[2], q.shape[1], device="cuda")
    seqlens = torch.full((q.shape[0],), k.shape[1], device="cuda", dtype=torch.int32) if a.schedule else None
    p = validate(q, k, v, seqlens, causal=a.causal)
    try:
        b, lib = probe_backend(a.flags.split())
    except ValueError as e:
        ap.error(str(e))
    config, splits = b.launch_plan(p, q.device.index or 0)
    print(f"shape {a.shape}{' causal' if a.causal else ''} {a.kv_layout}, {a.repeat} call(s): configuration "
          f"{CONFIG_NAMES.get(config, config)}, {splits} split(s); {b.launch_details(p)}", flush=True)
    b.run(p, q, k, v, seqlens, out, lse)
    torch.cuda.synchronize()
    read_stamps(lib, clear=True)
    for _ in range(a.repeat):
        b.run(p, q, k, v, seqlens, out, lse)
    torch.cuda.synchronize()
    stamps = read_stamps(lib, clear=False)
    try:
        print(f"SM clock now (NVML): {torch.cuda.clock_rate()} MHz", flush=True)
    except Exception:  # no pynvml: cycles only
        pass

    ev = {name: i for i, name in enumerate(EVENTS)}
    timelines = [c[-1] for c in stamps]  # the row after the ring positions (TIMELINE)
    stamps = [c[:-1] for c in stamps]
    probed = [c for c in stamps if c[0][ev["k_issued"]] != 0]
    print(f"{len(probed)} CTAs probed", flush=True)
    for label, positions in (("positions 0-2", range(0, 3)), ("positions 3+", range(3, len(stamps[0])))):
        print(f"-- {label} (SM cycles)")
        for x in ("k", "v"):
            waits, latencies, producer = [], [], []
            for c in probed:
                for t in positions:
                    s = c[t]
                    if s[ev[f"{x}_full"]] == 0 or s[ev[f"{x}_issued"]] == 0:
                        continue
                    wait = s[ev[f"{x}_full"]] - s[ev[f"{x}_full_wait"]]
                    waits.append(wait)
                    if wait > 0:
                        latencies.append(s[ev[f"{x}_full"]] - s[ev[f"{x}_issued"]])
                    producer.append(s[ev[f"{x}_issued"]] - s[ev[f"{x}_empty_wait"]])
            print(f"  {x.upper()} consumer wait   {summary(waits)}")
            print(f"  {x.upper()} issue -> ready  {summary(latencies)}")
            print(f"  {x.upper()} producer wait   {summary(producer)}")
    per_tile = []
    for c in probed:
        arrivals = [t for t in range(3, len(c)) if c[t][ev["k_full"]] != 0]
        if len(arrivals) >= 2:
            first, last = arrivals[0], arrivals[-1]
            per_tile.append((c[last][ev["k_full"]] - c[first][ev["k_full"]]) / (last - first))
    print(f"-- steady state: cycles/tile {summary(per_tile)}")
    print_loop_phases(probed, ev)
    print_visits(probed, ev)
    print_timeline([t for t in timelines if t[TIMELINE.index("end")] != 0])
    tiles_per_cta = -(-p.seqlen_k // (lib.fmha_config_tile_n(p.head_dim, config) * splits))
    if a.schedule == "balanced":  # (a CTA streams its share's tiles, not S / tile_n)
        print("  (no bandwidth profile under the balanced schedule)")
    elif tiles_per_cta <= len(stamps[0]):
        print_bandwidth_profile(stamps, timelines, ev, tile_bytes(lib, config, p.head_dim))
    else:  # the later tiles are not stamped: the linear map onto the timeline would be wrong
        print(f"  (no bandwidth profile: {tiles_per_cta} tiles a CTA, the probe stamps {len(stamps[0])})")
    # Per KV head (the grid's y, a pair of heads with KV-head pairs; the probed CTA index is x + X (y + Y z)):
    # does a head's place in the cache's rows (bshd: the heads of a token side by side) set its stream rate?
    pairs = config == KV_HEAD_PAIRS
    x_ctas = splits * (1 if pairs else -(-p.seqlen_q * p.group_size // 64))
    y_ctas = p.heads_kv // 2 if pairs else p.heads_kv
    by_head = {}
    for n, t in enumerate(timelines):
        if t[TIMELINE.index("first_k")] and t[TIMELINE.index("last_v")]:
            us = (t[TIMELINE.index("last_v")] - t[TIMELINE.index("first_k")]) / 1000
            by_head.setdefault(n // x_ctas % y_ctas, []).append(us)
    print(f"  stream us by KV {'head pair' if pairs else 'head'}, median (min-max): " + "; ".join(
        f"{h}: {statistics.median(v):.1f} ({min(v):.1f}-{max(v):.1f})" for h, v in sorted(by_head.items())))


def print_bandwidth_profile(stamps, timelines, ev, tile_bytes):
    """The probed CTAs' K/V bytes landed per 2 us, in GB/s: each CTA's V-tile arrivals (SM cycles) mapped
    linearly onto its globaltimer span (first K in .. last V in), so a falling tail shows as falling GB/s.
    Only the probed CTAs and ring positions count."""
    i = {name: k for k, name in enumerate(TIMELINE)}
    t0 = min((t[i["first_k"]] for t in timelines if t[i["first_k"]]), default=0)
    landed = []
    for c, t in zip(stamps, timelines):
        pos = [x for x in range(len(c)) if c[x][ev["v_full"]]]
        if len(pos) < 2 or not (t[i["first_k"]] and t[i["last_v"]]) or not c[0][ev["k_full"]]:
            continue
        c0, c1 = c[0][ev["k_full"]], c[pos[-1]][ev["v_full"]]
        ns_per_cycle = (t[i["last_v"]] - t[i["first_k"]]) / max(1, c1 - c0)
        landed += [t[i["first_k"]] - t0 + (c[x][ev["v_full"]] - c0) * ns_per_cycle for x in pos]
    if not landed:
        return
    bins = Counter(int(ns // 2000) for ns in landed)
    print("  K/V landed, GB/s per 2 us from the first K tile (probed CTAs): " + " ".join(
        f"{2 * k}:{bins.get(k, 0) * tile_bytes / 2000:.0f}" for k in range(max(bins) + 1)))


def print_loop_phases(probed, ev):
    """The 64-row loop's phases (consumer thread 0), iterations 3 onwards."""
    rows = [(c, t) for c in probed for t in range(3, len(c) - 1)
            if c[t][ev["loop_issued"]] and c[t + 1][ev["loop_issued"]]]
    if not rows:
        return
    print("-- 64-row loop phases, iterations 3+ (consumer thread 0, SM cycles)")
    for label, a, b, later in LOOP_PHASES:
        spans = [c[t + later][ev[b]] - c[t][ev[a]] for c, t in rows if c[t][ev[a]] and c[t + later][ev[b]]]
        if spans:  # (no second warpgroup: no warpgroup-1 stamps)
            print(f"  {label:36s} {summary(spans)}")


def print_visits(probed, ev):
    """The balanced schedule's visits (ring stamps in %globaltimer ns: -DFMHA_PROBE_GLOBAL_TIMER=1; else SM
    cycles): each visit's epilogue, its Q's load, and the stream's stop from one visit's last tile to the next
    one's first."""
    visits, phases = Counter(), {}
    for c in probed:
        starts = [t for t in range(len(c)) if c[t][ev["visit_q_landed"]]]  # (the last: no visit left)
        visits[len(starts) - 1] += 1
        for n, t in enumerate(starts):
            s, spans = c[t], []
            spans.append(("epilogue", s[ev["visit_epilogue"]], s[ev["visit_end"]]))
            spans.append(("Q load issued -> landed", s[ev["visit_q_issued"]], s[ev["visit_q_landed"]]))
            spans.append(("Q landed -> first K in", s[ev["visit_q_landed"]], s[ev["k_full"]]))
            if n > 0 and t > 0:  # (thread 0 waits for the first half of every tile, K's columns)
                last = c[t - 1][ev["k_full"]]
                spans.append(("last tile in -> epilogue", last, c[starts[n - 1]][ev["visit_epilogue"]]))
                spans.append(("epilogue end -> Q load issued", c[starts[n - 1]][ev["visit_end"]],
                              s[ev["visit_q_issued"]]))
                spans.append(("last tile in -> next first K in", last, s[ev["k_full"]]))
            for label, a, b in spans:
                if a and b:
                    phases.setdefault(label, []).append(b - a)
    if not phases:
        return
    print(f"-- balanced visits (consumer thread 0): visits a CTA {dict(sorted(visits.items()))} (count: CTAs)")
    if any(any(c[-1]) for c in probed):  # (a CTA's stamps reach the last probed position: later ones are lost)
        print(f"  (stamps reach ring position {len(probed[0]) - 1}: later visits are not counted; raise "
              "-DFMHA_PROBE_RING_TILES)")
    for label, spans in phases.items():
        print(f"  {label:36s} {summary(spans)}")


def print_timeline(rows):
    """The CTAs' timelines (globaltimer ns, one clock for the GPU): when each phase starts and how long it takes."""
    if not rows:
        print("-- timeline: no CTA stamped")
        return
    i = {name: k for k, name in enumerate(TIMELINE)}
    t0 = min(r[i["entry"]] for r in rows)
    end = max(r[i["end"]] for r in rows)
    print(f"-- CTA timeline, ns from the first CTA's entry ({len(rows)} CTAs; kernel span {end - t0} ns)")
    for label, a, b in (("entry", None, "entry"), ("griddep wait done", None, "griddep"),
                        ("first K tile in", None, "first_k"), ("last V tile in", None, "last_v"), ("end", None, "end"),
                        ("entry -> griddep done", "entry", "griddep"), ("griddep -> first K in", "griddep", "first_k"),
                        ("first K -> last V in (stream)", "first_k", "last_v"), ("last V in -> end (tail)", "last_v", "end"),
                        ("last V in -> loop done (wg0)", "last_v", "loop_done"),
                        ("loop done -> end (wg0, + merge)", "loop_done", "end"),  # (end: past any cluster merge)
                        ("last V in -> loop done (wg1)", "last_v", "loop_done_wg1"),
                        ("loop done -> epilogue done (wg1)", "loop_done_wg1", "epilogue_done_wg1")):
        vals = [r[i[b]] - (r[i[a]] if a else t0) for r in rows if r[i[b]] != 0 and (a is None or r[i[a]] != 0)]
        if vals:
            vals.sort()
            print(f"  {label:32s} min {vals[0]:7d}  median {statistics.median(vals):9.0f}  p90 "
                  f"{vals[int(0.9 * (len(vals) - 1))]:7d}  max {vals[-1]:7d}")
    # Which SMs stream slowest and fastest (first K in -> last V in), to tell a systematic per-SM
    # effect (the same SMs in every run) from noise.
    per_sm = sorted((r[i["last_v"]] - r[i["first_k"]], r[i["smid"]]) for r in rows if r[i["first_k"]] and r[i["last_v"]])

    def fmt(xs):
        return " ".join(f"{sm}:{ns // 100 / 10:.1f}" for ns, sm in xs)

    print(f"  stream us by SM, fastest: {fmt(per_sm[:10])}")
    print(f"  stream us by SM, slowest: {fmt(per_sm[-10:])}")
    # How many CTAs stream (first K in .. last V in) over the call: the tail shows as the count falling.
    spans = [(r[i["first_k"]] - t0, r[i["last_v"]] - t0) for r in rows if r[i["first_k"]] and r[i["last_v"]]]
    if spans:
        step = max(1000, (max(b for _, b in spans) // 25000 + 1) * 1000)  # about 25 bins, whole us
        marks = range(0, max(b for _, b in spans) + step, step)
        counts = " ".join(f"{t // 1000}:{sum(a <= t < b for a, b in spans)}" for t in marks)
        print(f"  CTAs streaming at us from the first entry: {counts}")
    ctas_per_sm = Counter(Counter(r[i["smid"]] for r in rows).values())
    print(f"  CTAs per SM (of the probed CTAs): {dict(sorted(ctas_per_sm.items()))} (count: SMs)")
    # Where an SM runs CTAs in turn: the time its stream stops between one CTA's last V tile and the next one's
    # first K tile (the first CTA's tail plus the next one's start), summed per SM.
    by_sm = {}
    for r in rows:
        if r[i["first_k"]] and r[i["last_v"]]:
            by_sm.setdefault(r[i["smid"]], []).append((r[i["first_k"]], r[i["last_v"]]))
    gaps = {}
    for sm, spans_sm in by_sm.items():
        spans_sm.sort()
        if len(spans_sm) > 1:
            gaps.setdefault(len(spans_sm), []).append(
                [b2[0] - a2[1] for a2, b2 in zip(spans_sm, spans_sm[1:])])
    for turns, per in sorted(gaps.items()):
        each = sorted(g for gs in per for g in gs)
        totals = sorted(sum(gs) for gs in per)
        print(f"  SMs of {turns} CTAs in turn ({len(per)}): last V -> next first K, each: median "
              f"{statistics.median(each):.0f} max {each[-1]} ns; per SM: median {statistics.median(totals):.0f} "
              f"max {totals[-1]} ns")


if __name__ == "__main__":
    main()
