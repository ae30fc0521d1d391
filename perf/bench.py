"""The decode benchmark: every fmha backend against PyTorch SDPA and FlexAttention.

    python -m perf [--preset full|quick|paged|deepseek|window] [--shapes SUBSTR,...] [--out DIR] [--write-tuning]
    python -m perf --dry-run          # CPU smoke run of the whole pipeline, tiny shapes

For each shape the sweep builds N rotating input sets (together > 3x L2), checks
every contender's output on set 0 against fmha's fp32 reference (computed on the
first and last sequence only, to stay cheap), then times it: CUDA-graph replays
of one call per set (median per call) and an eager Python loop. It measures the
HBM copy and read ceilings in the same run and writes JSON, Markdown and PNG
plots (see perf/README.md).
"""
from __future__ import annotations

import argparse
import datetime
import os
import shlex
import shutil
import statistics
import sys
import time

if __package__ in (None, ""):  # run as `python perf/bench.py`
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MIN_COSINE = 0.9999
DEFAULT_BUDGET_S = {"full": 500, "quick": 300, "paged": 360, "deepseek": 300, "window": 400}


# --dtype choices -> torch dtype names
DTYPES = {"bf16": "bfloat16", "fp16": "float16"}


def parse_args(argv=None):
    ap = argparse.ArgumentParser(prog="python -m perf", description=__doc__.split("\n\n")[0])
    ap.add_argument("--preset", default="full",
                    help="shape preset: full (default), quick, paged (paged KV caches against contiguous ones, "
                         "perf/paged.py), deepseek (a shared latent cache beside FlashInfer's MLA decode, "
                         "perf/deepseek.py) or window (sliding-window layers, beside FlashInfer too)")
    ap.add_argument("--shapes", default=None,
                    help="keep shapes whose name contains any of these comma-separated substrings")
    ap.add_argument("--contenders", default=None,
                    help="comma-separated subset of contenders (cuda, triton, sdpa-flash, sdpa-efficient, "
                         "sdpa-cudnn, flex; --preset window adds flashinfer; paged and deepseek name their own); default all")
    ap.add_argument("--no-flex", action="store_true", help="leave FlexAttention out (no torch.compile)")
    ap.add_argument("--out", default=None,
                    help="output folder (default perf/results/<gpu-key>-<date>/); when given, the results "
                         "are also copied into perf/results/<gpu-key>-<date>/")
    ap.add_argument("--write-tuning", action="store_true",
                    help="write fmha/tuning/<gpu-key>.json (the dispatcher's table) and a copy in the output folder")
    ap.add_argument("--dry-run", action="store_true",
                    help="CPU smoke run: tiny shapes, wall-clock timings, every output file written")
    ap.add_argument("--replays", type=int, default=30, help="CUDA-graph replays per contender (>= 20)")
    ap.add_argument("--settle-ms", type=float, default=200.0,
                    help="replay each contender's graph this long before timing it, so the GPU's clocks "
                         "and power settle on the shape (0: off)")
    ap.add_argument("--rounds", type=int, default=4,
                    help="--preset deepseek and window: time each shape's contenders this many rounds (rounded up "
                         "to even), each round starting one contender later, and report each one's median over the "
                         "rounds (the GPU's clock drifts at its power cap while a shape is measured; perf/clocks.py)")
    ap.add_argument("--rotate-factor", type=float, default=3.0,
                    help="rotating input sets total at least this many L2 caches (default 3)")
    ap.add_argument("--ceiling-gib", type=float, default=4.0, help="size of the ceiling tensors in GiB")
    ap.add_argument("--budget-s", type=float, default=None,
                    help="soft time budget: past it, peers are skipped (marked so); flex is skipped earlier "
                         "when its compile would not fit (default 500 full, 300 quick and deepseek, 360 paged, 400 window)")
    ap.add_argument("--no-graph", action="store_true", help="eager timing only")
    ap.add_argument("--separate", action="store_true",
                    help="follow every timed call by a one-element add, a kernel launched without PDL as the "
                         "next op of a model would be. Without it a graph holds one contender's calls back to "
                         "back, and fmha's PDL launches overlap a call's start with the previous call's tail "
                         "(perf/README.md). Times then include one add per call: compare contenders within a "
                         "shape; the GB/s and %% columns understate every contender alike")
    ap.add_argument("--also-separate", action="store_true",
                    help="time every contender in both regimes in this run: calls back to back (the main table) "
                         "and, as --separate does, each call followed by a one-element add (a second table, and "
                         "separate_us in results.json)")
    ap.add_argument("--dtype", choices=sorted(DTYPES), default="bf16",
                    help="element type of q, k_cache, v_cache and out (default bf16)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--page-sizes", default=None,
                    help="--preset paged: comma-separated page sizes for every shape (default 256,64,16 and 1 on "
                         "two shapes)")
    ap.add_argument("--no-flashinfer", action="store_true",
                    help="--preset paged, deepseek or window: leave FlashInfer out")
    args = ap.parse_args(argv)
    if args.write_tuning and args.dtype != "bf16":
        ap.error(f"--write-tuning: the dispatcher's table is measured in bf16; got --dtype {args.dtype}")
    if args.preset in ("paged", "deepseek", "window") and args.write_tuning:
        ap.error(f"--write-tuning: the dispatcher's table comes from the full suite, not --preset {args.preset}")
    if args.preset != "paged" and args.page_sizes:
        ap.error("--page-sizes belongs to --preset paged")
    if args.preset not in ("paged", "deepseek", "window") and args.no_flashinfer:
        ap.error("--no-flashinfer belongs to --preset paged, deepseek and window")
    args.replays = max(20, args.replays)
    if args.budget_s is None:
        args.budget_s = DEFAULT_BUDGET_S.get(args.preset, 500)
    if args.also_separate and args.separate:
        ap.error("--also-separate already times the --separate regime beside the main one; give one of them")
    return args


