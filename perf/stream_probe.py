"""Where a K/V tile's time goes in the sm90 decode kernel: the timing probe's stamps per ring position.

    PYTHONPATH=. python perf/stream_probe.py --shape 1,1,32,8,65536,128
    PYTHONPATH=. python perf/stream_probe.py --shape 8,16,32,8,8192,128 --causal

Builds the CUDA library with -DFMHA_SM90_PROBE_TIMESTAMPS=1 (sm90/decode_kernel.cuh; results stay
correct, and the default build has none of its code), runs the shape once, zeroes the stamps, runs it
again, and prints for the probed CTAs (the first 256 of the grid, their first 64 ring positions), in SM
cycles (clock64, per SM: only stamps of one CTA are compared):

  consumer wait   consumer thread 0 waiting for the K (V) tile of a ring position
  issue -> ready  the producer's TMA issue of that tile -> the consumer has it, over the positions where
                  the consumer waited (so the tile's arrival is what ended the wait)
  producer wait   the producer lane waiting for a free stage before issuing the tile
  cycles/tile     steady state: consumer's K arrival of the last probed position minus that of
                  position 3, over the positions between

for ring positions 0-2 (the ring's first fill) and 3 onwards. Written for the split-KV stream-rate
question of perf/RESULTS.md; first written without a GPU (not yet run when committed).
"""
from __future__ import annotations

import argparse
import ctypes
import statistics

EVENTS = ("k_empty_wait", "k_issued", "v_empty_wait", "v_issued", "k_full_wait", "k_full", "v_full_wait", "v_full")


def probe_backend():
    """A cuda backend bound to a library built with the probe, and that library."""
    from fmha.cuda import loader
    from perf.variants import bound_backend

    lib = loader._declare(ctypes.CDLL(str(loader.build(extra_flags=["-DFMHA_SM90_PROBE_TIMESTAMPS=1"]))))
    return bound_backend(lib), lib


def read_stamps(lib, clear: bool):
    ctas, tiles, events = ctypes.c_int(), ctypes.c_int(), ctypes.c_int()
    if lib.fmha_sm90_probe_layout(ctypes.byref(ctas), ctypes.byref(tiles), ctypes.byref(events)) != 0:
        raise RuntimeError(lib.fmha_last_error().decode())
    if events.value != len(EVENTS):
        raise RuntimeError(f"probe layout has {events.value} events, this script knows {len(EVENTS)}")
    buf = (ctypes.c_uint64 * (ctas.value * tiles.value * events.value))()
    if lib.fmha_sm90_probe_read(buf, ctypes.sizeof(buf), 1 if clear else 0) != 0:
        raise RuntimeError(lib.fmha_last_error().decode())
    n_t, n_e = tiles.value, events.value
    return [[list(buf[(c * n_t + t) * n_e:(c * n_t + t + 1) * n_e]) for t in range(n_t)] for c in range(ctas.value)]


def summary(values):
    if not values:
        return "-"
    values = sorted(values)
    return f"median {statistics.median(values):8.0f}  p90 {values[int(0.9 * (len(values) - 1))]:8.0f}  (n={len(values)})"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", required=True, help="B,T,Hq,Hkv,S,D")
    ap.add_argument("--causal", action="store_true")
    a = ap.parse_args()

    import torch
    from fmha.problem import validate
    from perf.ncu_probe import random_inputs

    q, k, v, out = random_inputs(a.shape)
    lse = torch.empty(q.shape[0], q.shape[2], q.shape[1], device="cuda")
    p = validate(q, k, v, None, None, a.causal, None)
    b, lib = probe_backend()
    print(f"shape {a.shape}{' causal' if a.causal else ''}: {b.launch_details(p)}", flush=True)
    b.run(p, q, k, v, None, out, lse)
    torch.cuda.synchronize()
    read_stamps(lib, clear=True)
    b.run(p, q, k, v, None, out, lse)
    torch.cuda.synchronize()
    stamps = read_stamps(lib, clear=False)
    try:
        print(f"SM clock now (NVML): {torch.cuda.clock_rate()} MHz", flush=True)
    except Exception:  # no pynvml: cycles only
        pass

    ev = {name: i for i, name in enumerate(EVENTS)}
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


if __name__ == "__main__":
    main()
