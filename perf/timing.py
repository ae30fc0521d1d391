"""How time is measured: CUDA graphs over rotating input sets, eager loops, HBM ceilings.

- Rotation: a contender cycles over N input sets whose total size exceeds a few
  times the L2 cache, so no call finds its cache in L2 from the previous one.
  N = ceil(factor x L2 / set size), at least 2 (a big set already dwarfs L2) and
  at most MAX_SETS.
- Graph time: after a warm-up on a side stream, one CUDA graph captures one call
  per input set; each replay is timed with its own pair of CUDA events; the
  per-call time of a replay is its time / N; the result is the median over
  replays (>= 20).
- Eager time: CUDA events around a Python loop of calls (Python, dispatch and
  launch overhead included), per call; median over loops.
- Ceilings: a large device-to-device copy (bytes read + bytes written) and large
  read-only reductions (torch.sum, and a Triton kernel that only reads).

All bandwidths are decimal: GB/s = 1e9 bytes per second.
"""
from __future__ import annotations

import math
import statistics
import time

import torch

MAX_SETS = 64
H200_L2_BYTES = 60 * 1024 * 1024  # used when the device does not report its L2 size


def l2_cache_bytes(device) -> int:
    if device.type != "cuda":
        return H200_L2_BYTES
    return int(getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 0) or H200_L2_BYTES)


def rotation_count(set_bytes: int, l2_bytes: int, factor: float = 3.0) -> int:
    return max(2, min(MAX_SETS, math.ceil(factor * l2_bytes / max(1, set_bytes))))


def gbps(nbytes: int, us: float) -> float:
    return nbytes / (us * 1e-6) / 1e9


# ---- per-contender timing --------------------------------------------------------------

def warm_up(fn, n_sets: int, device) -> None:
    """One call per set on a side stream (as CUDA-graph capture wants), then wait for it."""
    if device.type != "cuda":
        for i in range(n_sets):
            fn(i)
        return
    side = torch.cuda.Stream(device)
    side.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(side):
        for i in range(n_sets):
            fn(i)
    torch.cuda.current_stream(device).wait_stream(side)
    torch.cuda.synchronize(device)


def time_graph(fn, n_sets: int, replays: int, settle_s: float = 0.0, sampler=None, check=None) -> list:
    """Per-call microseconds of each replay of a graph holding one call per input set.

    Before timing, the graph is replayed for `settle_s` seconds: 30 replays of a 100 us shape
    last a few milliseconds, shorter than the GPU's clock and power adjustments, so without it
    the first contender timed after a heavier shape is measured in that shape's state (on an
    H200 at its 700 W cap: 142 vs 126 us for the same kernel).
    sampler (perf.clocks.ClockSampler): samples the SM clock while the timed replays run (once right
    after them where they were over before a first sample). check: called with the graph's output of set 0
    after the last replay (what the timing ran, which the eager first call may not be).
    """
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        first = fn(0)  # (only set 0's output is kept: the others' memory is reused within the graph, as before)
        for i in range(1, n_sets):
            fn(i)
    graph.replay()  # the first replay uploads the graph
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < settle_s:
        graph.replay()
        torch.cuda.synchronize()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(replays)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(replays)]
    for s, e in zip(starts, ends):
        s.record()
        graph.replay()
        e.record()
    if sampler is not None:  # the replays are queued: sample until the last one has finished
        while not ends[-1].query():
            sampler.sample()
            time.sleep(0.002)
        if not sampler.samples:
            sampler.sample()
    torch.cuda.synchronize()
    per_call = [s.elapsed_time(e) * 1e3 / n_sets for s, e in zip(starts, ends)]
    if check is not None:
        check(first)
    del graph, first
    return per_call


def comparable(r: dict) -> bool:
    """Whether a result's `us` is in the suite's regime: not the eager time of a contender whose graph capture
    failed (Python and launch included), which enters no ratio and no tuning table."""
    return r.get("timing") != "eager"


def even_rounds(n: int) -> int:
    """n rounds, rounded up to an even count (each of the rounds' first slots then goes to as many contenders as
    it can: with 3 rounds of several contenders, the first one runs first twice). With more contenders than
    rounds, some never run first; what round_order guarantees is no contender timed twice in a row."""
    return max(2, n + n % 2)


ROUND_ORDER = "rotated"  # recorded in a run's metadata: how round_order arranges the rounds


def round_order(items, k: int) -> list:
    """The contenders of round k (0-based): the list rotated by k, so each round starts one contender later. No
    contender runs twice in a row across a round boundary, and the slot after a boundary falls to another
    contender each round: at the H200's power cap the slot after a contender timed twice in a row ran 7-8% slower
    than its contender's best round. Two contenders keep their order (a rotation would be a reversal, which times
    one of them twice in a row at every other boundary), so they strictly alternate."""
    items = list(items)
    if len(items) == 2:
        return items
    k %= max(1, len(items))
    return items[k:] + items[:k]


