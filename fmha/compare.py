"""A/B comparison of backends on the same inputs: `fmha.compare(...)`.

Every backend runs into a NaN-poisoned output buffer, and once more into
NaN-filled out and LSE, which must give the same bits; each sequence's output
is checked against the fp32 reference with the tolerance that follows from the
arithmetic (see `tolerance`; max |v| over the keys that sequence's rows attend
to) and a cosine of at least MIN_COSINE, and the LSE within `lse_tolerance`;
the non-reference backends are compared with each other pairwise, and each is
timed (CUDA-graph replay on a GPU, wall clock on a CPU). A backend that raises
or disagrees is reported as such, naming the worst sequence.
"""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from typing import Optional

import torch

from .api import _check_inference_only, attention
from .backends import available_backends, registry
from .dispatch import decide, why_not
from .problem import check_bool, validate
from .reference import attention_reference
from .tuning import NOISE

UNIT_ROUNDOFF = {torch.bfloat16: 2.0 ** -8, torch.float16: 2.0 ** -11}
LSE_ATOL = 1e-3
# Below it an output disagrees whatever its max abs error: a small true output (a long cache averages V towards
# 0) leaves a zeroed or negated one inside the absolute bound, not near cosine 1 (outputs within their bound of
# zero are judged by the cosine only where the backend's is all zeros: _errors).
MIN_COSINE = 0.99999
# The cosine does not see scale: a head's output scaled by a wrong factor keeps its direction, and at long caches
# its abs error stays inside the bound. Rounding noise hardly moves a norm (it is mostly orthogonal to the output),
# and rounding P to bf16 the same way in every weight moves it by at most u (0.4%).
MAX_SCALE_ERR = 0.01
# Heads whose true output has a smaller RMS are not judged by scale (fp16 flushes outputs of e^-20 sinks).
SCALE_MIN_RMS = 1e-3


def tolerance(dtype, vmax: float) -> float:
    """Max abs error allowed against the fp32 reference.

    The output is a convex combination of V rows; rounding P and the output to
    the input dtype (unit roundoff u) each cost at most u * max|v|.
    """
    return 2 * UNIT_ROUNDOFF[dtype] * vmax + 1e-3


def scale_errors(out: torch.Tensor, ref: torch.Tensor) -> torch.Tensor:
    """|norm(out) / norm(ref) - 1| per (index of dim 0, index of dim -2), i.e. per sequence and head of
    [B, T, H, D] outputs, over the rest; 0 where the true output's RMS is below SCALE_MIN_RMS."""
    def groups(x):
        x = x.double()
        return x.movedim(-2, 1).flatten(2) if x.dim() >= 3 else x.flatten(1).unsqueeze(1)
    o, r = groups(out), groups(ref)
    on, rn = o.norm(dim=-1), r.norm(dim=-1)
    judged = rn >= SCALE_MIN_RMS * r.shape[-1] ** 0.5
    return torch.where(judged, (on / torch.where(judged, rn, 1.0) - 1).abs(), torch.zeros_like(rn))


def lse_tolerance(ref_lse: torch.Tensor) -> torch.Tensor:
    """Max abs LSE error allowed, per entry: LSE_ATOL, plus a few fp32 roundings of the entry's magnitude (scores
    of 1e4 carry fp32 errors past 1e-3 in any kernel)."""
    return LSE_ATOL + 4 * torch.finfo(torch.float32).eps * ref_lse.abs()


@dataclass
class BackendResult:
    backend: str
    status: str  # "ok", "DISAGREES: ...", "failed: ...", "unsupported: ..."
    max_abs_err: Optional[float] = None
    rel_err: Optional[float] = None
    cosine: Optional[float] = None
    lse_max_err: Optional[float] = None
    median_us: Optional[float] = None
    gbps: Optional[float] = None
    timing: str = ""