def command_line(argv) -> str:
    script = sys.argv[0]
    head = ["python", "-m", "perf"] if script.endswith("__main__.py") else ["python", os.path.relpath(script, REPO)]
    return shlex.join(head + list(argv))


# ---- progress ------------------------------------------------------------------------------

class _PlainProgress:
    """What is left of tqdm when tqdm is not installed: one flushed line per step."""

    def __init__(self, total, desc=""):
        self.n, self.total, self.desc = 0, total, desc

    def set_description_str(self, desc, refresh=True):
        self.desc = desc

    def set_postfix_str(self, s, refresh=True):
        print(f"  [{self.n}/{self.total}] {self.desc} {s}", flush=True)

    def update(self, k=1):
        self.n += k

    def write(self, s):
        print(s, flush=True)

    def close(self):
        pass


def progress(total):
    try:
        from tqdm import tqdm
    except ImportError:
        return _PlainProgress(total)
    tty = sys.stderr.isatty()  # redirected: redraw rarely, the shape lines carry the news
    return tqdm(total=total, unit="run", ascii=True, mininterval=0.5 if tty else 20.0, ncols=110,
                file=sys.stderr)


# ---- inputs --------------------------------------------------------------------------------

class ShapeInputs:
    """N input sets of one shape in fmha's layout, and (lazily) the peers' [B, H, L, E] copies."""

    def __init__(self, shape, n_sets, device, seed, dtype):
        import torch
        self.shape, self.device, self.n_sets, self.dtype = shape, device, n_sets, dtype
        s = shape
        gen = torch.Generator(device=device).manual_seed(seed)

        def rnd(*dims):
            return torch.randn(*dims, generator=gen, device=device, dtype=self.dtype)

        # With a score cap c, q is scaled so that the scores' standard deviation is c / 2, where an ignored cap fails
        # the gate (cosine 0.67 at 50); at 1, unscaled, c tanh(s / c) is s to 1e-3.
        q_scale = float(getattr(s, "softcap", 0.0)) / 2 or 1.0
        self.sets = [(rnd(s.B, s.T, s.Hq, s.D) * q_scale, rnd(s.B, s.S, s.Hkv, s.D), rnd(s.B, s.S, s.Hkv, s.D))
                     for _ in range(n_sets)]
        # Sink logits in [3, 7], about the log of a row's softmax denominator over a 128-key window of these
        # scores (~5.4): each sink takes 8-85% of its row, so a contender that drops it fails the gate.
        self.sinks = (torch.rand(s.Hq, generator=gen, device=device, dtype=torch.float32) * 4 + 3
                      if getattr(s, "sinks", False) else None)
        self._bhld = None
        self._mask = None

    def bhld(self):
        if self._bhld is None:
            self._bhld = [tuple(t.transpose(1, 2).contiguous() for t in qkv) for qkv in self.sets]
        return self._bhld

    def bottom_right_mask(self):
        """Boolean [T, S], True where query t may see key j, as fmha's reference masks a full cache (causal:
        j <= S - T + t; a window bounds j from below too); None where nothing is masked (T == 1, no window)."""
        import torch
        from fmha.reference import visible_mask
        s = self.shape
        if not s.masked:
            return None
        if self._mask is None:
            full = torch.full((1,), s.S, dtype=torch.int32, device=self.device)
            self._mask = visible_mask(full, s.T, s.S, s.causal, window_left=s.window)[0]
        return self._mask

    def release(self):
        self.sets, self._bhld, self._mask = None, None, None