def graph_round(fn, n_sets: int, device, replays: int = 30, settle_s: float = 0.0) -> tuple:
    """One more round of graph timing of a contender already checked: warm-up, then time_graph with the SM
    clock sampled. Returns (median µs per call, the clock summary: perf/clocks.py)."""
    from perf.clocks import ClockSampler, nvml_for
    sampler = ClockSampler(nvml_for(device))
    warm_up(fn, n_sets, device)
    us = statistics.median(time_graph(fn, n_sets, replays, settle_s, sampler))
    return us, sampler.summary()


def time_eager(fn, n_sets: int, est_us: float, loops: int = 5) -> list:
    """Per-call microseconds of `loops` Python loops of calls, events around each loop."""
    min_calls = 20 if est_us < 1000 else 6
    calls = n_sets * math.ceil(min_calls / n_sets)
    per_call = []
    for _ in range(loops):
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for c in range(calls):
            fn(c % n_sets)
        end.record()
        torch.cuda.synchronize()
        per_call.append(start.elapsed_time(end) * 1e3 / calls)
    return per_call


def time_cpu(fn, n_sets: int, loops: int = 3) -> list:
    """Dry run: wall-clock microseconds per call on the CPU (meaningless as performance)."""
    per_call = []
    for _ in range(loops):
        t0 = time.perf_counter()
        for i in range(n_sets):
            fn(i)
        per_call.append((time.perf_counter() - t0) * 1e6 / n_sets)
    return per_call


def measure(fn, n_sets: int, device, replays: int = 30, capture: bool = True, settle_s: float = 0.0,
            check=None) -> dict:
    """Time one contender on one shape. The caller has already made the first (checked) call; check(out), where
    given, scores the graph's output of set 0 after its replays (graph_check).

    Returns graph_us / eager_us medians (per call), raw samples, calls_per_graph,
    `timing` ("graph", "eager" or "cpu"), a note when graph capture failed and, where NVML answers,
    the SM clock the graph was timed at (sm_mhz, power_capped, clock_samples: perf/clocks.py).
    """
    res = {"graph_us": None, "graph_raw_us": [], "calls_per_graph": n_sets, "eager_us": None,
           "eager_raw_us": [], "timing": None, "note": "", "graph_check": None}
    warm_up(fn, n_sets, device)
    if device.type != "cuda":
        res["eager_raw_us"] = time_cpu(fn, n_sets)
        res["eager_us"] = statistics.median(res["eager_raw_us"])
        res["timing"] = "cpu"
        res["calls_per_graph"] = None
        return res
    est_us = None
    if capture:
        try:
            from perf.clocks import ClockSampler, nvml_for
            sampler = ClockSampler(nvml_for(device))
            scored = {}

            def score(out):  # (a check that fails must not read as a failed capture)
                try:
                    scored["v"] = check(out)
                except Exception as e:
                    scored["error"] = f"graph output not checked ({type(e).__name__}: {e})"[:160]

            res["graph_raw_us"] = time_graph(fn, n_sets, replays, settle_s, sampler, None if check is None else score)
            res["graph_check"] = scored.get("v")
            res["note"] = scored.get("error", "")
            res["graph_us"] = statistics.median(res["graph_raw_us"])
            res.update(sampler.summary())
            est_us = res["graph_us"]
        except Exception as e:  # not capturable: time it eagerly and say so
            torch.cuda.synchronize()
            first = (str(e).strip().splitlines() or [""])[0][:120]
            res["note"] = f"graph capture failed ({type(e).__name__}: {first}); eager timing only"
            res["calls_per_graph"] = None
    else:
        res["note"] = "graph capture disabled; eager timing only"
        res["calls_per_graph"] = None
    if est_us is None:
        t0 = time.perf_counter()
        fn(0)
        torch.cuda.synchronize()
        est_us = (time.perf_counter() - t0) * 1e6
    res["eager_raw_us"] = time_eager(fn, n_sets, est_us)
    res["eager_us"] = statistics.median(res["eager_raw_us"])
    res["timing"] = "graph" if res["graph_us"] is not None else "eager"
    return res


# ---- HBM ceilings -------------------------------------------------------------------------

def _time_op(op, device, reps: int = 15) -> list:
    for _ in range(2):
        op()
    if device.type != "cuda":
        out = []
        for _ in range(reps):
            t0 = time.perf_counter()
            op()
            out.append((time.perf_counter() - t0) * 1e6)
        return out
    torch.cuda.synchronize()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for s, e in zip(starts, ends):
        s.record()
        op()
        e.record()
    torch.cuda.synchronize()
    return [s.elapsed_time(e) * 1e3 for s, e in zip(starts, ends)]


def _entry(nbytes: int, raw_us: list, what: str, **extra) -> dict:
    med = statistics.median(raw_us)
    return {"what": what, "bytes": nbytes, "median_us": med, "gbps": gbps(nbytes, med), "raw_us": raw_us, **extra}


