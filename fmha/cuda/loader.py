"""Build the CUDA sources with nvcc (once, cached) and load them with ctypes.

The sources are one translation unit per kernel instantiation (csrc/instantiations/),
compiled in parallel and linked into one shared library with a plain C API (fmha_capi.h).
Cache: `$FMHA_CACHE_DIR` or `~/.cache/fmha`, one file per (sources, arch, flags, nvcc
version): `libfmha_<arch>_<src-hash>_<nvcc-hash>.so`. A `filelock.FileLock` serialises
concurrent first uses; the library is built into a temporary file (its objects in a folder
beside it) and renamed into place atomically. Where nvcc is absent or cannot build, a
library of the same sources built by another nvcc is loaded instead (with a warning when
nvcc failed). Probe builds (timing stamps; tools/) are separate libraries, never the
product one.
"""
from __future__ import annotations

import contextlib
import ctypes
import functools
import hashlib
import shlex
import os
import shutil
import subprocess
import sys
import tempfile
import time
import warnings
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import Optional, Sequence

CSRC = Path(__file__).resolve().parent / "csrc"
DEFAULT_ARCH = "sm_90a"
# Architectures with a decode kernel. sm_100a's kernel is compiled and
# disassembled only: it has never run on a Blackwell GPU (docs/design-sm100.md).
KERNEL_ARCHS = ("sm_90a", "sm_100a")
# Compute capability -> the architecture the loader builds for a device of it.
CAPABILITY_ARCH = {(9, 0): "sm_90a", (10, 0): "sm_100a"}
# Hidden visibility: only the C API is exported, so that two builds loaded in one process (tools/variants.py)
# never share the function-local statics of their template instances (GNU unique symbols).
BASE_FLAGS = ("-O3", "-std=c++17", "-Xcompiler", "-fPIC", "-Xcompiler", "-fvisibility=hidden", "-lineinfo")
# Probe builds (csrc/common/probe.cuh): one translation unit with the timing probe compiled in, and a mode.
PROBE_MODES = {
    "timestamps": ("-DFMHA_PROBE=1",),                                 # correct results, clock stamps
    "stream_only": ("-DFMHA_PROBE=1", "-DFMHA_PROBE_STREAM_ONLY=1"),  # wrong by design: the K/V stream alone
    "no_combine": ("-DFMHA_PROBE=1", "-DFMHA_PROBE_NO_COMBINE=1"),    # wrong by design: partials unmerged
}


class CudaBuildError(RuntimeError):
    """nvcc is missing, or compiling / loading the CUDA kernels failed."""


def source_files() -> list:
    files = []
    for ext in ("*.cu", "*.cuh", "*.h", "*.inc"):
        files += CSRC.rglob(ext)
    return sorted(files)


def units(probe: Optional[str] = None, arch: str = DEFAULT_ARCH) -> list:
    """The translation units of a library for `arch`: the C API, the host helpers, the combine kernels and
    one unit per kernel instantiation of that arch (csrc/instantiations/, generated: sm90_* or sm100_*);
    a probe build (sm_90a only) is the one unit csrc/probe/unity.cu."""
    if probe is not None:
        return [CSRC / "probe" / "unity.cu"]
    _, sm = _arch_parts(arch)
    prefix = "sm100_" if sm == "sm_100a" else "sm90_"
    inst = CSRC / "instantiations"
    return [CSRC / "capi.cu", CSRC / "common" / "host.cu", inst / "combine.cu", *sorted(inst.glob(prefix + "*.cu"))]


def arch_for_capability(cap) -> Optional[str]:
    """The architecture built for a device of compute capability `cap` ((major, minor)), or None."""
    return CAPABILITY_ARCH.get(tuple(cap))


def cache_dir() -> Path:
    d = os.environ.get("FMHA_CACHE_DIR")
    # (absolute: a relative folder would be another cache, and another build, in each working directory)
    return Path(d).expanduser().absolute() if d else Path.home() / ".cache" / "fmha"


