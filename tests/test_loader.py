"""The CUDA library's loader on a machine without a GPU, with a stand-in nvcc: the errors that name what is
missing or wrong (FMHA_NVCC, a broken nvcc, a cache folder it cannot write), the file mode of a cached
library, and the message of a process that waits for another one's build."""
from __future__ import annotations

import _ctypes
import os
import shutil
import stat
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch

from fmha.cuda import loader

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="a shell-script nvcc")
# A whole shared object, for the libraries a stand-in nvcc links (_ctypes may be built into the interpreter).
ELF = getattr(_ctypes, "__file__", None) or str(Path(torch.__file__).parent / "lib" / "libtorch_global_deps.so")


@pytest.fixture
def fake_nvcc(tmp_path, monkeypatch):
    """An nvcc that says it is release 13.0 and writes a placeholder for every -o it is given (a whole shared
    object where it links)."""
    nvcc = tmp_path / "bin" / "nvcc"
    nvcc.parent.mkdir()
    nvcc.write_text(textwrap.dedent(f"""\
        #!/bin/sh
        if [ "$1" = "--version" ]; then echo "Cuda compilation tools, release 13.0, V13.0.0"; exit 0; fi
        shared=0
        while [ $# -gt 0 ]; do
          if [ "$1" = "--shared" ]; then shared=1; fi
          if [ "$1" = "-o" ]; then
            if [ $shared = 1 ]; then cp "{ELF}" "$2"; else echo placeholder > "$2"; fi
          fi
          shift
        done
        """))
    nvcc.chmod(0o755)
    monkeypatch.setenv("FMHA_NVCC", str(nvcc))
    loader.nvcc_version.cache_clear()
    yield str(nvcc)
    loader.nvcc_version.cache_clear()


def test_fmha_nvcc_that_is_not_executable_is_an_error(tmp_path, monkeypatch):
    monkeypatch.setenv("FMHA_NVCC", str(tmp_path / "missing" / "nvcc"))
    with pytest.raises(loader.CudaBuildError, match=r"FMHA_NVCC='.*missing/nvcc' is not an executable file; "
                                                    r"expected the path of an nvcc executable"):
        loader.find_nvcc()
    assert "is not an executable file" in loader.buildable("sm_90a")
    with pytest.raises(loader.CudaBuildError, match="FMHA_NVCC="):
        loader.build("sm_90a", out_dir=tmp_path / "out", quiet=True)