def problem_of(shape, device, dtype):
    """fmha's Problem for a shape and torch dtype, from meta tensors (no memory)."""
    import torch
    from fmha.problem import validate
    s = shape
    q = torch.empty(s.B, s.T, s.Hq, s.D, dtype=dtype, device="meta")
    k = torch.empty(s.B, s.S, s.Hkv, s.D, dtype=dtype, device="meta")
    v = torch.empty(s.B, s.S, s.Hkv, s.D, dtype=dtype, device="meta")
    sinks = torch.empty(s.Hq, dtype=torch.float32, device="meta") if getattr(s, "sinks", False) else None
    p = validate(q, k, v, None, None, s.causal, sinks=sinks, **score_options(s))  # separate K and V, as timed
    # The problem's device matters to the backends' checks: describe the real one.
    from dataclasses import replace
    return replace(p, device=device)


def score_options(shape) -> dict:
    """fmha.attention's window_size and softcap for a shape, where it has them."""
    options = {}
    if getattr(shape, "window", -1) >= 0:
        options["window_size"] = (shape.window, -1)
    if getattr(shape, "softcap", 0.0):
        options["softcap"] = shape.softcap
    return options


def call_options(inputs) -> dict:
    """score_options, and the inputs' sink logits where the shape has them."""
    options = score_options(inputs.shape)
    if inputs.sinks is not None:  # (every inputs class has the attribute: none drops sinks silently)
        options["sinks"] = inputs.sinks
    return options


# ---- contenders ----------------------------------------------------------------------------

from perf.peers import FmhaBackendContender, Unsupported  # noqa: E402  (after the sys.path fix above)


class FmhaContender(FmhaBackendContender):
    is_fmha = True

    def __init__(self, backend: str):
        self.name = backend
        self.note = f"fmha.attention(backend={backend!r})"

    def prepare(self, inputs):
        import fmha
        from fmha.dispatch import why_not
        why = why_not(self.name, problem_of(inputs.shape, inputs.device, inputs.dtype))
        if why is not None:
            raise Unsupported(why)
        sets, causal, backend, options = inputs.sets, inputs.shape.causal, self.name, call_options(inputs)

        def fn(i):
            q, k, v = sets[i]
            return fmha.attention(q, k, v, causal=causal, backend=backend, **options)

        return fn


def make_contenders(args):
    """fmha's GPU backends and the peers, or the subset --contenders names; --preset window adds FlashInfer's
    paged decode (unless --no-flashinfer), which takes sliding windows and score caps."""
    from fmha.backends import registry
    from perf.paged import FlashInferContiguous, chosen_contenders
    from perf.peers import PEER_NAMES, make_peers
    fmha_names = [n for n in registry() if n != "reference"]
    known = fmha_names + PEER_NAMES + (["flashinfer"] if args.preset == "window" else [])
    names = chosen_contenders(args, known, args.preset, "flashinfer")
    peer_names = [n for n in PEER_NAMES if n in names and not (n == "flex" and args.no_flex)]
    contenders = [FmhaContender(n) for n in fmha_names if n in names]
    contenders += make_peers(peer_names, compile_flex=not args.dry_run)
    if "flashinfer" in names:
        contenders.append(FlashInferContiguous())
    return contenders