# What the GB/s column counts.
GBPS_NOTE = ("GB/s (valid KV) counts the bytes a call must move: q, out and the K and V rows of the keys each "
             "sequence has (cache_seqlens clamped to [0, S]; the whole cache without cache_seqlens; from "
             "cache_leftpad on, and at most a window's left bound plus T keys), 1 GB = 1e9 B")


@dataclass
class CompareReport:
    problem: str
    auto_backend: str
    tolerance: float  # the largest of the sequences' tolerances
    results: list = field(default_factory=list)
    pairwise: dict = field(default_factory=dict)  # (a, b) -> max abs difference
    auto_within_noise: bool = False  # auto's table had the candidates' times within its noise margin
    auto_reason: str = ""
    on_gpu: bool = True  # (the table shows no GB/s for a CPU's wall clock)
    named: bool = False  # backends= named them (else: every available one)

    @property
    def ok(self) -> bool:
        """Every backend named in backends= ran and agreed; without backends=, those that cannot serve the
        problem are passed over, but at least one besides the reference must have run and agreed."""
        if self.named:
            return bool(self.results) and all(r.status == "ok" for r in self.results)
        return (all(r.status == "ok" or r.status.startswith("unsupported") for r in self.results)
                and any(r.status == "ok" and r.backend != "reference" for r in self.results))

    def rows(self):
        for r in self.results:
            tag = ""
            if r.backend == self.auto_backend:
                tag = " (auto, within noise)" if self.auto_within_noise else " (auto)"
            yield [self.problem, r.backend + tag,
                   _fmt(r.max_abs_err, "{:.2e}"), _fmt(r.cosine, "{:.7f}"), _fmt(r.lse_max_err, "{:.1e}"),
                   _fmt(r.median_us, "{:.1f}"), _fmt(r.gbps if self.on_gpu else None, "{:.0f}"), r.status]

    HEADER = ["problem", "backend", "max abs err", "cosine", "lse err", "median us", "GB/s (valid KV)", "status"]

    def auto_remark(self) -> str:
        """How close auto's pick was: in its table (within noise) and in this run's timings ("" if neither
        says anything)."""
        notes = []
        if self.auto_within_noise:
            notes.append(f"the table's times were within its {100 * NOISE:.0f}% noise margin, so auto took "
                         f"{self.auto_backend} for its lower per-call cost")
        timed = {r.backend: r.median_us for r in self.results
                 if r.backend != "reference" and r.median_us is not None and r.status == "ok"}
        mine = timed.get(self.auto_backend)
        others = {n: t for n, t in timed.items() if n != self.auto_backend}
        if mine is not None and others:
            best = min(others, key=others.get)
            apart = abs(mine / others[best] - 1)
            if apart <= NOISE:
                notes.append(f"measured here, {self.auto_backend} {mine:.1f} us and {best} {others[best]:.1f} us are "
                             f"within noise ({100 * apart:.1f}% apart)")
            elif others[best] < mine:
                notes.append(f"measured here, {best} ran {100 * apart:.0f}% faster than {self.auto_backend} "
                             f"({others[best]:.1f} vs {mine:.1f} us): this GPU may differ from the table's "
                             "(`python -m perf --write-tuning` rewrites it)")
        return "; ".join(notes)

    def __str__(self) -> str:
        lines = [format_table(self.HEADER, list(self.rows()))]
        if self.pairwise:
            pairs = ", ".join(f"{a} vs {b}: {d:.2e}" for (a, b), d in self.pairwise.items())
            lines.append(f"pairwise max abs difference: {pairs}")
        if not self.ok and all(r.status == "ok" or r.status.startswith("unsupported") for r in self.results):
            lines.append("ok is False: " + ("a backend named in backends= did not run" if self.named else
                                            "no backend besides the reference ran"))
        remark = self.auto_remark()
        lines.append(f"tolerance against the reference: up to {self.tolerance:.2e} (each sequence's from its "
                     f"keys' max |v|); auto picks {self.auto_backend}"
                     + (f" ({remark})" if remark else "") + f"; {GBPS_NOTE}")
        return "\n".join(lines)