def test_a_relative_cache_dir_is_taken_from_where_it_was_read(tmp_path, monkeypatch):
    """A relative FMHA_CACHE_DIR names one folder, not another under each working directory."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("FMHA_CACHE_DIR", "fmha-cache")
    assert loader.cache_dir() == tmp_path / "fmha-cache" and loader.cache_dir().is_absolute()


def test_nvcc_whose_version_fails_is_an_error(tmp_path, monkeypatch):
    broken = tmp_path / "nvcc"
    broken.write_text("#!/bin/sh\necho 'libcudart missing' >&2\nexit 3\n")
    broken.chmod(0o755)
    monkeypatch.setenv("FMHA_NVCC", str(broken))
    loader.nvcc_version.cache_clear()
    try:
        with pytest.raises(loader.CudaBuildError, match=r"--version failed \(exit 3\): libcudart missing"):
            loader.build("sm_90a", out_dir=tmp_path / "out", quiet=True)
    finally:
        loader.nvcc_version.cache_clear()


def test_cached_library_is_readable_by_others(fake_nvcc, tmp_path):
    lib = loader.build("sm_90a", out_dir=tmp_path / "cache", quiet=True)
    mask = loader._umask()
    assert stat.S_IMODE(os.stat(lib).st_mode) == 0o755 & ~mask
    assert not list(lib.parent.glob("*.tmp"))


def test_cache_folder_it_cannot_write_is_named(fake_nvcc, tmp_path, monkeypatch):
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    monkeypatch.setenv("FMHA_CACHE_DIR", str(blocker / "cache"))
    with pytest.raises(loader.CudaBuildError, match=r"cannot build into .*a_file/cache: .*FMHA_CACHE_DIR names "
                                                    r"another folder"):
        loader.build("sm_90a", quiet=True)
    with pytest.raises(loader.CudaBuildError, match=r"cannot build into .*a_file/out: "):
        loader.build("sm_90a", out_dir=blocker / "out", quiet=True)


def test_second_process_says_it_waits_for_the_first_build(fake_nvcc, tmp_path, capsys):
    out = tmp_path / "cache"
    lib = loader.library_path("sm_90a", out)
    out.mkdir()
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from filelock import FileLock; l = FileLock(sys.argv[1]); "
         "l.acquire(); print('held', flush=True); time.sleep(1.5)", str(lib) + ".lock"],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        assert loader.build("sm_90a", out_dir=out) == lib
    finally:
        holder.wait(timeout=30)
    err = capsys.readouterr().err
    assert f"fmha: waiting for another build of {lib.name} (holding {lib}.lock)..." in err
    assert "building CUDA kernels for sm_90a (one time)... done" in err


def test_build_cli(fake_nvcc, tmp_path):
    """python -m fmha.cuda.build --out DIR prints the library's path in DIR (the real compile: test_cuda_build.py's
    fixture); a second run finds it built."""
    cmd = [sys.executable, "-m", "fmha.cuda.build", "--arch", "sm_90a", "--out", str(tmp_path)]
    repo = Path(__file__).resolve().parents[1]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=repo)
    assert r.returncode == 0, r.stderr
    path = Path(r.stdout.strip().splitlines()[-1])
    assert path.exists() and path.parent == tmp_path and "building CUDA kernels for sm_90a" in r.stderr
    again = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=repo)
    assert again.returncode == 0 and Path(again.stdout.strip()) == path and "building" not in again.stderr


def test_load_falls_back_to_a_library_of_these_sources_when_it_cannot_build(tmp_path, monkeypatch):
    """An nvcc that cannot build (here: it fails every compile) with a library of the same sources built by another
    nvcc in the cache: load warns and loads that one; without it, the build error is raised."""
    nvcc = tmp_path / "nvcc"
    nvcc.write_text("#!/bin/sh\nif [ \"$1\" = \"--version\" ]; then echo 'release 12.0'; exit 0; fi\n"
                    "echo 'nvcc fatal: unsupported architecture' >&2\nexit 1\n")
    nvcc.chmod(0o755)
    monkeypatch.setenv("FMHA_NVCC", str(nvcc))
    monkeypatch.setenv("FMHA_CACHE_DIR", str(tmp_path / "cache"))
    loader.nvcc_version.cache_clear()
    opened = []
    monkeypatch.setattr(loader.ctypes, "CDLL", lambda path: opened.append(path) or path)
    monkeypatch.setattr(loader, "_declare", lambda lib: lib)
    try:
        with pytest.raises(loader.CudaBuildError, match="nvcc failed"):
            loader.load.__wrapped__("sm_90a")
        other = tmp_path / "cache" / f"libfmha_sm_90a_{loader.source_hash('sm_90a')}_0123abcd.so"
        shutil.copy(ELF, other)
        with pytest.warns(RuntimeWarning, match=r"nvcc failed .*; loading .*_0123abcd.so, built from the same "
                                                r"sources by another nvcc"):
            assert loader.load.__wrapped__("sm_90a") == str(other)
        assert opened == [str(other)]
    finally:
        loader.nvcc_version.cache_clear()


def test_a_loaded_library_is_available_whatever_the_build_would_need(monkeypatch):
    """Once the library is loaded, cuda's availability no longer asks what a build needs (nvcc, the sources'
    hash: about 3 ms a new call shape, and a deleted cache would have made new shapes pass cuda over)."""
    import torch
    from fmha.backends import registry
    from fmha.cuda import backend as cb, loader
    b = registry()["cuda"]
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(b, "_arch", 90)
    monkeypatch.setattr(cb, "_capability", lambda index: (9, 0))
    monkeypatch.setattr(b, "_build_error", None)
    monkeypatch.setattr(loader, "buildable", lambda arch: "nvcc not found")
    monkeypatch.setattr(b, "_fn", None)
    assert b.unavailable_reason() == "nvcc not found"
    monkeypatch.setattr(b, "_fn", lambda address: 0)
    assert b.unavailable_reason() is None


def test_flags_that_do_not_split_are_a_build_error_naming_the_variable(monkeypatch):
    monkeypatch.setenv("FMHA_NVCC_FLAGS", '-DX="1')
    with pytest.raises(loader.CudaBuildError, match=r"FMHA_NVCC_FLAGS='-DX=\"1' does not split into flags"):
        loader.user_flags()


def test_flags_that_do_not_split_are_a_reason_not_an_error_where_nvcc_is_missing(monkeypatch):
    """Without nvcc the prebuilt library's cache key reads the flags: buildable names them instead of raising."""
    monkeypatch.setenv("FMHA_NVCC_FLAGS", '-DX="1')
    monkeypatch.setattr(loader, "find_nvcc", lambda: None)
    assert "FMHA_NVCC_FLAGS='-DX=\"1' does not split into flags" in loader.buildable("sm_90a")