# ---- one contender on one shape --------------------------------------------------------------

def cosine(a, b) -> float:
    """The smaller of the whole output's cosine and the smallest over its rows (each sequence, token and head's
    D_v values): over the whole output a mask ignored at T > 1 or a dropped key stays above the gate, and a row's
    cosine misses a wrong scale of the row (sinks dropped). A row whose reference is zero counts as 1 where the
    output's is zero too; NaN anywhere gives NaN."""
    import torch
    a, b = a.float().reshape(-1, a.shape[-1]), b.float().reshape(-1, b.shape[-1])
    den = (a.norm() * b.norm()).item()
    whole = (a.flatten() @ b.flatten()).item() / den if den > 0 else float("nan")
    na, nb = a.norm(dim=1), b.norm(dim=1)
    rows = torch.where(nb == 0, (na == 0).float(), (a * b).sum(1) / (na * nb))
    return min(whole, rows.min().item()) if rows.numel() and whole == whole else float("nan")


def reference_rows(inputs):
    """The batch rows checked (first and last) and fmha's fp32 reference output on them."""
    import math
    from fmha.reference import attention_reference
    B = inputs.shape.B
    rows = [0] if B == 1 else [0, B - 1]
    q, k, v = (t[rows] for t in inputs.sets[0])
    out, _ = attention_reference(q, k, v, None, 1.0 / math.sqrt(inputs.shape.D), inputs.shape.causal,
                                 **call_options(inputs))
    return rows, out


def _compile_s(c, t0) -> dict:
    """A failed compile costs time too: report it (the flex budget rule counts it)."""
    return {"compile_s": round(time.perf_counter() - t0, 2)} if c.compiles else {}


def _separated(fn, device):
    """fn followed by a one-element add (see --separate)."""
    import torch
    buf = torch.zeros(1, device=device)

    def call(i):
        out = fn(i)
        buf.add_(1.0)
        return out

    return call


def shape_notes(records, c) -> str:
    """What contender c ran, from its results' notes (one per distinct setup, in shape order: FlashInfer's wrapper
    differs between shapes), or its own note."""
    notes = []
    for rec in records:
        note = rec["results"].get(c.name, {}).get("setup")
        if note and note not in notes:
            notes.append(note)
    return " / ".join(notes) or c.note


def run_contender(c, inputs, rows, ref, args, device, keep=None) -> dict:
    """Prepare, check and time contender c on the inputs; keep (a dict): the timed callable is stored
    under c.name, for more rounds of timing (more_rounds)."""
    import torch
    from perf.peers import short_reason, timed_first_call
    from perf.timing import measure
    r = {"status": "ok", "reason": None, "note": c.note, "cosine": None}
    try:
        with c.context():
            t0 = time.perf_counter()
            try:
                fn = c.prepare(inputs)
                r["note"] = r["setup"] = c.note  # (what prepare made of this shape; the note may grow below)
                out, first_s = timed_first_call(c, fn)
            except Unsupported as e:
                return {**r, **_compile_s(c, t0), "status": "unsupported", "reason": str(e)}
            except torch.cuda.OutOfMemoryError:
                return {**r, "status": "unsupported", "reason": "out of memory"}
            except Exception as e:  # a peer refusing a shape; in fmha, a bug
                return {**r, **_compile_s(c, t0), "status": "error" if c.is_fmha else "unsupported",
                        "reason": f"{type(e).__name__}: {short_reason(e)}"}
            if c.compiles:
                r["compile_s"] = round(first_s, 2)
            if args.separate:
                fn = _separated(fn, device)
            cos = cosine(out[rows], ref)
            del out
            r["cosine"] = cos
            if not cos >= MIN_COSINE:
                r["status"] = "WRONG"
                r["reason"] = f"cosine {cos:.6f} < {MIN_COSINE} against the fp32 reference"
            t = measure(fn, inputs.n_sets, device, replays=args.replays, capture=not args.no_graph,
                        settle_s=args.settle_ms / 1e3, check=lambda o: cosine(o[rows], ref))
            note = t.pop("note")
            if note:
                r["note"] = f"{c.note}; {note}"
            graph_cos = t.pop("graph_check")
            if graph_cos is not None:
                r["graph_cosine"] = graph_cos
                if not graph_cos >= MIN_COSINE and r["status"] == "ok":
                    r["status"] = "WRONG"
                    r["reason"] = (f"cosine {graph_cos:.6f} < {MIN_COSINE} against the fp32 reference after the "
                                   "timed graph replays (the eager first call passed)")
            r.update(t)
            r["us"] = t["graph_us"] if t["graph_us"] is not None else t["eager_us"]
            if keep is not None and t["graph_us"] is not None:
                keep[c.name] = fn
            if args.also_separate:  # the same calls, each followed by an add (the --separate regime)
                ts = measure(_separated(fn, device), inputs.n_sets, device, replays=args.replays,
                             capture=not args.no_graph, settle_s=args.settle_ms / 1e3)
                r["separate_us"] = ts["graph_us"] if ts["graph_us"] is not None else ts["eager_us"]
                r["separate_raw_us"] = ts["graph_raw_us"] or ts["eager_raw_us"]
    except Exception as e:
        if device.type == "cuda":
            torch.cuda.synchronize()
        return {**r, "status": "error", "reason": f"{type(e).__name__}: {short_reason(e)}"}
    return r


