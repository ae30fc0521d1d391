"""Build the CUDA sources with nvcc (once, cached) and load them with ctypes.

Cache: `$FMHA_CACHE_DIR` or `~/.cache/fmha`, one file per
(sources, arch, flags, nvcc version): `libfmha_<arch>_<src-hash>_<nvcc-hash>.so`.
A `filelock.FileLock` serialises concurrent first uses; the library is built
into a temporary file and renamed into place atomically.
"""
from __future__ import annotations

import ctypes
import functools
import glob
import hashlib
import shlex
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional, Sequence

CSRC = Path(__file__).resolve().parent / "csrc"
MAIN_SOURCE = CSRC / "capi.cu"
DEFAULT_ARCH = "sm_90a"
BASE_FLAGS = ("-O3", "-std=c++17", "--shared", "-Xcompiler", "-fPIC", "-lineinfo")


class CudaBuildError(RuntimeError):
    """nvcc is missing, or compiling / loading the CUDA kernels failed."""


def source_files() -> list:
    files = []
    for ext in ("*.cu", "*.cuh", "*.h"):
        files += CSRC.rglob(ext)
    return sorted(files)


def cache_dir() -> Path:
    d = os.environ.get("FMHA_CACHE_DIR")
    return Path(d).expanduser() if d else Path.home() / ".cache" / "fmha"


def find_nvcc() -> Optional[str]:
    """$FMHA_NVCC, $CUDA_HOME/bin/nvcc, $CUDA_PATH/bin/nvcc, nvcc on PATH, /usr/local/cuda/bin/nvcc."""
    cands = [os.environ.get("FMHA_NVCC")]
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(var):
            cands.append(os.path.join(os.environ[var], "bin", "nvcc"))
    cands += [shutil.which("nvcc"), "/usr/local/cuda/bin/nvcc"]
    for c in cands:
        if c and os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    return None