def find_nvcc() -> Optional[str]:
    """$FMHA_NVCC, $CUDA_HOME/bin/nvcc, $CUDA_PATH/bin/nvcc, nvcc on PATH, /usr/local/cuda/bin/nvcc; None when none
    is found. A FMHA_NVCC that is not an executable file is an error (CudaBuildError), not passed over."""
    chosen = os.environ.get("FMHA_NVCC")
    if chosen:
        if not (os.path.isfile(chosen) and os.access(chosen, os.X_OK)):
            raise CudaBuildError(f"fmha: FMHA_NVCC={chosen!r} is not an executable file; expected the path of an nvcc "
                                 "executable, e.g. /usr/local/cuda/bin/nvcc")
        return chosen
    named = _named_nvccs()
    for c in nvcc_candidates():
        if os.path.isfile(c) and os.access(c, os.X_OK):
            if named and c not in named.values():  # the variables named folders without bin/nvcc
                _warn_once(f"fmha: {', '.join(f'{v}={os.environ[v]}' for v in named)} has no executable bin/nvcc; "
                           f"using {c}")
            return c
    return None


def _named_nvccs() -> dict:
    """{variable: its bin/nvcc} for CUDA_HOME and CUDA_PATH where set."""
    return {v: os.path.join(os.environ[v], "bin", "nvcc") for v in ("CUDA_HOME", "CUDA_PATH") if os.environ.get(v)}


def nvcc_candidates() -> list:
    """Where find_nvcc looks, in order, after FMHA_NVCC."""
    return [*_named_nvccs().values(), shutil.which("nvcc") or "nvcc on PATH", "/usr/local/cuda/bin/nvcc"]


@functools.lru_cache(maxsize=None)
def _warn_once(message: str) -> None:
    warnings.warn(message, RuntimeWarning, stacklevel=3)


def nvcc_not_found() -> str:
    """What `nvcc not found` errors say: where it was looked for, and how to name it."""
    return (f"fmha: nvcc not found (looked at {', '.join(nvcc_candidates())}; set FMHA_NVCC or CUDA_HOME, or put "
            "nvcc on PATH)")


def find_cuobjdump() -> Optional[str]:
    """cuobjdump from the triton wheel (it ships one) or PATH; None when neither has it."""
    try:
        import triton

        p = Path(triton.__file__).resolve().parent / "backends" / "nvidia" / "bin" / "cuobjdump"
        if p.exists():
            return str(p)
    except Exception:
        pass
    return shutil.which("cuobjdump")