def prewarm(contenders, device):
    """One tiny call per fmha backend before the clock matters: builds (nvcc) or JIT-compiles it."""
    import torch
    import fmha
    from fmha.dispatch import why_not
    for c in contenders:
        if not c.is_fmha:
            continue
        q = torch.randn(1, 1, 8, 128, dtype=torch.bfloat16, device=device)
        k = torch.randn(1, 256, 8, 128, dtype=torch.bfloat16, device=device)
        v = torch.randn_like(k)
        if why_not(c.name, problem_of_tensors(q, k, v)) is not None:
            continue
        t0 = time.perf_counter()
        try:
            fmha.attention(q, k, v, backend=c.name)
            if device.type == "cuda":
                torch.cuda.synchronize()
            print(f"  fmha backend {c.name!r} ready ({time.perf_counter() - t0:.1f} s)", flush=True)
        except Exception as e:
            print(f"  fmha backend {c.name!r} failed its first call: {type(e).__name__}: {str(e)[:300]}", flush=True)


def problem_of_tensors(q, k, v):
    from fmha.problem import validate
    return validate(q, k, v)


# ---- the sweep -----------------------------------------------------------------------------

def environment(args, argv, device):
    import platform
    import torch
    import fmha
    from fmha.backends import available_backends, registry
    from fmha.tuning import gpu_key
    try:
        import triton
        triton_version = triton.__version__
    except Exception:
        triton_version = None
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        gpu = torch.cuda.get_device_name(device)
        extra = {"sm_count": props.multi_processor_count, "capability": f"{props.major}.{props.minor}",
                 "memory_bytes": props.total_memory, "cuda": torch.version.cuda}
        key = gpu_key(gpu)
    else:
        gpu, key, extra = "CPU (dry run)", "cpu-dry-run", {}
    from perf.timing import ROUND_ORDER, even_rounds, l2_cache_bytes
    unavailable = {n: b.unavailable_reason() for n, b in registry().items() if b.unavailable_reason()}
    return {"gpu": gpu, "gpu_key": key, **extra, "l2_bytes": l2_cache_bytes(device),
            "torch": torch.__version__, "triton": triton_version, "fmha": fmha.__version__,
            "python": platform.python_version(), "date": datetime.date.today().isoformat(),
            "time": datetime.datetime.now().isoformat(timespec="seconds"),
            "command": command_line(argv), "argv": list(argv), "cwd": os.getcwd(),
            "preset": args.preset, "shape_filter": args.shapes, "dry_run": args.dry_run, "dtype": DTYPES[args.dtype],
            "fmha_backends_available": available_backends(), "fmha_backends_unavailable": unavailable,
            "min_cosine": MIN_COSINE, "replays": args.replays, "settle_ms": args.settle_ms,
            "rounds": even_rounds(args.rounds) if args.preset in ("deepseek", "window") else 1,
            "round_order": ROUND_ORDER,
            "rotate_factor": args.rotate_factor, "separate": args.separate,
            "also_separate": args.also_separate,
            "bandwidth_units": "GB/s = 1e9 bytes/s (decimal)",
            "bytes_moved": "q + k_cache + v_cache + out, as fmha.Problem.bytes_moved()"}


