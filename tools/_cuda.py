"""Libraries and backends for the probing tools: a CUDA library built with extra nvcc flags, a probe build,
or a prebuilt file, bound to its own `CudaBackend`; and launch-plan overrides.

A build variant is given as words: nvcc flags (on top of FMHA_NVCC_FLAGS, e.g. the feature flags
-DFMHA_DISABLE_PDL=1, -DFMHA_DISABLE_CLUSTER_MERGE=1, -DFMHA_DISABLE_ROW_BLOCK_PAIRS=1 or
-DFMHA_DISABLE_Q_TMA=1), at most one probe mode `probe:MODE` (a library of `fmha.cuda.loader.load_probe(MODE)`) and plan tokens `@...` (see force_plan).
"""
from __future__ import annotations

import ctypes
import inspect
import shlex
from dataclasses import dataclass, field
from unittest import mock

# The C API's configurations (enum FmhaConfig in fmha/cuda/csrc/fmha_capi.h), by the names plan tokens use.
CONFIGS = {"wide": 0, "deep": 1, "stream": 2, "pairs": 3, "seesaw": 4, "split_qk": 5, "latent_seesaw": 6,
           "latent_split_qk": 7, "latent_narrow": 8, "latent_seesaw64": 9, "wide_gather": 10,
           "latent_seesaw48": 11}
KV_HEAD_PAIRS = CONFIGS["pairs"]
CONFIG_NAMES = {v: k for k, v in CONFIGS.items()}
# The configurations that read K and V as one latent (the C API refuses them unless v_cache is k_cache's memory).
LATENT_CONFIGS = {CONFIGS[n] for n in ("latent_seesaw", "latent_split_qk", "latent_narrow", "latent_seesaw64",
                                        "latent_seesaw48")}

# Probe builds (fmha.cuda.loader.load_probe): mode -> whether its results are right.
PROBE_MODES = {
    "timestamps": True,    # clock stamps per CTA and ring position (tools/stream_probe.py reads them)
    "stream_only": False,  # consumers release each stage as soon as it lands: the K/V stream rate alone
    "no_combine": False,   # split partials (and balanced pieces) are not merged: the grid without its merge
}

_REQUIRED = ("fmha_decode", "fmha_config_tile_n", "fmha_last_error")


def declare(lib):
    """Declare the C API's argument and result types on a loaded library (fmha_capi.h). Entry points it
    lacks are left alone, except the required ones (an error: a library of an older C API)."""
    missing = [name for name in _REQUIRED if not hasattr(lib, name)]
    if missing:
        raise RuntimeError(f"library without {', '.join(missing)}: built from a C API older than this checkout's")
    vp, i32 = ctypes.c_void_p, ctypes.c_int
    types = {
        "fmha_last_error": ([], ctypes.c_char_p),
        "fmha_arch": ([], i32),
        "fmha_config_tile_n": ([i32, i32], i32),
        "fmha_config_ctas_per_sm": ([i32, i32], i32),
        "fmha_config_narrow_rows": ([i32, i32], i32),
        "fmha_cluster_merge": ([i32, i32, i32, i32, ctypes.c_longlong, i32], i32),
        "fmha_max_active_clusters": ([i32, i32, i32], i32),
        "fmha_row_block_pairs": ([i32, i32, i32, ctypes.c_longlong, ctypes.c_longlong], i32),
        "fmha_workspace_bytes": ([i32] * 5, ctypes.c_size_t),
        "fmha_paged_gather": ([i32, i32, ctypes.c_longlong, ctypes.c_longlong], i32),
        "fmha_balanced_workspace_bytes": ([i32] * 6, ctypes.c_size_t),
        "fmha_balanced_deals": ([i32] * 6 + [ctypes.c_longlong] * 2, i32),
        "fmha_decode": ([vp], i32),
        "fmha_probe_layout": ([ctypes.POINTER(i32)] * 3, i32),
        "fmha_probe_read": ([vp, ctypes.c_size_t, i32], i32),
    }
    for name, (args, res) in types.items():
        if hasattr(lib, name):
            fn = getattr(lib, name)
            fn.argtypes, fn.restype = args, res
    return lib


class _OlderLibrary:
    """A prebuilt library (e.g. an older commit's, same C API): optional entry points it lacks read as 0."""

    def __init__(self, lib):
        self._lib = lib

    def __getattr__(self, name):
        try:
            return getattr(self._lib, name)
        except AttributeError:
            if name in _REQUIRED:
                raise
            if name == "fmha_paged_gather":  # libraries before it gathered pages of no multiple of 8 tokens
                return lambda D, config, page_size, ctas: int(page_size % 8 != 0)
            if name in ("fmha_balanced_workspace_bytes", "fmha_balanced_deals"):  # the backend reads their absence
                raise AttributeError(name)

            def missing(*args):
                return 0
            return missing


@dataclass
class Variant:
    """A parsed variant spec: nvcc flags, a probe mode (or None), plan tokens."""
    flags: list = field(default_factory=list)
    probe: str | None = None
    plan: list = field(default_factory=list)

    @property
    def correct(self) -> bool:
        return self.probe is None or PROBE_MODES[self.probe]


