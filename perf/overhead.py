"""Host cost of one eager `fmha.attention` call, and how much of it is fmha's own.

    python perf/overhead.py [--calls N] [--repeats R] [--profile-calls N]     (on a CUDA GPU)

On a tiny decode problem the GPU finishes each kernel long before the host has issued the next
one, so the wall time per call of a long loop of calls is host time. Reported per call:

(a) the whole eager `fmha.attention(q, k, v, backend=..., out=out)`, per GPU backend and for `auto`;
(b) its pieces, each timed alone the same way: validate (full checks, and memoised), decide (memo
    hit), backend.run; (a) - backend.run is the entry point's own cost;
(c) the host time spent inside the CUDA launch API: torch.profiler (CPU + CUDA activities) records,
    through CUPTI, the runtime and driver API calls of the process, also those made by fmha's
    ctypes-loaded C library; the host durations of the cudaLaunchKernel* / cuLaunchKernel* events
    are summed and divided by the number of calls.

Python-side overhead = (a) - (c): what fmha costs on the host beyond the launch call itself.
"""
from __future__ import annotations

import argparse
import gc
import os
import re
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # run from a checkout

# B, T, Hq, Hkv, S, D: tiny, so that each kernel takes less GPU time than its launch takes host time
PROBLEM = (4, 1, 32, 8, 128, 128)
DEVICE = "cuda"  # a CPU dry run of this script's logic swaps it

LAUNCH_API = re.compile(r"^(cudaLaunchKernel|cuLaunchKernel|cudaLaunchCooperativeKernel|cuLaunchCooperativeKernel)")
CUDA_API = re.compile(r"^cu(da)?[A-Z]")  # runtime (cudaX) and driver (cuX) API entry points

INCLUDES = ("argument checks and fmha's memo lookups (validate, decide), the launch plan, packing the C "
            "argument struct, the ctypes call and, inside fmha's C library, the two cuTensorMapEncodeTiled "
            "descriptor encodings and any other CUDA API call that is not a launch (the Triton backend: its "
            "Python launcher and argument packing instead)")
EXCLUDES = ("the launch API calls counted in (c), the GPU's execution of the kernels (the loop is host-bound, "
            "see the GPU column), and allocation (out= is preallocated and the unwanted LSE goes to a reused "
            "scratch buffer)")