def test_the_cache_key_follows_the_build_not_its_spelling(monkeypatch):
    """Every spelling of an arch names one library; nvcc's own flag variables and the flags' split change it."""
    for var in ("FMHA_NVCC_FLAGS", *loader.NVCC_ENV):
        monkeypatch.delenv(var, raising=False)
    key = loader.source_hash("sm_90a")
    assert {loader.source_hash(a) for a in ("90a", "SM_90A", "compute_90a")} == {key}
    monkeypatch.setenv("NVCC_APPEND_FLAGS", "-DFMHA_DISABLE_PDL=1")
    assert loader.source_hash("sm_90a") != key
    monkeypatch.delenv("NVCC_APPEND_FLAGS")
    monkeypatch.setenv("FMHA_NVCC_FLAGS", "-DA=1 -DB=2")
    two = loader.source_hash("sm_90a")
    monkeypatch.setenv("FMHA_NVCC_FLAGS", '"-DA=1 -DB=2"')
    assert loader.source_hash("sm_90a") != two


def test_the_cache_key_follows_the_recipe(monkeypatch):
    """Which units a build compiles and how it links are part of the key, as its sources and flags are."""
    monkeypatch.delenv("FMHA_NVCC_FLAGS", raising=False)
    key = loader.source_hash("sm_90a")
    units = loader.units
    monkeypatch.setattr(loader, "units", lambda probe=None, arch=loader.DEFAULT_ARCH: units(probe, arch)[:-1])
    assert loader.source_hash("sm_90a") != key
    monkeypatch.setattr(loader, "units", units)
    link = loader.link_command
    monkeypatch.setattr(loader, "link_command", lambda nvcc, objects, output: link(nvcc, objects, output) + ["-lm"])
    assert loader.source_hash("sm_90a") != key


def test_the_link_step_gets_the_host_compiler_and_linker_flags(monkeypatch):
    """-ccbin (the usual fix for a g++ too new for nvcc) and the linker's flags in FMHA_NVCC_FLAGS reach the link
    step, which runs the host compiler too; the compile-only flags stay off it."""
    monkeypatch.setenv("FMHA_NVCC_FLAGS", "-ccbin /opt/g++-12 -DX=1 -lineinfo -Xptxas -v -Xlinker -z -lfoo -L/lib64 "
                                          "--compiler-bindir=/opt/bin")
    assert loader.link_command("nvcc", ["a.o"], "x.so") == [
        "nvcc", "--shared", "-ccbin", "/opt/g++-12", "-Xlinker", "-z", "-lfoo", "-L/lib64", "--compiler-bindir=/opt/bin",
        "-o", "x.so", "a.o"]


def test_a_cache_folder_whose_name_looks_like_a_pattern(tmp_path, monkeypatch):
    """FMHA_CACHE_DIR's own name is no glob pattern: 'cache[v1]' finds its library and not one of 'cache1'."""
    monkeypatch.delenv("FMHA_NVCC_FLAGS", raising=False)
    name = f"libfmha_sm_90a_{loader.source_hash('sm_90a')}_0123abcd.so"
    (tmp_path / "cache1").mkdir()
    shutil.copy(ELF, tmp_path / "cache1" / name)
    assert loader.prebuilt_library("sm_90a", tmp_path / "cache[v1]") is None
    (tmp_path / "cache[v1]").mkdir()
    shutil.copy(ELF, tmp_path / "cache[v1]" / name)
    assert loader.prebuilt_library("sm_90a", tmp_path / "cache[v1]") == tmp_path / "cache[v1]" / name