def more_rounds(results, contenders, kept, n_sets, args, device, deadline, start: int = 0) -> None:
    """Rounds 2 .. even_rounds(args.rounds) of timing on one shape, each starting one contender later than the
    one before (perf/timing.py round_order; round 1 ran in the order rotated by `start`): at the power cap the GPU's clock drifts over a shape's measurement (a peer took
    149.1 and 158.5 µs at 1785 and 1620 MHz in two runs minutes apart, H200), so one round favours whichever
    contender ran at the higher clock.
    Each contender's `us` and `graph_us` become the median over its rounds (`round_us`), its clock the
    median of the rounds' (`round_mhz`); the raw samples and the eager time stay round 1's. A round that
    fails is noted (`round_error`) and ends that contender's rounds; its other figures stand."""
    import contextlib

    import torch

    from perf.peers import short_reason
    from perf.timing import even_rounds, graph_round, round_order

    def timed(c) -> bool:
        r = results.get(c.name)
        return c.name in kept and bool(r) and r.get("status") in ("ok", "WRONG")

    first = [c for c in round_order(contenders, start) if timed(c)]  # (round 1's order)
    last = first[-1].name if first else None
    for k in range(1, even_rounds(args.rounds)):
        if time.monotonic() > deadline:
            break
        order = round_order([c for c in contenders if timed(c)], start + k)  # (rotated among those still timed)
        if len(order) > 1 and order[0].name == last:  # (where the timed ones are fewer than the contenders)
            order = order[1:] + order[:1]
        for c in order:
            r, fn = results[c.name], kept[c.name]
            last = c.name
            try:
                with getattr(c, "context", contextlib.nullcontext)():
                    us, clock = graph_round(fn, n_sets, device, args.replays, args.settle_ms / 1e3)
            except Exception as e:  # (out of memory included) the rounds before it stand
                if device.type == "cuda":
                    with contextlib.suppress(Exception):  # (a sticky CUDA error raises here again)
                        torch.cuda.synchronize()
                r["round_error"] = f"round {k + 1}: {type(e).__name__}: {short_reason(e)}"
                kept.pop(c.name)
                continue
            r.setdefault("round_us", [r["us"]]).append(us)
            r.setdefault("round_mhz", [r.get("sm_mhz")]).append(clock.get("sm_mhz"))
            r.setdefault("round_capped", [r.get("power_capped")]).append(clock.get("power_capped"))
    for r in results.values():
        if r and len(r.get("round_us", ())) > 1:
            r["us"] = r["graph_us"] = statistics.median(r["round_us"])
            mhz = [m for m in r["round_mhz"] if m is not None]
            capped = [x for x in r["round_capped"] if x is not None]
            r["sm_mhz"] = statistics.median(mhz) if mhz else None
            r["power_capped"] = sum(capped) / len(capped) if capped else None


def summarize(rec, ceilings):
    """Add GB/s, % of the read ceiling, the best peer and fmha's speedups to one shape record."""
    from perf.timing import comparable, gbps
    best = None
    for name, r in rec["results"].items():
        if r.get("us"):
            r["gbps"] = gbps(rec["bytes_moved"], r["us"])
            r["pct_read_ceiling"] = 100.0 * r["gbps"] / ceilings["read_gbps"]
            if r.get("eager_us"):
                r["eager_gbps"] = gbps(rec["bytes_moved"], r["eager_us"])
            if (not r.get("is_fmha") and r["status"] == "ok" and comparable(r)
                    and (best is None or r["us"] < best[1])):
                best = (name, r["us"])
    rec["best_peer"], rec["best_peer_us"] = best if best else (None, None)
    rec["speedup_vs_best_peer"] = {
        name: (best[1] / r["us"] if best and r.get("us") and r["status"] == "ok" and comparable(r) else None)
        for name, r in rec["results"].items() if r.get("is_fmha")}



