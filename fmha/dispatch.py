"""Which backend serves a problem, and why.

Order of authority:
1. an explicit `backend=` argument (it must serve the problem, or NotImplementedError says why);
2. the FMHA_BACKEND environment variable, read per call (same contract as 1);
3. `auto`: on CUDA tensors, among backends that can serve the problem, the one a
   committed per-GPU timing table says is fastest for the nearest measured
   shape (fmha/tuning/<gpu>.json, written by the perf suite; where two are within
   the table's noise margin, the one of the lower eager per-call cost); without a table,
   the documented rule: the hand-written CUDA kernel where it serves the
   problem, else Triton, else the reference. On CPU tensors the reference
   (the Triton interpreter is a test vehicle, orders of magnitude slower).
   A backend's auto_reason can keep it out of `auto` while it still runs when named
   (the sm_100a kernel, never run on a Blackwell GPU, unless FMHA_CUDA_SM100=1).
"""
from __future__ import annotations

import os
from dataclasses import dataclass

from . import tuning
from .backends import BACKEND_NAMES, registry
from .base import decision_memo, forget_decisions  # noqa: F401  (part of this module's interface)
from .problem import Problem

BACKEND_ENV = "FMHA_BACKEND"


@dataclass(frozen=True)
class Decision:
    backend: str
    source: str  # "explicit", "env", "table" or "rule"
    reason: str
    considered: tuple = ()  # (name, None if usable else why not)
    launch: str = ""  # how the chosen backend launches the problem (filled in by fmha.explain)
    within_noise: bool = False  # chosen by the table among backends whose times are within its noise margin
    kv_reads: str = ""  # how the chosen backend reads K and V where they differ from plain separate caches

    def __str__(self) -> str:
        lines = [f"backend: {self.backend} (chosen by {self.source}: {self.reason})"]
        if self.launch:
            lines.append(f"  launch: {self.launch}")
        if self.kv_reads:
            lines.append(f"  K/V reads: {self.kv_reads}")
        for name, why in self.considered:
            lines.append(f"  {name:10s} {'can serve this problem' if why is None else 'no: ' + why}")
        return "\n".join(lines)


def valid_names() -> list:
    return ["auto", *BACKEND_NAMES]


def check_backend_name(backend, origin: str = "backend") -> None:
    if not isinstance(backend, str) or not (backend == "auto" or backend in BACKEND_NAMES):
        raise ValueError(f"{origin}: unknown backend {backend!r}; valid names: {', '.join(valid_names())}")


def why_not(name: str, p: Problem):
    b = registry()[name]
    return b.unavailable_reason() or b.unsupported_reason(p)


def backend_env() -> str:
    """FMHA_BACKEND as the process environment says now ("" when unset), read on every call."""
    return os.environ.get(BACKEND_ENV, "")


_DECISIONS = decision_memo()


def decide(p: Problem, backend: str = "auto") -> Decision:
    """The decision for `p`; memoised per (problem, backend name, FMHA_BACKEND) since every input
    to it is host information that does not change within a process."""
    key = (p, backend, backend_env() if backend == "auto" else "")  # the variable only matters to auto
    try:
        d = _DECISIONS.get(key)
    except TypeError:  # an unhashable backend; the name check below says what is wrong
        key = d = None
    if d is None:  # only checked names are ever stored, so a hit needs no name check
        check_backend_name(backend)
        d = _decide(p, backend)
        if key is not None:
            if len(_DECISIONS) >= 4096:  # full: start over (a decision is cheap to make again)
                _DECISIONS.clear()
            _DECISIONS[key] = d
    return d


def requested_backend(backend: str) -> tuple:
    """(name, source): the backend a call asks for, "auto" where none is named, and who named it: "explicit" (the
    backend= argument, or auto) or "env" (FMHA_BACKEND, read when backend is auto). Unknown names are refused."""
    check_backend_name(backend)
    if backend == "auto":
        env = backend_env()
        if env and env != "auto":
            check_backend_name(env, origin=f"environment variable {BACKEND_ENV}")
            return env, "env"
    return backend, "explicit"


def _decide(p: Problem, backend: str) -> Decision:
    backend, source = requested_backend(backend)
    considered = tuple((name, why_not(name, p)) for name in registry())
    if backend != "auto":
        why = dict(considered)[backend]
        what = "backend= argument" if source == "explicit" else f"{BACKEND_ENV}={backend}"
        if why is not None:
            origin = "" if source == "explicit" else f" (asked for by the environment variable {BACKEND_ENV})"
            raise NotImplementedError(f"backend {backend!r}{origin} cannot serve {p.describe()}: {why}")
        return Decision(backend, source, f"requested by {what}", considered)

    considered = tuple((name, why if why is not None else registry()[name].auto_reason(p))
                       for name, why in considered)
    usable = [name for name, why in considered if why is None]
    if p.device.type != "cuda":
        return Decision("reference", "rule", f"tensors on {p.device.type}: the fp32 reference is the "
                        "fastest correct path off the GPU", considered)
    gpu_usable = [n for n in usable if n != "reference"]
    if len(gpu_usable) > 1:
        eager = {n: registry()[n].eager_call_us for n in gpu_usable}
        hit = tuning.lookup(p, gpu_usable, eager)
        if hit is not None:
            return Decision(hit.backend, "table", hit.note, considered, within_noise=hit.within_noise)
    for name in ("cuda", "triton", "reference"):
        if name in usable:
            rule = {"cuda": "the hand-written CUDA kernel serves this problem on this GPU",
                    "triton": "no hand-written CUDA kernel serves this problem here; the Triton kernel does",
                    "reference": "no GPU kernel serves this problem; falling back to the fp32 reference"}[name]
            return Decision(name, "rule", rule, considered)
    raise NotImplementedError(f"no backend can serve {p.describe()}: " +
                              "; ".join(f"{n}: {w}" for n, w in considered))