def _fmt(x, spec):
    return "-" if x is None else spec.format(x)


def format_table(header, rows) -> str:
    widths = [max(len(str(c)) for c in col) for col in zip(header, *rows)]
    line = lambda cells: "  ".join(str(c).ljust(w) for c, w in zip(cells, widths))  # noqa: E731
    return "\n".join([line(header), line(["-" * w for w in widths])] + [line(r) for r in rows])


def time_call(fn, device: torch.device, reps: int = 20) -> tuple:
    """(median microseconds, method). CUDA-graph replay on a GPU, falling back to eager events."""
    if device.type == "cuda":
        fn()
        torch.cuda.synchronize()
        try:
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                fn()
            run, method = graph.replay, "graph"
        except Exception:
            run, method = fn, "eager"
        run()
        times = []
        for _ in range(reps):
            start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            run()
            stop.record()
            stop.synchronize()
            times.append(start.elapsed_time(stop) * 1e3)
        return statistics.median(times), method
    fn()
    times = []
    for _ in range(max(3, reps // 4)):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e6)
    return statistics.median(times), "wall"


def compare(q, k_cache, v_cache, cache_seqlens=None, *, block_table=None, softmax_scale=None, causal=True,
            backends=None, timing=True, reps: int = 20, sinks=None, window_size=(-1, -1), softcap=0.0,
            cache_leftpad=None, others=None) -> CompareReport:
    """Run `backends` (default: all available) on the same inputs and report errors, agreement and time.

    With `block_table`, k_cache and v_cache are page pools; `sinks`, `window_size`, `softcap` and `cache_leftpad`
    are as in `fmha.attention`. An unknown name in `backends` raises ValueError before anything runs, as
    `fmha.attention` does.
    others: {name: fn}, implementations of your own judged and timed beside the backends (the one you are
    replacing, say). Each is called as fn(q, k_cache, v_cache, cache_seqlens, block_table=..., softmax_scale=...,
    causal=..., sinks=..., window_size=..., softcap=..., cache_leftpad=...) (softmax_scale resolved, the rest as
    given) and returns out [B, T, Hq, D_v], or (out, lse) with lse float32 [B, Hq, T]; its bits are not required
    to repeat between runs."""
    p = validate(q, k_cache, v_cache, cache_seqlens, softmax_scale, causal, None, block_table, sinks, window_size,
                 softcap, cache_leftpad)
    extra = dict(sinks=sinks, window_size=(p.window_left, p.window_right), softcap=p.softcap,
                 cache_leftpad=cache_leftpad)
    _check_inference_only(q, k_cache, v_cache, sinks)
    check_bool("timing", timing)
    if isinstance(reps, bool) or not isinstance(reps, int) or reps < 1:
        raise ValueError(f"reps: expected an int >= 1 (timed calls per backend), got {reps!r}")
    if q.is_meta:
        raise ValueError("q: a meta tensor has no data; compare runs every backend on real inputs")
    others = _check_others(others)
    if backends is None:
        names = available_backends()
    else:
        if not isinstance(backends, (str, list, tuple)):
            raise TypeError(f"backends: expected a backend name or a list of names, got {type(backends).__name__} "
                            f"{backends!r}; valid names: {', '.join(registry())}")
        names = [backends] if isinstance(backends, str) else list(backends)
        for name in names:  # every name checked before anything runs, as fmha.attention checks its backend=
            if not isinstance(name, str) or name not in registry():
                raise ValueError(f"backends: unknown backend {name!r}; valid names: {', '.join(registry())}")
        if not names:
            raise ValueError(f"backends: an empty list compares nothing; valid names: {', '.join(registry())}")
        if len(set(names)) != len(names):
            raise ValueError(f"backends: {names} names a backend twice")
    ref, ref_lse = attention_reference(q, k_cache, v_cache, cache_seqlens, p.softmax_scale, p.causal,
                                       block_table=block_table, **extra)
    ref = ref.float()
    bad = torch.isnan(ref).flatten(1).any(1).nonzero().flatten().tolist()
    if bad:
        raise ValueError(f"q, k_cache, v_cache: the fp32 reference's output of sequence(s) {bad[:8]} is NaN: NaN or "
                         "inf in q or in keys or values their rows attend to; compare needs finite inputs there")
    key_ranges = _visible_key_ranges(p, cache_seqlens, cache_leftpad)
    tols = [tolerance(p.dtype, vmax) for vmax in _vmax_of_visible_keys(p, v_cache, block_table, key_ranges)]
    try:
        auto = decide(p, "auto")
    except (NotImplementedError, ValueError) as e:  # (FMHA_BACKEND naming one that cannot serve: compare anyway)
        auto = None
        auto_label = f"none ({e})"
    report = CompareReport(problem=p.describe(), auto_backend=auto.backend if auto else auto_label,
                           tolerance=max(tols), auto_within_noise=bool(auto and auto.within_noise),
                           auto_reason=auto.reason if auto else "", on_gpu=q.device.type == "cuda",
                           named=backends is not None)
    whole = cache_seqlens is None and cache_leftpad is None and p.window_left < 0
    kv_tokens = None if whole else sum(hi - lo for lo, hi in key_ranges)  # (what a kernel reads of the cache)
    nbytes = p.bytes_moved(kv_tokens)
    outputs = {}
    for name in names:
        why = why_not(name, p)
        if why is not None:
            report.results.append(BackendResult(name, f"unsupported: {why}"))
            continue
        out = torch.full((p.batch, p.seqlen_q, p.heads_q, p.head_dim_v), float("nan"), dtype=q.dtype,
                         device=q.device)
        try:
            _, lse = attention(q, k_cache, v_cache, cache_seqlens, block_table=block_table,
                               softmax_scale=p.softmax_scale, causal=p.causal, return_lse=True, backend=name,
                               out=out, **extra)
        except Exception as e:  # reported, never hidden
            report.results.append(BackendResult(name, f"failed: {type(e).__name__}: {e}"))
            continue
        r = _errors(name, out, lse, ref, ref_lse, tols)
        if not r.status.startswith("DISAGREES: NaN"):
            outputs[name] = out
        if r.status == "ok":
            try:
                same = _reproduced(name, p, q, k_cache, v_cache, cache_seqlens, out, lse, block_table, sinks,
                                   cache_leftpad)
            except Exception as e:  # reported, never hidden
                report.results.append(BackendResult(name, f"failed: second run: {type(e).__name__}: {e}"))
                continue
            if not same:
                r.status = ("DISAGREES: a second run into NaN-filled out and LSE gave other bits (a race, or "
                            "entries the first run left as the allocator had them)")
        if timing:
            def call(name=name, out=out):
                attention(q, k_cache, v_cache, cache_seqlens, block_table=block_table,
                          softmax_scale=p.softmax_scale, causal=p.causal, backend=name, out=out, **extra)
            try:
                r.median_us, r.timing = time_call(call, q.device, reps)
                r.gbps = nbytes / (r.median_us * 1e-6) / 1e9
            except Exception as e:
                r.status += f" (timing failed: {type(e).__name__}: {e})"
        report.results.append(r)
    options = dict(block_table=block_table, softmax_scale=p.softmax_scale, causal=p.causal, **extra)
    for name, fn in others.items():
        r, out = _run_other(name, fn, p, (q, k_cache, v_cache, cache_seqlens), options, ref, ref_lse, tols)
        if out is not None:
            outputs[name] = out
            if timing:
                try:
                    r.median_us, r.timing = time_call(lambda fn=fn: fn(q, k_cache, v_cache, cache_seqlens, **options),
                                                      q.device, reps)
                    r.gbps = nbytes / (r.median_us * 1e-6) / 1e9
                except Exception as e:
                    r.status += f" (timing failed: {type(e).__name__}: {e})"
        report.results.append(r)
    kernels = [n for n in outputs if n != "reference"]
    for i, a in enumerate(kernels):
        for b in kernels[i + 1:]:
            report.pairwise[(a, b)] = (outputs[a].float() - outputs[b].float()).abs().max().item()
    return report


def _check_others(others) -> dict:
    """others= as a {name: callable} dict whose names are not the backends' (refused by name otherwise)."""
    if others is None:
        return {}
    if not isinstance(others, dict):
        raise TypeError(f"others: expected a dict {{name: callable}}, got {type(others).__name__}")
    for name, fn in others.items():
        if not isinstance(name, str) or name in registry() or name == "auto":
            raise ValueError(f"others: name {name!r} must be a str other than a backend's ({', '.join(registry())})")
        if not callable(fn):
            raise TypeError(f"others: {name!r} is {type(fn).__name__}, not a callable")
    return others


def _run_other(name, fn, p, inputs, options, ref, ref_lse, tols) -> tuple:
    """(its BackendResult, its output or None): one of others= run once and judged as the backends are, its LSE
    only where it returns one."""
    try:
        got = fn(*inputs, **options)
    except Exception as e:  # reported, never hidden
        return BackendResult(name, f"failed: {type(e).__name__}: {e}"), None
    out, lse = got if isinstance(got, tuple) and len(got) == 2 else (got, None)
    want = (p.batch, p.seqlen_q, p.heads_q, p.head_dim_v)
    if not isinstance(out, torch.Tensor) or tuple(out.shape) != want:
        shape = list(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
        return BackendResult(name, f"failed: returned {shape}; expected out {list(want)} or (out, lse)"), None
    if lse is not None and (not isinstance(lse, torch.Tensor) or tuple(lse.shape) != tuple(ref_lse.shape)):
        shape = list(lse.shape) if isinstance(lse, torch.Tensor) else type(lse).__name__
        return BackendResult(name, f"failed: returned an lse of {shape}; expected {list(ref_lse.shape)}"), None
    r = _errors(name, out, ref_lse if lse is None else lse.float(), ref, ref_lse, tols)
    if lse is None:  # (none returned: nothing of it judged)
        r.lse_max_err = None
    return r, out


def _reproduced(name, p, q, k_cache, v_cache, cache_seqlens, out, lse, block_table, sinks, cache_leftpad) -> bool:
    """The backend's runner once more, into NaN-filled out and LSE (attention's LSE is a fresh allocation, which
    may hold an earlier call's values): the same bits."""
    out2, lse2 = torch.full_like(out, float("nan")), torch.full_like(lse, float("nan"))
    registry()[name].run(p, q, k_cache, v_cache, cache_seqlens, out2, lse2, block_table=block_table, sinks=sinks,
                         cache_leftpad=cache_leftpad)
    return torch.equal(out2, out) and torch.equal(lse2, lse)


def _visible_key_ranges(p, cache_seqlens, cache_leftpad) -> list:
    """Each sequence's keys [lo, hi) that some row attends to (a host sync, once): from its left pad, or from the
    first row's window bound (row t of T sees keys from hi - T + t - left), to its length."""
    ends = ([p.seqlen_k] * p.batch if cache_seqlens is None
            else cache_seqlens.to(torch.int64).clamp(0, p.seqlen_k).tolist())
    starts = [0] * p.batch if cache_leftpad is None else cache_leftpad.to(torch.int64).clamp(min=0).tolist()
    if p.window_left >= 0:
        starts = [max(lo, hi - p.seqlen_q - p.window_left) for lo, hi in zip(starts, ends)]
    return [(min(lo, hi), hi) for lo, hi in zip(starts, ends)]


def _vmax_of_visible_keys(p, v_cache, block_table, key_ranges) -> list:
    """max |v| of each sequence over its visible keys (what its tolerance scales with): slots past a length or
    before a left pad, keys left of every row's window and pages no sequence uses may hold anything, large values
    included. One sequence at a time (no full-size copy); the table comes to the host once."""
    S = p.page_size if block_table is not None else p.seqlen_k
    table = None if block_table is None else block_table.to(torch.int64).clamp(0, p.num_blocks - 1).cpu()
    vmaxes = []
    for b, (lo, n) in enumerate(key_ranges):
        if lo == n:
            vmaxes.append(0.0)
            continue
        if table is None:
            keys = v_cache[b, lo:n]
        else:  # the pages of [lo, n), whole, then cut to the keys
            keys = v_cache[table[b, lo // S:-(-n // S)].to(v_cache.device)].flatten(0, 1)[lo % S:lo % S + n - lo]
        vmaxes.append(torch.nan_to_num(keys, nan=0.0, posinf=0.0, neginf=0.0).abs().max().item())
    return vmaxes


def _errors(name, out, lse, ref, ref_lse, tols) -> BackendResult:
    """Errors of one backend against the reference, judged sequence by sequence (each with its own tolerance and
    cosine, so that one sequence of large values does not hide another's error); the figures reported are the
    worst over the sequences."""
    o = out.float()
    r = BackendResult(name, "ok")
    if torch.isnan(o).any():
        r.status = "DISAGREES: NaN in output (unwritten or NaN math)"
        return r
    diff = o - ref
    errs = diff.flatten(1).abs().amax(1).tolist()
    r.max_abs_err = max(errs)
    ref_norm = ref.double().norm().item()
    r.rel_err = diff.double().norm().item() / (ref_norm if ref_norm > 0 else 1.0)
    cosines = []
    for ob, rb, t in zip(o.flatten(1).double(), ref.flatten(1).double(), tols):
        on, rn = ob.norm().item(), rb.norm().item()
        # An output within its own bound of zero: its direction may be rounding noise (V rows that cancel), so the
        # abs check judges it, except where the backend wrote all zeros for a nonzero one (a long cache's true
        # output, averaged towards 0, may be inside the bound).
        if rb.abs().max().item() <= t and (on > 0 or rn == 0):
            cosines.append(1.0)
            continue
        cosines.append((ob @ rb).item() / (on * rn) if on > 0 else 0.0)
    r.cosine = min(cosines)
    same_inf = torch.equal(torch.isneginf(lse), torch.isneginf(ref_lse))
    finite = torch.isfinite(ref_lse)
    lse_err = (lse - ref_lse).abs()
    r.lse_max_err = lse_err[finite].max().item() if finite.any() else 0.0
    problems = []
    over = [b for b, (e, t) in enumerate(zip(errs, tols)) if e > t]
    if over:
        b = max(over, key=lambda i: errs[i] / tols[i])
        problems.append(f"max abs err {errs[b]:.2e} > {tols[b]:.2e} in sequence {b}"
                        + (f" ({len(over)} sequences over)" if len(over) > 1 else ""))
    low = [b for b, c in enumerate(cosines) if c < MIN_COSINE]
    if low:
        b = min(low, key=lambda i: cosines[i])
        problems.append(f"cosine {cosines[b]:.7f} < {MIN_COSINE} in sequence {b}")
    scale = scale_errors(o, ref)
    if (scale > MAX_SCALE_ERR).any():
        b, h = divmod(int(scale.argmax()), scale.shape[1])
        problems.append(f"output norm off by {scale[b, h].item():.1%} in sequence {b}, head {h}")
    if not same_inf or torch.isnan(lse).any():
        problems.append("LSE -inf/NaN pattern differs")
    elif finite.any() and (lse_err[finite] > lse_tolerance(ref_lse)[finite]).any():
        problems.append(f"LSE err {r.lse_max_err:.1e} > {LSE_ATOL:.0e} + 4 eps32 |LSE|")
    if problems:
        r.status = "DISAGREES: " + "; ".join(problems)
    return r