def fail(msg: str) -> int:
    print(f"perf/overhead.py: {msg}", file=sys.stderr)
    return 2


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--calls", type=int, default=20000, help="calls per timed loop (default 20000)")
    ap.add_argument("--repeats", type=int, default=5, help="timed loops per number; the median is shown (default 5)")
    ap.add_argument("--profile-calls", type=int, default=2000, help="calls under torch.profiler (default 2000)")
    ap.add_argument("--shape", default=",".join(map(str, PROBLEM)), metavar="B,T,Hq,Hkv,S,D",
                    help="problem shape (default %(default)s); keep its GPU time below the host time of a call, "
                    "e.g. 1,1,32,8,1024,128 for a split-KV launch merged in clusters")
    args = ap.parse_args(argv)
    try:
        shape = tuple(int(x) for x in args.shape.split(","))
        if len(shape) != 6 or min(shape) < 1:
            raise ValueError
    except ValueError:
        return fail(f"--shape takes six positive integers B,T,Hq,Hkv,S,D; got {args.shape!r}")
    try:
        import torch
    except ImportError as e:
        return fail(f"cannot import torch ({e})")
    if not torch.cuda.is_available():
        return fail(f"needs a CUDA GPU: it measures the host cost of launching fmha's GPU kernels, and "
                    f"torch.cuda.is_available() is False here (torch {torch.__version__}, "
                    f"CUDA build: {torch.version.cuda or 'none'}). Nothing was measured.")
    try:
        import fmha
        from fmha.backends import registry
        from fmha.dispatch import decide
        from fmha.problem import validate, validate_cached
    except ImportError as e:
        return fail(f"cannot import fmha ({e}); run it from the repository, or pip install -e .")

    B, T, Hq, Hkv, S, D = shape
    q = torch.randn(B, T, Hq, D, device=DEVICE, dtype=torch.bfloat16)
    k = torch.randn(B, S, Hkv, D, device=DEVICE, dtype=torch.bfloat16)
    v = torch.randn_like(k)
    out = torch.empty_like(q)
    lse = torch.empty(B, Hq, T, device=DEVICE)
    p = validate(q, k, v, None, None, True, out)
    backends = [n for n in fmha.available_backends() if n != "reference"]
    print(f"{torch.cuda.get_device_name()}; torch {torch.__version__}, CUDA {torch.version.cuda}, "
          f"Python {sys.version.split()[0]}")
    print(f"problem {p.describe()}; fmha.attention(q, k, v, backend=..., out=out); "
          f"median of {args.repeats} loops of {args.calls} calls (host-bound)")
    if not backends:
        return fail("no GPU backend of fmha is available here: " +
                    "; ".join(f"{n}: {b.unavailable_reason()}" for n, b in registry().items() if n != "reference"))

    timer = HostTimer(torch, args.calls, args.repeats)
    print(f"  (loop and lambda cost, {timer.empty_us:.2f} us per call, subtracted from every number)")

    print("\n(b) pieces, host us per call")
    print(f"  {'validate(), full checks':34s} {timer(lambda: validate(q, k, v, None, None, True, out)):7.2f}")
    print(f"  {'validate_cached(), memo hit':34s} {timer(lambda: validate_cached(q, k, v, None, None, True, out)):7.2f}"
          "   (fmha.attention's own memo stands for this and decide)")
    print(f"  {'decide(p, auto), memo hit':34s} {timer(lambda: decide(p, 'auto')):7.2f}")
    runnable, run_us = [], {}
    for name in backends:
        b = registry()[name]
        try:
            fmha.attention(q, k, v, backend=name, out=out)  # build / compile outside the timing
            torch.cuda.synchronize()
        except Exception as e:  # a backend that fails here is reported, the others still measured
            print(f"  {name:7s} unusable here: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
            continue
        runnable.append(name)
        run_us[name] = timer(lambda: b.run(p, q, k, v, None, out, lse))
        print(f"  {name + ' backend.run()':34s} {run_us[name]:7.2f}"
              "   (includes the launch API, and for cuda the descriptor encoding in C)")
        details = b.launch_details(p)
        if details:
            print(f"  {'':34s}         {name} launch: {details}")
    if not runnable:
        return fail("no GPU backend could run the problem (see above)")
    try:
        auto = fmha.explain(q, k, v, out=out).backend
    except Exception:
        auto = None
    if auto in runnable:
        runnable.append("auto")
        run_us["auto"] = run_us[auto]

    print("\n(a) whole call and (c) launch API time, host us per call")
    print(f"  {'backend':10s} {'(a) call':>9s} {'(a)-run':>8s} {'(c) launch':>11s} {'launches':>9s} {'(a)-(c)':>8s} "
          f"{'GPU':>6s} {'profiled (a)':>13s}")
    seen, summary = {}, []
    for name in runnable:
        label = name if name != "auto" else f"auto={auto}"
        call = (lambda name=name: fmha.attention(q, k, v, backend=name, out=out))
        whole = timer(call)
        try:
            prof = profile_calls(torch, call, args.profile_calls)
        except Exception as e:  # profiler/CUPTI trouble must not hide (a) and (b)
            print(f"  {label:10s} {whole:9.2f} {whole - run_us[name]:8.2f}   torch.profiler failed: "
                  f"{type(e).__name__}: {e}")
            continue
        seen[name] = prof
        if prof.launches == 0:
            print(f"  {label:10s} {whole:9.2f} {whole - run_us[name]:8.2f} {'not found':>11s} {'':9s} {'?':>8s} "
                  f"{prof.gpu_us:6.2f} {prof.wall_us:13.2f}")
            continue
        print(f"  {label:10s} {whole:9.2f} {whole - run_us[name]:8.2f} {prof.launch_us:11.2f} {prof.launches:9.2f} "
              f"{whole - prof.launch_us:8.2f} {prof.gpu_us:6.2f} {prof.wall_us:13.2f}")
        if prof.gpu_us > 0.8 * whole:
            print(f"  {'':10s} ^ the GPU time per call is close to the host time: the loop may be GPU-bound, "
                  "and then (a) overstates the host cost")
        summary.append(f"  {label:10s} Python-side overhead = {whole:.2f} - {prof.launch_us:.2f} = "
                       f"{whole - prof.launch_us:.2f} us per call")
    print("  (a)-run: the entry point's own cost (one memo lookup standing for validate + decide); GPU: kernel time "
          "per call; profiled (a): the loop's time per call under the profiler")

    print("\nPython-side overhead = (a) - launch API time (c), per call (target: under 15 us):")
    print("\n".join(summary) if summary else "  not computed: no launch API events (see below)")
    print("It includes " + INCLUDES + ".")
    print("It excludes " + EXCLUDES + ".")
    print("(c) is measured under torch.profiler, whose CUPTI tracing slows the loop (compare 'profiled (a)' "
          "with (a)); where it lengthens the launch calls themselves, (a) - (c) understates fmha's share.")

    missing = [n for n, pr in seen.items() if pr.launches == 0]
    for name, pr in seen.items():
        if name == "auto" or not pr.api:
            continue
        print(f"\nCUDA API calls the profiler saw per {name} call (host us per call, calls per call):")
        for api, (us, count) in sorted(pr.api.items(), key=lambda kv: -kv[1][0]):
            print(f"  {api:40s} {us:7.2f} {count:6.2f}")
    for name in missing:
        pr = seen[name]
        print(f"\nNo cudaLaunchKernel*/cuLaunchKernel* event in the {name} profile, so (c) is unknown for it. "
              f"Events seen ({len(pr.names)} distinct names; is CUPTI available to torch.profiler here?):")
        for n_ in sorted(pr.names)[:60]:
            print(f"  {n_}")
    return 0


class HostTimer:
    """Median host us per call of `fn` over loops of back-to-back calls, less the empty loop's cost."""

    def __init__(self, torch, calls: int, repeats: int):
        self.torch, self.calls, self.repeats = torch, max(1, calls), max(1, repeats)
        self.empty_us = 0.0
        self.empty_us = self(lambda: None)

    def __call__(self, fn) -> float:
        for _ in range(min(200, self.calls)):  # warm up (memos, allocator, lazy init)
            fn()
        self.torch.cuda.synchronize()
        samples = []
        gc_enabled = gc.isenabled()
        gc.disable()  # a collection inside one loop would be noise, not fmha's cost
        try:
            for _ in range(self.repeats):
                t0 = time.perf_counter_ns()
                for _ in range(self.calls):
                    fn()
                self.torch.cuda.synchronize()
                samples.append((time.perf_counter_ns() - t0) / self.calls / 1e3)
        finally:
            if gc_enabled:
                gc.enable()
        return statistics.median(samples) - self.empty_us


class Profiled:
    """Per call: launch API host time and count, GPU kernel time, wall time; every CUDA API call seen."""

    def __init__(self, events, calls: int, wall_us: float):
        self.names = set()
        self.api = {}  # name -> [host us per call, calls per call]
        launch_spans = {}  # thread -> [(start, end)] of launch API events
        gpu_total = 0.0
        for name, on_gpu, start, end, thread in events:
            self.names.add(name)
            if on_gpu:
                if not name.startswith(("Memcpy", "Memset")):
                    gpu_total += end - start
                continue
            if CUDA_API.match(name):
                entry = self.api.setdefault(name, [0.0, 0.0])
                entry[0] += (end - start) / calls
                entry[1] += 1 / calls
            if LAUNCH_API.match(name):
                launch_spans.setdefault(thread, []).append((start, end))
        launch_total, launches = 0.0, 0
        for spans in launch_spans.values():
            # A driver launch made inside a runtime launch (if CUPTI reports both) is counted once.
            outer_end = float("-inf")
            for start, end in sorted(spans):
                if end <= outer_end:
                    continue
                launch_total += end - max(start, outer_end)
                launches += start >= outer_end
                outer_end = end
        self.launch_us = launch_total / calls
        self.launches = launches / calls
        self.gpu_us = gpu_total / calls
        self.wall_us = wall_us


def profile_calls(torch, fn, calls: int) -> Profiled:
    from torch.profiler import ProfilerActivity, profile
    for _ in range(50):
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        t0 = time.perf_counter_ns()
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
        wall_us = (time.perf_counter_ns() - t0) / calls / 1e3
    return Profiled(_events(prof), calls, wall_us)


def _events(prof):
    """(name, on the GPU, start us, end us, thread) of every event the profiler kept."""
    rows = []
    for e in prof.events():
        on_gpu = str(getattr(e, "device_type", "CPU")).rsplit(".", 1)[-1] != "CPU"
        tr = getattr(e, "time_range", None)
        start, end = (tr.start, tr.end) if tr is not None else (0.0, getattr(e, "cpu_time_total", 0.0))
        rows.append((e.name, on_gpu, float(start), float(end), getattr(e, "thread", 0)))
    return rows


if __name__ == "__main__":
    sys.exit(main())