def parse_variant(spec: str) -> Variant:
    v = Variant()
    for word in shlex.split(spec):
        if word.startswith("@"):
            v.plan.append(word)
        elif word.startswith("probe:"):
            mode = word.split(":", 1)[1]
            if mode not in PROBE_MODES or v.probe is not None:
                raise ValueError(f"{spec!r}: one probe:MODE, MODE one of {', '.join(PROBE_MODES)}")
            v.probe = mode
        elif word.startswith("-"):
            v.flags.append(word)
        else:
            raise ValueError(f"{spec!r}: {word!r} is neither an nvcc flag (-...), probe:MODE nor a plan token (@...)")
    check_plan_tokens(v.plan, spec)
    return v


def check_plan_tokens(tokens, spec: str):
    """ValueError naming `spec` for a token that is neither @<config> (a CONFIGS name, no value) nor @splits=N."""
    for token in tokens:
        name, eq, value = token[1:].partition("=")
        config = name in CONFIGS and not eq
        if not token.startswith("@") or not (config or (name == "splits" and value.isdigit() and int(value) >= 1)):
            raise ValueError(f"{spec!r}: plan token {token!r}: @<config> ({', '.join(CONFIGS)}) or @splits=N")


def build_library(flags=()):
    """The product library built with `flags` (on top of FMHA_NVCC_FLAGS; cached by flags), loaded."""
    from fmha.cuda import loader

    return declare(ctypes.CDLL(str(loader.build(extra_flags=list(flags)))))


def probe_library(mode: str, flags=()):
    """The probe build of `mode` (fmha.cuda.loader.load_probe), with extra nvcc flags where the loader takes them."""
    from fmha.cuda import loader

    if mode not in PROBE_MODES:
        raise ValueError(f"probe mode {mode!r}: one of {', '.join(PROBE_MODES)}")
    if not flags:
        return loader.load_probe(mode)
    if "extra_flags" in inspect.signature(loader.load_probe).parameters:
        return loader.load_probe(mode, extra_flags=tuple(flags))  # (lru_cache: hashable)
    raise ValueError(f"nvcc flags {list(flags)} with probe:{mode}: fmha.cuda.loader.load_probe takes no extra flags "
                     "here; give them in FMHA_NVCC_FLAGS instead (every build of the process then has them)")


def variant_library(v: Variant):
    return probe_library(v.probe, v.flags) if v.probe else build_library(v.flags)


def bound_backend(lib):
    """A CudaBackend bound to `lib`, a loaded library, instead of the one fmha builds."""
    from fmha.cuda import loader
    from fmha.cuda.backend import CudaBackend

    b = CudaBackend()
    with mock.patch.object(loader, "load", return_value=lib) as load:
        b._bind()
    if not load.called:  # it bound some other library: every figure would be the product's
        raise RuntimeError("CudaBackend._bind did not call fmha.cuda.loader.load: update tools/_cuda.py bound_backend")
    return b


def library_backend(path: str, plan=()):
    """A CudaBackend bound to a prebuilt library file (e.g. one built from an older commit of this C API), plan
    tokens (force_plan; a list, or one string of them) applied."""
    tokens = plan.split() if isinstance(plan, str) else list(plan)
    check_plan_tokens(tokens, path)
    lib = _OlderLibrary(declare(ctypes.CDLL(path)))
    b = bound_backend(lib)
    force_plan(b, lib, tokens)
    return b


def variant_backend(v: Variant):
    """(backend, library) of a variant, its plan tokens applied."""
    lib = variant_library(v)
    b = bound_backend(lib)
    force_plan(b, lib, v.plan)
    return b, lib


def serves(lib, config: int, p) -> bool:
    """Whether `config` can run problem p: its head dim has the configuration, a latent configuration has V in K's
    memory (p.kv_shared), and LATENT_NARROW at most its narrow rows."""
    if lib.fmha_config_tile_n(p.head_dim, config) <= 0:
        return False
    if config in LATENT_CONFIGS and not p.kv_shared:
        return False
    rows = p.seqlen_q * p.group_size
    return config != CONFIGS["latent_narrow"] or rows <= lib.fmha_config_narrow_rows(p.head_dim, config)


def force_plan(b, lib, tokens):
    """Override b.launch_plan by plan tokens: @<config> (a CONFIGS name) runs the problems it serves (`serves`)
    with it, the first such token in the order given (the plan's choice elsewhere; @pairs unsplit, D = 64 caches
    with their KV heads side by side), @splits=N with N KV splits (else the plan's count)."""
    plan = dict(w[1:].partition("=")[::2] for w in tokens)
    if not plan:
        return
    planned = b.launch_plan
    forced_configs = [CONFIGS[name] for name in plan if name in CONFIGS]

    def forced(p, index):
        config, splits = planned(p, index)
        for c in forced_configs:
            if serves(lib, c, p):
                if c == KV_HEAD_PAIRS:
                    return c, 1
                config = c
                break
        return config, int(plan.get("splits") or splits)

    b.launch_plan = forced  # type: ignore[method-assign]


def tile_bytes(lib, config: int, head_dim: int, elem_bytes: int = 2) -> int:
    """Bytes of one K tile plus one V tile of a configuration (KV-head pairs: two heads a row)."""
    row = (2 * head_dim if config == KV_HEAD_PAIRS else head_dim) * elem_bytes
    return 2 * row * lib.fmha_config_tile_n(head_dim, config)