@functools.lru_cache(maxsize=8)
def nvcc_version(nvcc: str) -> str:
    try:
        r = subprocess.run([nvcc, "--version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError) as e:
        raise CudaBuildError(f"fmha: cannot run {nvcc} --version: {e}") from e
    if r.returncode != 0 or "release" not in r.stdout:
        raise CudaBuildError(f"fmha: {nvcc} --version failed (exit {r.returncode}): "
                             f"{(r.stderr or r.stdout).strip()[-500:] or 'no output'}")
    return r.stdout.strip()


def _arch_parts(arch: str):
    """('compute_90a', 'sm_90a') for 'sm_90a'; ValueError for something that is not an arch name."""
    a = str(arch).lower().removeprefix("sm_").removeprefix("compute_")
    if not a or not a[:-1 if a.endswith("a") else None].isdigit():
        raise ValueError(f"arch: expected something like 'sm_90a', got {arch!r}")
    return f"compute_{a}", f"sm_{a}"


def check_arch(arch: str) -> str:
    """The sm_ name of `arch` when this package has a kernel for it; else CudaBuildError saying so."""
    try:
        _, sm = _arch_parts(arch)
    except ValueError as e:
        raise CudaBuildError(f"fmha: {e}") from None
    if sm not in KERNEL_ARCHS:
        hint = " (sm_90a: wgmma needs the architecture-specific target)" if sm == "sm_90" else ""
        raise CudaBuildError(f"fmha: no CUDA kernel for {sm} in this version; kernels exist for "
                             f"{', '.join(KERNEL_ARCHS)}{hint}")
    return sm


def user_flags() -> list:
    """Extra nvcc flags from FMHA_NVCC_FLAGS (e.g. -DFMHA_DISABLE_PDL=1); part of the cache key."""
    try:
        return shlex.split(os.environ.get("FMHA_NVCC_FLAGS", ""))
    except ValueError as e:
        raise CudaBuildError(f"fmha: FMHA_NVCC_FLAGS={os.environ['FMHA_NVCC_FLAGS']!r} does not split into flags "
                             f"as a shell would: {e}") from None


# Variables nvcc itself reads, which change what a build produces: part of the cache key.
NVCC_ENV = ("NVCC_PREPEND_FLAGS", "NVCC_APPEND_FLAGS", "NVCC_CCBIN")


def compile_command(nvcc: str, arch: str, unit: Path, output: str, extra_flags: Sequence[str] = ()) -> list:
    compute, sm = _arch_parts(arch)
    target = "100" if sm == "sm_100a" else "90"  # capi.cu's choice of kernels (FMHA_TARGET_SM)
    return [nvcc, *BASE_FLAGS, f"-gencode=arch={compute},code={sm}", f"-DFMHA_TARGET_SM={target}", *extra_flags,
            *user_flags(), "-c", "-o", output, str(unit)]


# FMHA_NVCC_FLAGS that the link step needs too: the host compiler (the usual fix for a g++ too new for nvcc) and
# the linker's own flags; (flag, takes the next argument).
LINK_FLAGS = (("-ccbin", True), ("--compiler-bindir", True), ("-Xlinker", True), ("--linker-options", True),
              ("-L", False), ("-l", False))


def link_flags(flags: Sequence[str]) -> list:
    """The flags of `flags` (FMHA_NVCC_FLAGS split) that link_command passes on (LINK_FLAGS)."""
    out, take_next = [], False
    for f in flags:
        if take_next:
            out.append(f)
            take_next = False
            continue
        for name, with_value in LINK_FLAGS:
            if f == name:
                out.append(f)
                take_next = with_value
                break
            if f.startswith(name + "=") or (not with_value and f.startswith(name) and len(f) > len(name)
                                            and f != "-lineinfo"):  # (a compile option, not -l ineinfo)
                out.append(f)
                break
    return out


def link_command(nvcc: str, objects: Sequence[str], output: str) -> list:
    return [nvcc, "--shared", *link_flags(user_flags()), "-o", output, *objects]


def source_hash(arch: str, extra_flags: Sequence[str] = (), probe: Optional[str] = None) -> str:
    """The cache key of a build: the arch (however it is spelt), every flag (as separate arguments), the
    variables nvcc reads, the build's recipe (its translation units and link command) and every source file."""
    h = hashlib.sha256()
    recipe = ([str(u.relative_to(CSRC)) for u in units(probe, arch)], link_command("nvcc", [], "out")[1:])
    h.update(repr((_arch_parts(arch)[1], BASE_FLAGS, tuple(extra_flags), user_flags(),
                   [os.environ.get(v, "") for v in NVCC_ENV], recipe)).encode())
    for f in source_files():
        h.update(str(f.relative_to(CSRC)).encode())
        h.update(f.read_bytes())
    return h.hexdigest()[:16]


def _library_name(sm: str, probe: Optional[str]) -> str:
    return f"libfmha_{sm}" if probe is None else f"libfmha_probe_{probe}_{sm}"


def library_path(arch: str = DEFAULT_ARCH, out_dir: Optional[Path] = None, nvcc: Optional[str] = None,
                 extra_flags: Sequence[str] = (), probe: Optional[str] = None) -> Path:
    nvcc = nvcc or find_nvcc()
    if nvcc is None:
        raise CudaBuildError(nvcc_not_found())
    vh = hashlib.sha256(nvcc_version(nvcc).encode()).hexdigest()[:8]
    _, sm = _arch_parts(arch)
    flags = (*PROBE_MODES[probe], *extra_flags) if probe is not None else tuple(extra_flags)
    return Path(out_dir or cache_dir()) / f"{_library_name(sm, probe)}_{source_hash(arch, flags, probe)}_{vh}.so"


def prebuilt_library(arch: str = DEFAULT_ARCH, out_dir: Optional[Path] = None) -> Optional[Path]:
    """A cached library built from exactly these sources, by any nvcc (used when nvcc is absent)."""
    _, sm = _arch_parts(arch)
    # (Path.glob: the folder's own name is no pattern, whatever characters it holds)
    hits = list(Path(out_dir or cache_dir()).glob(f"libfmha_{sm}_{source_hash(arch)}_*.so"))
    return max(hits, key=os.path.getmtime) if hits else None


def compile_library(nvcc: str, arch: str, output: str, extra_flags: Sequence[str] = (),
                    probe: Optional[str] = None, jobs: Optional[int] = None) -> str:
    """Compile every unit in parallel (`jobs` at once: the CPU count by default) and link them into
    `output`; return nvcc's messages (ptxas -v output with -Xptxas -v). CudaBuildError on failure. The
    objects go to a folder `<output>.*.build` beside `output`, removed afterwards (build() removes one that a
    killed build left); each nvcc call may run `build_timeout()` seconds, and the first failure stops the rest."""
    if probe is not None and probe not in PROBE_MODES:
        raise CudaBuildError(f"fmha: probe mode {probe!r} unknown (one of {', '.join(PROBE_MODES)})")
    flags = (*PROBE_MODES[probe], *extra_flags) if probe is not None else tuple(extra_flags)
    srcs = units(probe, arch)
    timeout = build_timeout()
    out = Path(output)
    try:
        workdir = tempfile.TemporaryDirectory(prefix=out.name + ".", suffix=".build", dir=str(out.parent))
    except OSError as e:
        raise CudaBuildError(f"fmha: cannot create a build folder in {out.parent}: {e}") from e
    with _terminate_unwinds(), workdir as tmp, _Compiles(nvcc, timeout, tmp) as compiles:
        objects = [os.path.join(tmp, f"{i:02d}_{u.stem}.o") for i, u in enumerate(srcs)]
        cmds = [compile_command(nvcc, arch, u, o, flags) for u, o in zip(srcs, objects)]
        with ThreadPoolExecutor(max_workers=jobs or build_jobs()) as pool:
            futures = {}
            try:
                for cmd in cmds:
                    futures[pool.submit(compiles.run, cmd)] = cmd
                for done in as_completed(futures):
                    r = done.result()
                    if r.returncode != 0 and not getattr(r, "stopped", False):  # (the failure, not its victims)
                        tail = (r.stderr or r.stdout or "")[-4000:]
                        raise CudaBuildError(f"fmha: nvcc failed (exit {r.returncode}) building the CUDA kernels."
                                             f"\ncommand: {' '.join(futures[done])}\n{tail}")
            except BaseException:  # the queued units are dropped and the running ones killed
                for f in futures:
                    f.cancel()
                compiles.stop()
                raise
            results = [f.result() for f in futures]
        log = "".join(r.stdout + r.stderr for r in results)
        r = compiles.run(link_command(nvcc, objects, output))
        if r.returncode != 0:
            raise CudaBuildError(f"fmha: linking the CUDA kernels failed (exit {r.returncode}).\n"
                                 f"{(r.stderr or r.stdout or '')[-4000:]}")
        return log + r.stdout + r.stderr


@contextlib.contextmanager
def _terminate_unwinds():
    """SIGTERM raises SystemExit(143) in the main thread while this is entered, so that the build's way out kills
    its nvcc process groups (the signal's default action ends Python and leaves them running). Only where the
    main thread builds and SIGTERM has its default action."""
    import signal
    import threading
    if (threading.current_thread() is not threading.main_thread()
            or signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL):
        yield
        return

    def terminate(signum, frame):
        raise SystemExit(128 + signum)
    signal.signal(signal.SIGTERM, terminate)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


@contextlib.contextmanager
def _signals_held():
    """On the main thread, SIGINT and SIGTERM, where their handlers are Python callables (KeyboardInterrupt's,
    _terminate_unwinds'), are held while this is entered and the first one's handler runs at its end (a later one is
    dropped), so that an nvcc started inside it is registered, and so killed on the way out, before Ctrl-C or a stop
    can unwind past it. Other threads run no Python handlers."""
    import signal
    import threading
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held, previous, holding = [], {}, True

    def hold(signum, frame):
        if holding:
            held.append((signum, frame))
        else:  # (one that lands while the handlers are put back)
            previous[signum](signum, frame)
    try:
        for signum in (signal.SIGINT, signal.SIGTERM):
            handler = signal.getsignal(signum)
            if callable(handler):
                previous[signum] = handler  # (kept before the swap, which a signal landing in it may unwind)
                signal.signal(signum, hold)
        yield
    finally:
        holding = False
        try:
            for signum, handler in previous.items():
                signal.signal(signum, handler)
        finally:
            for signum, frame in held[:1]:
                previous[signum](signum, frame)


class _Compiles:
    """The nvcc processes of one build. Each leads a process group of its own, so that killing it also kills the
    cicc and ptxas it started, with TMPDIR in the build folder, so that a killed build's intermediates go with
    it. The first call that fails, runs past `timeout` seconds (CudaBuildError naming FMHA_BUILD_TIMEOUT) or is
    interrupted kills the others and keeps queued ones from starting; stop() kills them all."""

    def __init__(self, nvcc: str, timeout: Optional[float], tmpdir: str):
        import threading
        self.nvcc, self.timeout = nvcc, timeout
        self.env = {**os.environ, "TMPDIR": tmpdir}
        self.running: set = set()
        self.stopped = False
        self.guard = threading.Lock()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()
        for proc in list(self.running):  # (one whose run() unwound before it waited: reaped, its pipes closed)
            proc.communicate()

    def run(self, cmd) -> subprocess.CompletedProcess:
        with _signals_held(), self.guard:  # (a Ctrl-C between the start and the registration would leave nvcc running)
            if self.stopped:
                return self._stopped(cmd)
            try:
                proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                        env=self.env, start_new_session=True)
            except OSError as e:
                raise CudaBuildError(f"fmha: cannot run nvcc ({self.nvcc}): {e}") from e
            self.running.add(proc)
        try:
            stdout, stderr = proc.communicate(timeout=self.timeout)
        except BaseException as e:
            self.stop()
            proc.communicate()
            if isinstance(e, subprocess.TimeoutExpired):
                raise CudaBuildError(f"fmha: nvcc ran past FMHA_BUILD_TIMEOUT={self.timeout:g} s and was stopped "
                                     f"(0: no limit).\ncommand: {' '.join(cmd)}") from None
            raise
        finally:
            with self.guard:
                self.running.discard(proc)
                killed = self.stopped and proc.returncode < 0
        if killed:
            return self._stopped(cmd)
        if proc.returncode != 0:
            self.stop()
        return subprocess.CompletedProcess(cmd, proc.returncode, stdout, stderr)

    @staticmethod
    def _stopped(cmd) -> subprocess.CompletedProcess:
        r = subprocess.CompletedProcess(cmd, -1, "", "stopped: another unit failed")
        r.stopped = True
        return r

    def stop(self) -> None:
        import signal
        with self.guard:
            self.stopped = True
            for proc in self.running:
                if proc.poll() is None:  # (once reaped, its group id may be another process's)
                    try:
                        os.killpg(proc.pid, signal.SIGKILL)
                    except (ProcessLookupError, PermissionError):
                        pass


def build_timeout() -> Optional[float]:
    """Seconds one nvcc call may run: FMHA_BUILD_TIMEOUT (0: no limit), else 900, ample where the longest unit
    (the probe build's one) compiles in about a minute on two cores."""
    value = os.environ.get("FMHA_BUILD_TIMEOUT", "")
    if not value:
        return 900.0
    try:
        seconds = float(value)
    except ValueError:
        seconds = -1.0
    if not 0 <= seconds <= 86400:  # (NaN fails too; a wait of 2^31 ms or more overflows)
        raise CudaBuildError(f"fmha: FMHA_BUILD_TIMEOUT={value!r}: expected seconds in [0, 86400] (0: no limit)")
    return seconds or None


def build_jobs() -> int:
    """Units compiled at once: FMHA_BUILD_JOBS, else the CPUs this process may run on."""
    value = os.environ.get("FMHA_BUILD_JOBS", "")
    if value:
        if not value.isdigit() or int(value) < 1:
            raise CudaBuildError(f"fmha: FMHA_BUILD_JOBS={value!r}: expected a positive integer")
        return int(value)
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # (not Linux)
        return max(1, os.cpu_count() or 1)


def build(arch: str = DEFAULT_ARCH, out_dir: Optional[Path] = None, extra_flags: Sequence[str] = (),
          force: bool = False, quiet: bool = False, probe: Optional[str] = None) -> Path:
    """Compile the CUDA sources for `arch` (no GPU needed); return the library path. `probe`: a mode of
    PROBE_MODES for a probe build (never loaded by the backend)."""
    sm = check_arch(arch)
    nvcc = find_nvcc()
    if nvcc is None:
        raise CudaBuildError(f"{nvcc_not_found()}; "
                             "it is needed once to build the CUDA kernels")
    if probe is not None and probe not in PROBE_MODES:
        raise CudaBuildError(f"fmha: probe mode {probe!r} unknown (one of {', '.join(PROBE_MODES)})")
    if probe is not None and sm != "sm_90a":
        raise CudaBuildError(f"fmha: probe builds exist for sm_90a only, not {sm}")
    lib = library_path(arch, out_dir, nvcc, extra_flags, probe)
    if lib.exists() and not force and not truncated(lib):
        return lib
    build_timeout(), build_jobs()  # (a bad value is named before any wait for the lock)
    try:
        lock = _acquire_build_lock(lib, quiet)
        try:
            if lib.exists() and not force and not truncated(lib):
                return lib  # another process built it while we waited
            for stale in lib.parent.glob(lib.name + ".*.tmp"):  # a killed build's (only the lock's holder writes one)
                stale.unlink(missing_ok=True)
            for stale in lib.parent.glob(lib.name + ".*.build"):  # its objects' folder, likewise
                shutil.rmtree(stale, ignore_errors=True)
            fd, tmp = tempfile.mkstemp(prefix=lib.name + ".", suffix=".tmp", dir=str(lib.parent))
            os.close(fd)
            what = f"the {probe} probe build" if probe else "CUDA kernels"
            if not quiet:
                print(f"fmha: building {what} for {sm} (one time)...", end="", file=sys.stderr, flush=True)
            t0 = time.perf_counter()
            try:
                compile_library(nvcc, arch, tmp, extra_flags, probe)
                os.chmod(tmp, 0o755 & ~_umask())  # (mkstemp's file is the owner's alone; others share the cache)
                with open(tmp, "rb+") as f:  # on disk before it takes the name (a crash must not leave it cut short)
                    os.fsync(f.fileno())
                os.replace(tmp, lib)
            except BaseException:
                if os.path.exists(tmp):
                    os.unlink(tmp)
                if not quiet:
                    print(" failed", file=sys.stderr)
                raise
            if not quiet:
                print(f" done in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
        finally:
            lock.release()
    except OSError as e:  # the folder: missing rights, read-only, a file in the way
        hint = "" if out_dir else "; FMHA_CACHE_DIR names another folder"
        raise CudaBuildError(f"fmha: cannot build into {lib.parent}: {e}{hint}") from e
    return lib


def _acquire_build_lock(lib: Path, quiet: bool):
    """The file lock that serialises builds of `lib` across processes, held; says so when it has to wait."""
    from filelock import FileLock, Timeout

    lib.parent.mkdir(parents=True, exist_ok=True)
    lock = FileLock(str(lib) + ".lock", mode=0o666 & ~_umask())  # (as shareable as the library itself)
    try:
        lock.acquire(timeout=0)
    except Timeout:
        if not quiet:
            print(f"fmha: waiting for another build of {lib.name} (holding {lock.lock_file})...", file=sys.stderr,
                  flush=True)
        lock.acquire()
    return lock


def _umask() -> int:
    """The process's umask, without changing it where Linux reports it."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _declare(lib: ctypes.CDLL) -> ctypes.CDLL:
    """Argument and result types of the C API (fmha_capi.h); the probe functions where the library has them."""
    vp, i32 = ctypes.c_void_p, ctypes.c_int
    lib.fmha_arch.argtypes = []
    lib.fmha_arch.restype = i32
    lib.fmha_decode.argtypes = [vp]
    lib.fmha_decode.restype = i32
    lib.fmha_workspace_bytes.argtypes = [i32, i32, i32, i32, i32]
    lib.fmha_workspace_bytes.restype = ctypes.c_size_t
    if hasattr(lib, "fmha_balanced_workspace_bytes"):  # (a library older than the balanced schedule: tools/ A/B)
        lib.fmha_balanced_workspace_bytes.argtypes = [i32, i32, i32, i32, i32, i32]
        lib.fmha_balanced_workspace_bytes.restype = ctypes.c_size_t
    if hasattr(lib, "fmha_balanced_deals"):  # (likewise)
        lib.fmha_balanced_deals.argtypes = [i32, i32, i32, i32, i32, i32, ctypes.c_longlong, ctypes.c_longlong]
        lib.fmha_balanced_deals.restype = i32
    if hasattr(lib, "fmha_half_partials"):  # (a library older than the query: tools/ A/B)
        lib.fmha_half_partials.argtypes = [i32, i32, i32]
        lib.fmha_half_partials.restype = i32
    for name in ("fmha_config_tile_n", "fmha_config_ctas_per_sm", "fmha_config_narrow_rows"):
        getattr(lib, name).argtypes = [i32, i32]
        getattr(lib, name).restype = i32
    lib.fmha_paged_gather.argtypes = [i32, i32, ctypes.c_longlong, ctypes.c_longlong]
    lib.fmha_paged_gather.restype = i32
    lib.fmha_cluster_merge.argtypes = [i32, i32, i32, i32, ctypes.c_longlong, i32]
    lib.fmha_cluster_merge.restype = i32
    lib.fmha_max_active_clusters.argtypes = [i32, i32, i32]
    lib.fmha_max_active_clusters.restype = i32
    lib.fmha_row_block_pairs.argtypes = [i32, i32, i32, ctypes.c_longlong, ctypes.c_longlong]
    lib.fmha_row_block_pairs.restype = i32
    lib.fmha_last_error.argtypes = []
    lib.fmha_last_error.restype = ctypes.c_char_p
    if hasattr(lib, "fmha_probe_layout"):  # probe builds only
        lib.fmha_probe_layout.argtypes = [ctypes.POINTER(i32)] * 3
        lib.fmha_probe_layout.restype = i32
        lib.fmha_probe_read.argtypes = [vp, ctypes.c_size_t, i32]
        lib.fmha_probe_read.restype = i32
    return lib


@functools.lru_cache(maxsize=4)
def load(arch: str = DEFAULT_ARCH) -> ctypes.CDLL:
    """Build if needed (or reuse a cached build of these sources when nvcc is absent, or cannot build) and load the
    library."""
    check_arch(arch)
    if find_nvcc() is not None:
        try:
            path = build(arch)
        except CudaBuildError as e:
            # A library built from these sources by another nvcc (an image built ahead of time, a read-only
            # cache) serves where this nvcc cannot build one.
            path = prebuilt_library(arch)
            if path is None:
                raise
            warnings.warn(f"{str(e).splitlines()[0]}; loading {path}, built from the same sources by another nvcc",
                          RuntimeWarning, stacklevel=2)
    else:
        path = prebuilt_library(arch)
        if path is None:
            raise CudaBuildError(f"{nvcc_not_found()}, and no prebuilt CUDA library for these sources in "
                                 f"{cache_dir()} (run `python -m fmha.cuda.build --arch {check_arch(arch)}` where "
                                 "nvcc exists)")
    return _open(path)


def _open(path: Path) -> ctypes.CDLL:
    """dlopen `path` once it looks whole (a cut-short file would crash the process with SIGBUS inside dlopen)."""
    cut = truncated(path)
    if cut:
        raise CudaBuildError(f"fmha: {path} is cut short ({cut}); delete it, or rebuild it with "
                             "`python -m fmha.cuda.build --force`")
    try:
        return _declare(ctypes.CDLL(str(path)))
    except OSError as e:
        raise CudaBuildError(f"fmha: cannot load {path}: {e}") from e
    except AttributeError as e:  # a library of other sources under this name
        raise CudaBuildError(f"fmha: {path} lacks the fmha C API ({e}); delete it") from e


def truncated(path: Path) -> Optional[str]:
    """Why the ELF64 file at `path` cannot be whole, or None: its header, or its section header table (which the
    linker puts at the end) lies past the file's end, or that table's string-table entry is not one (a file cut
    short and filled back to its size with zeros, which dlopen may crash on)."""
    try:
        size = os.path.getsize(path)
        with open(path, "rb") as f:
            head = f.read(64)
            if len(head) < 64 or head[:4] != b"\x7fELF" or head[4] != 2:
                return f"{size} bytes, not an ELF64 file"
            order = "little" if head[5] == 1 else "big"
            shoff = int.from_bytes(head[0x28:0x30], order)
            shentsize, shnum, shstrndx = (int.from_bytes(head[o:o + 2], order) for o in (0x3A, 0x3C, 0x3E))
            end = shoff + shentsize * shnum
            if end > size:
                return f"{size} bytes where its section headers end at {end}"
            if shnum and shentsize >= 8 and shstrndx < shnum:
                f.seek(shoff + shstrndx * shentsize + 4)
                if int.from_bytes(f.read(4), order) != 3:  # SHT_STRTAB
                    return f"{size} bytes whose section header {shstrndx} (the section names) is not a string table"
    except OSError as e:
        return str(e)
    return None


@functools.lru_cache(maxsize=8)
def load_probe(mode: str = "timestamps", arch: str = DEFAULT_ARCH, extra_flags: tuple = ()) -> ctypes.CDLL:
    """Build if needed and load a probe library (PROBE_MODES; for tools/, never for the backend): the
    product API plus fmha_probe_layout / fmha_probe_read. Needs nvcc."""
    return _open(build(arch, extra_flags=extra_flags, probe=mode))


def buildable(arch: str = DEFAULT_ARCH) -> Optional[str]:
    """None when `load` can succeed without surprises (nvcc present or a prebuilt library), else why not."""
    try:  # (either may raise on bad settings: FMHA_NVCC, FMHA_NVCC_FLAGS, which key the prebuilt library)
        if find_nvcc() is not None or prebuilt_library(arch) is not None:
            return None
    except CudaBuildError as e:
        return str(e).removeprefix("fmha: ")
    return (f"{nvcc_not_found().removeprefix('fmha: ')}, and no prebuilt library in {cache_dir()}; run "
            f"`python -m fmha.cuda.build --arch {check_arch(arch)}` where nvcc exists")