def shape_line(rec) -> str:
    parts = []
    for name, r in rec["results"].items():
        if r.get("us"):
            sep = f" (with add {r['separate_us']:.1f}us)" if r.get("separate_us") else ""
            parts.append(f"{name} {r['us']:.1f}us {r['gbps']:.0f}GB/s{sep}{'' if r['status'] == 'ok' else ' ' + r['status']}")
        else:
            parts.append(f"{name} {r['status']}")
    sp = ", ".join(f"{n} {x:.2f}x" for n, x in rec["speedup_vs_best_peer"].items() if x)
    tail = f" | best peer {rec['best_peer']}: {sp}" if rec["best_peer"] else ""
    return f"{rec['name']}: " + "; ".join(parts) + tail


def sweep(shapes, contenders, args, device, ceilings, t_start, bar):
    import torch
    from perf.timing import free_inputs, l2_cache_bytes, round_order, rotation_count
    l2 = l2_cache_bytes(device)
    deadline = t_start + args.budget_s
    compile_times = []
    records = []
    dtype_name = DTYPES[args.dtype]
    dtype = getattr(torch, dtype_name)
    for si, shape in enumerate(shapes):
        p = problem_of(shape, device, dtype)
        nbytes = p.bytes_moved(kv_tokens=shape.kv_tokens)  # with a window, its keys: what the sets rotate
        n_sets = 2 if args.dry_run else rotation_count(nbytes, l2, args.rotate_factor)
        rec = {"name": shape.name, "family": shape.family, "B": shape.B, "T": shape.T, "Hq": shape.Hq,
               "Hkv": shape.Hkv, "G": shape.G, "S": shape.S, "D": shape.D, "causal": shape.causal,
               "window": shape.window, "softcap": shape.softcap, "sinks": shape.sinks,
               "tokens": shape.tokens, "dtype": dtype_name, "bytes_moved": nbytes, "n_sets": n_sets,
               "rotation_bytes": n_sets * nbytes, "results": {}}
        bar.set_description_str(f"[{si + 1}/{len(shapes)}] {shape.name}", refresh=False)
        inputs = None
        done = 0
        try:
            inputs = ShapeInputs(shape, n_sets, device, args.seed + si, dtype)
            rows, ref = reference_rows(inputs)
            rec["checked_rows"] = rows
            kept = {} if args.preset == "window" else None  # (its ratios are a few percent: timed in rounds)
            for c in round_order(contenders, si):  # (no contender always the first after the reference)
                bar.set_postfix_str(c.name, refresh=False)
                left = deadline - time.monotonic()
                skip = None
                if not c.is_fmha and left < 0:
                    skip = f"time budget of {args.budget_s:.0f} s spent"
                elif c.compiles and compile_times and left < 2 * statistics.mean(compile_times) + 15:
                    skip = (f"{left:.0f} s of the time budget left, flex compiles take "
                            f"~{statistics.mean(compile_times):.0f} s")
                if skip:
                    r = {"status": "skipped", "reason": skip, "note": c.note}
                else:
                    r = run_contender(c, inputs, rows, ref, args, device, keep=kept)
                if r.get("compile_s"):
                    compile_times.append(r["compile_s"])
                r["is_fmha"] = c.is_fmha
                rec["results"][c.name] = r
                bar.update(1)
                done += 1
            rec["results"] = {c.name: rec["results"][c.name] for c in contenders}  # (the tables' order)
            if kept:
                more_rounds(rec["results"], contenders, kept, n_sets, args, device, deadline, start=si)
            del kept
        except torch.cuda.OutOfMemoryError as e:
            for c in contenders:
                rec["results"].setdefault(c.name, {"status": "error", "is_fmha": c.is_fmha,
                                                   "reason": f"out of memory building inputs ({e})"[:200]})
            bar.update(len(contenders) - done)
        finally:
            free_inputs(inputs, device)
            del inputs
        summarize(rec, ceilings)
        bar.write(shape_line(rec))
        records.append(rec)
    return records