@functools.lru_cache(maxsize=8)
def nvcc_version(nvcc: str) -> str:
    try:
        r = subprocess.run([nvcc, "--version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError) as e:
        raise CudaBuildError(f"fmha: cannot run {nvcc} --version: {e}") from e
    return r.stdout.strip()


def _arch_parts(arch: str):
    a = arch.lower().removeprefix("sm_").removeprefix("compute_")
    if not a or not a[:-1 if a.endswith("a") else None].isdigit():
        raise ValueError(f"arch: expected something like 'sm_90a', got {arch!r}")
    return f"compute_{a}", f"sm_{a}"


def user_flags() -> list:
    """Extra nvcc flags from FMHA_NVCC_FLAGS (e.g. the -DFMHA_SM90_* tuning knobs); part of the cache key."""
    return shlex.split(os.environ.get("FMHA_NVCC_FLAGS", ""))


def nvcc_command(nvcc: str, arch: str, output: str, extra_flags: Sequence[str] = ()) -> list:
    compute, sm = _arch_parts(arch)
    return [nvcc, *BASE_FLAGS, f"-gencode=arch={compute},code={sm}", *extra_flags, *user_flags(), "-o", output,
            str(MAIN_SOURCE)]


def source_hash(arch: str, extra_flags: Sequence[str] = ()) -> str:
    h = hashlib.sha256()
    h.update(f"{arch}|{' '.join(BASE_FLAGS)}|{' '.join(extra_flags)}|{' '.join(user_flags())}".encode())
    for f in source_files():
        h.update(str(f.relative_to(CSRC)).encode())
        h.update(f.read_bytes())
    return h.hexdigest()[:16]


def library_path(arch: str = DEFAULT_ARCH, out_dir: Optional[Path] = None, nvcc: Optional[str] = None,
                 extra_flags: Sequence[str] = ()) -> Path:
    nvcc = nvcc or find_nvcc()
    if nvcc is None:
        raise CudaBuildError("fmha: nvcc not found (set CUDA_HOME or FMHA_NVCC, or put nvcc on PATH)")
    vh = hashlib.sha256(nvcc_version(nvcc).encode()).hexdigest()[:8]
    _, sm = _arch_parts(arch)
    return Path(out_dir or cache_dir()) / f"libfmha_{sm}_{source_hash(arch, extra_flags)}_{vh}.so"


def prebuilt_library(arch: str = DEFAULT_ARCH, out_dir: Optional[Path] = None) -> Optional[Path]:
    """A cached library built from exactly these sources, by any nvcc (used when nvcc is absent)."""
    _, sm = _arch_parts(arch)
    hits = glob.glob(str(Path(out_dir or cache_dir()) / f"libfmha_{sm}_{source_hash(arch)}_*.so"))
    return Path(max(hits, key=os.path.getmtime)) if hits else None


def build(arch: str = DEFAULT_ARCH, out_dir: Optional[Path] = None, extra_flags: Sequence[str] = (),
          force: bool = False, quiet: bool = False) -> Path:
    """Compile the CUDA sources for `arch` (no GPU needed); return the library path."""
    nvcc = find_nvcc()
    if nvcc is None:
        raise CudaBuildError("fmha: nvcc not found (set CUDA_HOME or FMHA_NVCC, or put nvcc on PATH); "
                             "it is needed once to build the CUDA kernels")
    lib = library_path(arch, out_dir, nvcc, extra_flags)
    if lib.exists() and not force:
        return lib
    lib.parent.mkdir(parents=True, exist_ok=True)
    from filelock import FileLock

    with FileLock(str(lib) + ".lock"):
        if lib.exists() and not force:
            return lib  # another process built it while we waited
        fd, tmp = tempfile.mkstemp(prefix=lib.name + ".", suffix=".tmp", dir=str(lib.parent))
        os.close(fd)
        cmd = nvcc_command(nvcc, arch, tmp, extra_flags)
        if not quiet:
            print(f"fmha: building CUDA kernels for {_arch_parts(arch)[1]} (one time)...", end="",
                  file=sys.stderr, flush=True)
        t0 = time.perf_counter()
        try:
            r = subprocess.run(cmd, capture_output=True, text=True)
        except OSError as e:
            os.unlink(tmp)
            raise CudaBuildError(f"fmha: cannot run nvcc ({nvcc}): {e}") from e
        if r.returncode != 0:
            if os.path.exists(tmp):
                os.unlink(tmp)
            if not quiet:
                print(" failed", file=sys.stderr)
            tail = (r.stderr or r.stdout or "")[-4000:]
            raise CudaBuildError(f"fmha: nvcc failed (exit {r.returncode}) building the CUDA kernels.\n"
                                 f"command: {' '.join(cmd)}\n{tail}")
        os.replace(tmp, lib)
        if not quiet:
            print(f" done in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    return lib


def _declare(lib: ctypes.CDLL) -> ctypes.CDLL:
    vp, i32, i64 = ctypes.c_void_p, ctypes.c_int, ctypes.c_int64
    lib.fmha_sm90_decode.argtypes = ([vp] * 6 + [i32] * 7 + [i64] * 12 +
                                     [ctypes.c_float, i32, i32, i32, vp, ctypes.c_size_t, vp])
    lib.fmha_sm90_decode.restype = i32
    lib.fmha_sm90_decode_packed.argtypes = [vp]
    lib.fmha_sm90_decode_packed.restype = i32
    lib.fmha_sm90_workspace_bytes.argtypes = [i32, i32, i32, i32, i32]
    lib.fmha_sm90_workspace_bytes.restype = ctypes.c_size_t
    lib.fmha_sm90_tile_n.argtypes = [i32, i32]
    lib.fmha_sm90_tile_n.restype = i32
    lib.fmha_sm90_ctas_per_sm.argtypes = [i32, i32]
    lib.fmha_sm90_ctas_per_sm.restype = i32
    lib.fmha_sm90_narrow_rows.argtypes = [i32, i32]
    lib.fmha_sm90_narrow_rows.restype = i32
    lib.fmha_sm90_cluster_merge.argtypes = [i32, i32, i32, i32, ctypes.c_longlong, i32]
    lib.fmha_sm90_cluster_merge.restype = i32
    lib.fmha_sm90_max_active_clusters.argtypes = [i32, i32, i32]
    lib.fmha_sm90_max_active_clusters.restype = i32
    lib.fmha_sm90_probe_layout.argtypes = [ctypes.POINTER(i32)] * 3
    lib.fmha_sm90_probe_layout.restype = i32
    lib.fmha_sm90_probe_read.argtypes = [vp, ctypes.c_size_t, i32]
    lib.fmha_sm90_probe_read.restype = i32
    lib.fmha_last_error.argtypes = []
    lib.fmha_last_error.restype = ctypes.c_char_p
    return lib


@functools.lru_cache(maxsize=4)
def load(arch: str = DEFAULT_ARCH) -> ctypes.CDLL:
    """Build if needed (or reuse a cached build when nvcc is absent) and load the library."""
    if find_nvcc() is not None:
        path = build(arch)
    else:
        path = prebuilt_library(arch)
        if path is None:
            raise CudaBuildError("fmha: nvcc not found and no prebuilt CUDA library for these sources in "
                                 f"{cache_dir()} (set CUDA_HOME / FMHA_NVCC, or run "
                                 "`python -m fmha.cuda.build --arch sm_90a` where nvcc exists)")
    try:
        return _declare(ctypes.CDLL(str(path)))
    except OSError as e:
        raise CudaBuildError(f"fmha: cannot load {path}: {e}") from e


def buildable(arch: str = DEFAULT_ARCH) -> Optional[str]:
    """None when `load` can succeed without surprises (nvcc present or a prebuilt library), else why not."""
    if find_nvcc() is not None:
        return None
    if prebuilt_library(arch) is not None:
        return None
    return ("nvcc not found (set CUDA_HOME or FMHA_NVCC) and no prebuilt library in "
            f"{cache_dir()}; run `python -m fmha.cuda.build --arch sm_90a` where nvcc exists")