def test_a_library_cut_short_is_refused_by_load_and_rebuilt_by_build(fake_nvcc, tmp_path, monkeypatch):
    """A library file shorter than its own section headers say (a crash before it reached the disk) would crash
    the process inside dlopen: load names it instead, and build replaces it."""
    lib = loader.library_path("sm_90a", tmp_path)
    lib.write_bytes(Path(ELF).read_bytes()[:4096])
    assert loader.truncated(Path(ELF)) is None and loader.truncated(lib)
    with pytest.raises(loader.CudaBuildError, match=r"is cut short .*section headers end at .*--force"):
        loader._open(lib)
    assert loader.build("sm_90a", out_dir=tmp_path, quiet=True) == lib and loader.truncated(lib) is None
    # cut short and filled back to its size with zeros (an interrupted copy): its section headers are zeros
    data = Path(ELF).read_bytes()
    lib.write_bytes(data[:len(data) // 2] + bytes(len(data) - len(data) // 2))
    with pytest.raises(loader.CudaBuildError, match=r"is cut short .*is not a string table.*--force"):
        loader._open(lib)
    assert loader.build("sm_90a", out_dir=tmp_path, quiet=True) == lib and loader.truncated(lib) is None


def test_build_jobs_follow_the_variable_or_the_cpus_this_process_may_use(monkeypatch):
    monkeypatch.setenv("FMHA_BUILD_JOBS", "3")
    assert loader.build_jobs() == 3
    monkeypatch.setenv("FMHA_BUILD_JOBS", "0")
    with pytest.raises(loader.CudaBuildError, match=r"FMHA_BUILD_JOBS='0': expected a positive integer"):
        loader.build_jobs()
    monkeypatch.delenv("FMHA_BUILD_JOBS")
    assert loader.build_jobs() == len(os.sched_getaffinity(0))


def test_a_cuda_home_without_nvcc_is_said_and_the_search_is_named(fake_nvcc, tmp_path, monkeypatch):
    """CUDA_HOME naming a folder without bin/nvcc: the nvcc found elsewhere is used with a warning; with none
    found, the error lists where it looked."""
    monkeypatch.delenv("FMHA_NVCC")
    monkeypatch.delenv("CUDA_PATH", raising=False)
    monkeypatch.setenv("CUDA_HOME", str(tmp_path / "cuda-12.8"))
    monkeypatch.setenv("PATH", str(Path(fake_nvcc).parent))
    loader._warn_once.cache_clear()
    with pytest.warns(RuntimeWarning, match=r"CUDA_HOME=.*cuda-12.8 has no executable bin/nvcc; using .*bin/nvcc"):
        assert loader.find_nvcc() == fake_nvcc
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.setattr(loader.os.path, "isfile", lambda path: False)
    with pytest.raises(loader.CudaBuildError, match=r"nvcc not found \(looked at .*cuda-12.8/bin/nvcc, nvcc on PATH, "
                                                    r"/usr/local/cuda/bin/nvcc; set FMHA_NVCC"):
        loader.build("sm_90a", out_dir=tmp_path)


def test_a_killed_build_leaves_no_temporary_library_behind_the_next(fake_nvcc, tmp_path):
    """A build killed outright leaves its temporary library and its objects' folder beside the library; the next
    build removes both (only the lock's holder writes them), and a finished build leaves neither."""
    out = tmp_path / "cache"
    out.mkdir()
    lib = loader.library_path("sm_90a", out)
    stale = out / (lib.name + ".abc123.tmp")
    stale.write_text("half a library")
    objects = out / (lib.name + ".abc123.tmp.x7.build")
    objects.mkdir()
    (objects / "00_unit.o").write_text("an object")
    assert loader.build("sm_90a", out_dir=out, quiet=True) == lib
    assert sorted(p.name for p in out.iterdir()) == [lib.name, lib.name + ".lock"]


def _slow_nvcc(tmp_path, monkeypatch, body: str) -> Path:
    """An nvcc that says it is release 13.0 and runs `body` for each compile, in a child shell it starts (as nvcc
    starts cicc and ptxas), writing that child's pid to pids/."""
    nvcc = tmp_path / "bin" / "nvcc"
    nvcc.parent.mkdir()
    (tmp_path / "pids").mkdir()
    nvcc.write_text(textwrap.dedent(f"""\
        #!/bin/sh
        if [ "$1" = "--version" ]; then echo "Cuda compilation tools, release 13.0, V13.0.0"; exit 0; fi
        case "$*" in *--shared*) exit 0;; esac
        unit=$(echo "$*" | sed 's/.* \\([^ ]*\\.cu\\)$/\\1/')
        sh -c 'echo $$ > "{tmp_path}/pids/$(basename "$1")"; {body}' child "$unit"
        """))
    nvcc.chmod(0o755)
    monkeypatch.setenv("FMHA_NVCC", str(nvcc))
    loader.nvcc_version.cache_clear()
    return tmp_path / "pids"


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:  # (a zombie is dead)
            return f.read().split(") ")[1][0] != "Z"
    except FileNotFoundError:
        return False


def _survivors(folder: Path, pattern: str = "*") -> list:
    """The stand-in's children whose pids are in folder's files (`pattern`) still running 10 s after the build
    ended (a child killed before it wrote its pid left an empty file)."""
    started = [int(t) for t in (p.read_text().strip() for p in folder.glob(pattern)) if t]
    deadline = time.monotonic() + 10
    while any(_alive(pid) for pid in started) and time.monotonic() < deadline:
        time.sleep(0.05)
    return [pid for pid in started if _alive(pid)]


def test_a_compile_past_the_timeout_is_stopped_with_what_it_ran(tmp_path, monkeypatch):
    """FMHA_BUILD_TIMEOUT bounds each nvcc call: past it the call and the processes it started are killed, and the
    error names the variable and the command; a bad value is refused by name."""
    pids = _slow_nvcc(tmp_path, monkeypatch, "sleep 60")
    monkeypatch.setenv("FMHA_BUILD_TIMEOUT", "1")
    monkeypatch.setenv("FMHA_BUILD_JOBS", "2")
    t0 = time.monotonic()
    with pytest.raises(loader.CudaBuildError, match=r"nvcc ran past FMHA_BUILD_TIMEOUT=1 s .*\ncommand: .*nvcc"):
        loader.build("sm_90a", out_dir=tmp_path / "out", quiet=True)
    assert time.monotonic() - t0 < 20
    assert 1 <= len(list(pids.iterdir())) <= 2  # the two in flight; the queued units never started
    assert _survivors(pids) == []
    assert [p.name for p in (tmp_path / "out").iterdir()] == [loader.library_path("sm_90a", tmp_path / "out").name
                                                              + ".lock"]
    for bad in ("-1", "soon", "inf", "nan", "1e7"):
        monkeypatch.setenv("FMHA_BUILD_TIMEOUT", bad)
        with pytest.raises(loader.CudaBuildError, match=rf"FMHA_BUILD_TIMEOUT='{bad}': expected seconds in \[0, "):
            loader.build("sm_90a", out_dir=tmp_path / "bad", quiet=True)  # (named before the lock is taken)
    assert not (tmp_path / "bad").exists()
    monkeypatch.setenv("FMHA_BUILD_TIMEOUT", "0")
    assert loader.build_timeout() is None
    monkeypatch.delenv("FMHA_BUILD_TIMEOUT")
    assert loader.build_timeout() == 900.0


def test_the_first_failing_unit_stops_the_compiles_in_flight(tmp_path, monkeypatch):
    """One unit fails at once while the others would run for a minute: the build fails within seconds with that
    unit's message, and the compiles in flight are killed."""
    units = loader.units(None, "sm_90a")
    pids = _slow_nvcc(tmp_path, monkeypatch, f'if [ "$(basename "$1")" = "{units[1].name}" ]; then '
                                             f'echo "{units[1].name}: error: broken" >&2; exit 2; fi; sleep 60')
    monkeypatch.setenv("FMHA_BUILD_JOBS", "2")
    t0 = time.monotonic()
    with pytest.raises(loader.CudaBuildError, match=rf"nvcc failed \(exit 2\)(.|\n)*{units[1].name}: error: broken"):
        loader.build("sm_90a", out_dir=tmp_path / "out", quiet=True)
    assert time.monotonic() - t0 < 20
    assert _survivors(pids) == []


def _linking_nvcc(tmp_path: Path) -> Path:
    """An nvcc that says it is release 13.0, compiles nothing, and as the link writes its pid to link.pid and
    sleeps for a minute."""
    nvcc = tmp_path / "bin" / "nvcc"
    nvcc.parent.mkdir()
    nvcc.write_text(textwrap.dedent(f"""\
        #!/bin/sh
        if [ "$1" = "--version" ]; then echo "Cuda compilation tools, release 13.0, V13.0.0"; exit 0; fi
        case "$*" in *--shared*) echo $$ > "{tmp_path}/link.pid"; exec sleep 60;; esac
        """))
    nvcc.chmod(0o755)
    return nvcc


def _wait_for_link(tmp_path: Path, running=lambda: True) -> None:
    """Until the stand-in's link has written its pid (at most 60 s, and only while `running()`)."""
    deadline = time.monotonic() + 60
    while not (tmp_path / "link.pid").exists() or not (tmp_path / "link.pid").read_text().strip():
        assert running() and time.monotonic() < deadline
        time.sleep(0.02)


def test_a_ctrl_c_while_nvcc_starts_unwinds_once_it_is_registered():
    """A SIGINT that lands while an nvcc is being started and registered (loader._signals_held) raises
    KeyboardInterrupt only at the end of that block, and the handlers are put back."""
    import signal
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    term = signal.getsignal(signal.SIGTERM)
    try:
        reached = []
        with pytest.raises(KeyboardInterrupt):
            with loader._signals_held():
                signal.raise_signal(signal.SIGINT)  # (its handler has run when this returns)
                reached.append("the end of the block")
        assert reached == ["the end of the block"]
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
        assert signal.getsignal(signal.SIGTERM) is term
    finally:
        signal.signal(signal.SIGINT, previous)


def test_a_ctrl_c_as_the_link_starts_still_kills_its_nvcc(tmp_path, monkeypatch):
    """Ctrl-C the moment the link's nvcc has started, before the build has registered it (raised from inside
    Popen): the build unwinds with KeyboardInterrupt and that nvcc is killed, not left running."""
    import signal
    monkeypatch.setenv("FMHA_NVCC", str(_linking_nvcc(tmp_path)))
    loader.nvcc_version.cache_clear()
    popen = subprocess.Popen

    def started_then_interrupted(cmd, *args, **kwargs):
        proc = popen(cmd, *args, **kwargs)
        if "--shared" in cmd:
            _wait_for_link(tmp_path)
            signal.raise_signal(signal.SIGINT)
        return proc
    monkeypatch.setattr(loader.subprocess, "Popen", started_then_interrupted)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            loader.build("sm_90a", out_dir=tmp_path / "out", quiet=True)
    finally:
        signal.signal(signal.SIGINT, previous)
    assert _survivors(tmp_path, "link.pid") == []


@pytest.mark.parametrize("signal_number", [2, 15])
def test_an_interrupted_or_terminated_build_kills_the_nvcc_it_waits_on(tmp_path, signal_number):
    """Ctrl-C (SIGINT) or a job scheduler's stop (SIGTERM) while the link runs: nvcc, in a session of its own so
    that the terminal's SIGINT misses it, is killed by the build on its way out (SIGTERM unwinds as Ctrl-C does,
    then exits with 143), and no folder is left beside the library."""
    env = {**os.environ, "FMHA_NVCC": str(_linking_nvcc(tmp_path))}
    # (Ctrl-C's handler set as a terminal's Python has it: a shell's background job inherits SIGINT ignored)
    script = ("import signal\nsignal.signal(signal.SIGINT, signal.default_int_handler)\n"
              f"from fmha.cuda import loader\ntry:\n    loader.build('sm_90a', out_dir={str(tmp_path / 'out')!r}, "
              "quiet=True)\nexcept KeyboardInterrupt:\n    print('interrupted')\n")
    repo = Path(__file__).resolve().parents[1]
    child = subprocess.Popen([sys.executable, "-c", script], cwd=repo, env=env, stdout=subprocess.PIPE, text=True)
    try:
        _wait_for_link(tmp_path, lambda: child.poll() is None)
        child.send_signal(signal_number)
        printed = child.communicate(timeout=30)[0].strip()
        assert (printed, child.returncode) == (("interrupted", 0) if signal_number == 2 else ("", 143))
    finally:
        child.kill()
    assert _survivors(tmp_path, "link.pid") == []
    assert [p.name.endswith(".so.lock") for p in (tmp_path / "out").iterdir()] == [True]  # (the lock alone)