def run_device(args):
    """The device a run measures on: the CPU for --dry-run, else the current CUDA GPU (exits without one)."""
    import torch
    if args.dry_run:
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise SystemExit("no CUDA GPU here; use --dry-run for a CPU smoke run of the pipeline")
    return torch.device("cuda", torch.cuda.current_device())


def results_dir(args, env, preset: str = "") -> str:
    """--out, else perf/results/<gpu-key>-<date>/ (a dry run: a fresh folder under /tmp; `preset` names it)."""
    if args.out:
        return args.out
    if args.dry_run:
        tag = f"-{preset}" if preset else ""
        return os.path.join("/tmp", f"fmha-perf-dry-run{tag}-{env['date']}-{os.getpid()}")
    return os.path.join(REPO, "perf", "results", f"{env['gpu_key']}-{env['date']}")


def mirror_results(args, env, out_dir, written) -> None:
    """With --out (and not a dry run), copies the `written` files of out_dir into the GPU's folder of
    perf/results/ too, which keeps the latest suite per GPU."""
    if not args.out or args.dry_run:
        return
    mirror = os.path.join(REPO, "perf", "results", f"{env['gpu_key']}-{env['date']}")
    if os.path.abspath(mirror) != os.path.abspath(out_dir):
        for path in written:
            dst = os.path.join(mirror, os.path.relpath(path, out_dir))
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            shutil.copy(path, dst)
        print(f"copied to {mirror}", flush=True)

def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parse_args(argv)
    if args.dry_run and not os.environ.get("TRITON_INTERPRET"):
        os.environ["TRITON_INTERPRET"] = "1"  # before any Triton kernel is defined: triton runs on the CPU
    if args.preset == "paged":  # its own sweep, tables and files (perf/paged.py)
        from perf import paged
        return paged.main(args, argv)
    if args.preset == "deepseek":  # the same, for a shared latent cache (perf/deepseek.py)
        from perf import deepseek
        return deepseek.main(args, argv)
    t_start = time.monotonic()
    import torch
    from perf import report
    from perf.shapes import select
    from perf.timing import measure_ceilings, read_again

    shapes = select(args.preset, args.shapes)
    device = run_device(args)

    if args.dry_run:
        shapes = list({s.tiny().name: s.tiny() for s in shapes}.values())
    contenders = make_contenders(args)
    env = environment(args, argv, device)
    out_dir = results_dir(args, env)
    print(f"fmha perf: {env['gpu']}, torch {env['torch']}, triton {env['triton']}; {len(shapes)} shapes x "
          f"{len(contenders)} contenders ({', '.join(c.name for c in contenders)}); budget {args.budget_s:.0f} s; "
          f"output {out_dir}", flush=True)
    for name, why in env["fmha_backends_unavailable"].items():
        print(f"  fmha backend {name!r} unavailable: {why}", flush=True)

    prewarm(contenders, device)
    torch.manual_seed(args.seed)
    t0 = time.monotonic()
    ceilings = measure_ceilings(device, gib=(1 / 1024 if args.dry_run else args.ceiling_gib))
    print(f"HBM ceilings (GB/s, decimal): copy {ceilings['copy_gbps']:.0f}, read {ceilings['read_gbps']:.0f} "
          f"({ceilings['read_source']}); {time.monotonic() - t0:.1f} s", flush=True)

    bar = progress(len(shapes) * len(contenders))
    try:
        records = sweep(shapes, contenders, args, device, ceilings, t_start, bar)
    finally:
        bar.close()
    read_again(device, ceilings)
    if any(c.name == "flashinfer" for c in contenders):
        from perf.paged import flashinfer_version
        env["flashinfer"] = flashinfer_version()
    results = {"meta": {**env, "elapsed_s": round(time.monotonic() - t_start, 1)},
               "ceilings": ceilings,
               "contenders": {c.name: {"fmha": c.is_fmha, "what": shape_notes(records, c)} for c in contenders},
               "shapes": records}
    written = report.write_all(results, out_dir, stem="window" if args.preset == "window" else "results")
    if args.write_tuning:
        written += report.write_tuning(results, out_dir, to_package=not args.dry_run)
    mirror_results(args, env, out_dir, written)
    print(f"done in {time.monotonic() - t_start:.0f} s; wrote:", flush=True)
    for path in written:
        print(f"  {path}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