def triton_read(x: torch.Tensor, block: int, num_warps: int, programs: int):
    """Launch the read-only kernel over flat bf16 x; returns the fp32 partial sums."""
    from ._read_kernel import read_sum_kernel
    n_tiles = x.numel() // block
    partial = torch.empty(programs, dtype=torch.float32, device=x.device)
    read_sum_kernel[(programs,)](x, partial, n_tiles, BLOCK=block, num_warps=num_warps)
    return partial


READ_CONFIGS = [(4096, 4, 8), (8192, 8, 4), (8192, 8, 8), (16384, 8, 4)]  # BLOCK, warps, programs/SM


def measure_ceilings(device, gib: float = 4.0, triton_kernel: bool = True, log=print) -> dict:
    """Copy and read bandwidth of `gib` GiB bf16 tensors (GB/s decimal)."""
    block = max(b for b, _, _ in READ_CONFIGS)
    n = int(gib * 2 ** 30) // 2 // block * block  # bf16 elements, a whole number of tiles
    nbytes = 2 * n
    x = torch.empty(n, dtype=torch.bfloat16, device=device).uniform_(-1, 1)
    y = torch.empty_like(x)
    res = {"units": "GB/s = 1e9 bytes/s", "tensor_bytes": nbytes}
    res["copy"] = _entry(2 * nbytes, _time_op(lambda: y.copy_(x), device),
                         "y.copy_(x): bytes read + bytes written")
    y = None  # free it before the read tests
    res["read_torch_sum"] = _entry(nbytes, _time_op(lambda: torch.sum(x, dtype=torch.float32), device),
                                   "torch.sum(x, dtype=float32): bytes read")
    if triton_kernel:
        try:
            sms = (torch.cuda.get_device_properties(device).multi_processor_count
                   if device.type == "cuda" else 2)
            best = None
            want = torch.sum(x, dtype=torch.float32).item()
            for blk, warps, per_sm in READ_CONFIGS:
                got = triton_read(x, blk, warps, sms * per_sm).sum().item()
                if not math.isclose(got, want, rel_tol=1e-3, abs_tol=1e-2 * math.sqrt(n)):
                    raise RuntimeError(f"read kernel sum {got} != torch {want}")
                e = _entry(nbytes, _time_op(lambda: triton_read(x, blk, warps, sms * per_sm), device),
                           "Triton read-only kernel: bytes read",
                           config={"BLOCK": blk, "num_warps": warps, "programs": sms * per_sm})
                if best is None or e["gbps"] > best["gbps"]:
                    best = e
            res["read_triton"] = best
        except Exception as e:
            res["read_triton"] = {"what": "Triton read-only kernel", "error": f"{type(e).__name__}: {e}"[:300]}
            log(f"[ceilings] Triton read kernel failed: {res['read_triton']['error']}")
    x = None
    reads = {k: v["gbps"] for k, v in res.items() if k.startswith("read_") and isinstance(v, dict) and "gbps" in v}
    res["read_source"] = max(reads, key=reads.get)
    res["read_gbps"] = reads[res["read_source"]]
    res["copy_gbps"] = res["copy"]["gbps"]
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return res


def free_inputs(inputs, device) -> None:
    """A shape's input sets released (inputs None: building them failed) and the allocator's cached blocks
    returned, so that the next shape's sets fit."""
    if inputs is not None:
        inputs.release()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def read_again(device, ceilings: dict) -> None:
    """Time the read ceiling's source once more (after the shapes, at the GPU's warmth then) into
    ceilings["read_after"] and ["read_after_gbps"]; the percentages keep the first figure. A failure is noted."""
    src = ceilings.get(ceilings.get("read_source")) or {}
    n = ceilings["tensor_bytes"] // 2
    try:
        x = torch.empty(n, dtype=torch.bfloat16, device=device).uniform_(-1, 1)
        if ceilings["read_source"] == "read_triton":
            cfg = src["config"]
            op = lambda: triton_read(x, cfg["BLOCK"], cfg["num_warps"], cfg["programs"])  # noqa: E731
        else:
            op = lambda: torch.sum(x, dtype=torch.float32)  # noqa: E731
        entry = _entry(ceilings["tensor_bytes"], _time_op(op, device), src.get("what", "") + ", after the shapes")
        ceilings["read_after"], ceilings["read_after_gbps"] = entry, entry["gbps"]
    except Exception as e:  # (out of memory included) the run's figures stand
        ceilings["read_after"] = {"error": f"{type(e).__name__}: {e}"[:300]}
    finally:
        x = None
        if device.type == "cuda":
            torch.cuda.empty_cache()


def ceiling_text(ceilings: dict) -> str:
    """The read ceiling as the results state it: the figure the percentages use, its source, and the same read
    timed after the shapes where it was."""
    text = f"{ceilings['read_gbps']:.0f} GB/s, {ceilings['read_source']}"
    if ceilings.get("read_after_gbps"):
        text += f"; {ceilings['read_after_gbps']:.0f} GB/s when timed again after the shapes"
    return text
