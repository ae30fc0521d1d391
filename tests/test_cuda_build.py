"""Compile the CUDA sources for sm_90a (no GPU needed) and inspect the result.

* every kernel compiles with 0 bytes of spill stores/loads and no stack frame (ptxas -v), and without ptxas
  serialising its wgmma instructions;
* every attention-kernel instantiation (wide and deep for D = 64, 128, 256, one for D = 512, stream for
  D = 128; x 2 dtypes) uses WGMMA (HGMMA in SASS) and TMA loads (UTMALDG).
Skipped only when nvcc is absent.
"""
from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from fmha.cuda import loader

NVCC = loader.find_nvcc()
pytestmark = pytest.mark.skipif(NVCC is None, reason="nvcc not found (set CUDA_HOME or FMHA_NVCC)")

HEAD_DIMS = (64, 128, 256, 512)


def _cuobjdump():
    try:
        import triton

        p = Path(triton.__file__).resolve().parent / "backends" / "nvidia" / "bin" / "cuobjdump"
        if p.exists():
            return str(p)
    except Exception:
        pass
    return shutil.which("cuobjdump")


@pytest.fixture(scope="module")
def build(tmp_path_factory):
    out = tmp_path_factory.mktemp("fmha_cuda_build") / "libfmha_test.so"
    cmd = loader.nvcc_command(NVCC, "sm_90a", str(out), extra_flags=["-Xptxas", "-v", "--threads", "2"])
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, f"nvcc failed:\n{r.stderr[-4000:]}"
    return out, r.stdout + r.stderr


# 2 dtypes x (wide and deep for each head dim, at D = 512 the seesaw and the split-Q K^T loop; stream for D = 128)
N_DECODE_KERNELS = 2 * (2 * len(HEAD_DIMS) + 1)


def _ptxas_properties(log: str) -> dict:
    """mangled kernel name -> (stack, spill stores, spill loads, registers)."""
    props = {}
    lines = log.splitlines()
    for i, line in enumerate(lines):
        m = re.search(r"Function properties for (\S+)", line)
        if not m or i + 1 >= len(lines):
            continue
        s = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", lines[i + 1])
        regs = None
        if i + 2 < len(lines):
            rm = re.search(r"Used (\d+) registers", lines[i + 2])
            regs = int(rm.group(1)) if rm else None
        if s:
            props[m.group(1)] = (int(s.group(1)), int(s.group(2)), int(s.group(3)), regs)
    return props


def test_no_spills(build):
    _, log = build
    props = _ptxas_properties(log)
    decode = [k for k in props if "decode_kernel" in k]
    assert len(decode) == N_DECODE_KERNELS, f"expected {N_DECODE_KERNELS} decode instantiations, ptxas reported {decode}"
    assert any("combine_splits_kernel" in k for k in props)
    spilling = {k: v for k, v in props.items() if v[1] or v[2]}
    assert not spilling, f"kernels spill (stack, stores, loads, regs): {spilling}"
    # No local memory either: a stack frame without spills is a local array or a struct whose address
    # was taken (once a 24-byte frame in every decode kernel's epilogue, perf/RESULTS.md).
    stacked = {k: v for k, v in props.items() if v[0]}
    assert not stacked, f"kernels use a stack frame (stack, stores, loads, regs): {stacked}"
    # ptxas serialises every wgmma of a kernel (C7510-C7515: insufficient registers, or a non-wgmma instruction
    # touching an accumulator of a wgmma in flight, e.g. one kept in flight across a loop's back edge; C7512,
    # C7514 and C7515 were met while writing the D = 512 loop, perf/RESULTS.md): correct results, a silent slowdown.
    serialised = [l for l in log.splitlines()
                  if re.search(r"C751\d", l) or "wgmma.mma_async instructions are serialized" in l]
    assert not serialised, "ptxas serialises wgmma:\n" + "\n".join(serialised)


def test_sass_uses_wgmma_and_tma(build):
    lib, _ = build
    tool = _cuobjdump()
    if tool is None:
        pytest.skip("cuobjdump not found (neither in the triton wheel nor on PATH)")
    sass = subprocess.run([tool, "-sass", str(lib)], capture_output=True, text=True, timeout=300)
    assert sass.returncode == 0, sass.stderr
    functions = re.split(r"\n\s*Function : ", sass.stdout)
    decode = [f for f in functions if f.split("\n", 1)[0].strip().startswith("_ZN4fmha4sm9013decode_kernel")]
    assert len(decode) == N_DECODE_KERNELS, f"found {len(decode)} decode kernels in SASS"
    for f in decode:
        name = f.split("\n", 1)[0].strip()
        assert "HGMMA" in f, f"{name}: no HGMMA (wgmma) in SASS"
        assert "UTMALDG" in f, f"{name}: no UTMALDG (TMA load) in SASS"


def test_build_cli(tmp_path):
    r = subprocess.run([__import__("sys").executable, "-m", "fmha.cuda.build", "--arch", "sm_90a", "--out",
                        str(tmp_path)], capture_output=True, text=True, timeout=900,
                       cwd=str(Path(__file__).resolve().parents[1]))
    assert r.returncode == 0, r.stderr
    path = Path(r.stdout.strip().splitlines()[-1])
    assert path.exists() and path.parent == tmp_path


def test_packed_arguments_reach_the_c_side(build):
    """The struct the Python backend packs is the FmhaDecodeArgs the C side reads (no GPU needed:
    the argument checks run before any CUDA call)."""
    import ctypes

    from fmha.cuda import backend as cb

    lib = loader._declare(ctypes.CDLL(str(build[0])))
    buf = cb._ArgsBuffer()
    ptr = 1 << 40  # 16-byte aligned, never dereferenced: the checks fail first

    def call(B=2, T=1, Hq=8, Hkv=2, S=64, D=128, dtype=1, q=ptr, variant=0):
        cb._PACKED.pack_into(buf.raw, 0, q, ptr, ptr, ptr, ptr, 0, B, T, Hq, Hkv, S, D, dtype,
                             *([1024] * 12), 0.125, 1, 1, variant, 0, 0, 0)
        status = lib.fmha_sm90_decode_packed(buf.address)
        return status, lib.fmha_last_error().decode()

    assert call(D=96) == (1, "head dim D=96 not supported (64, 128, 256, 512)")
    status, msg = call(Hq=6, Hkv=4)
    assert status != 0 and "Hq=6 is not a multiple of Hkv=4" in msg
    status, msg = call(q=0)
    assert status != 0 and "null tensor pointer" in msg
    status, msg = call(dtype=7)
    assert status != 0 and "dtype=7 causal=1 num_splits=1 variant=0 out of range" in msg
    status, msg = call(variant=4)
    assert status != 0 and "variant=4 out of range" in msg
    status, msg = call(variant=3)  # KV-head pairs: D = 64 only
    assert status != 0 and "variant=3 invalid for D=128" in msg and "D = 64 only" in msg, msg
    status, msg = call(variant=3, D=64, Hq=6, Hkv=3)
    assert status != 0 and "even Hkv, got Hkv=3" in msg, msg
    status, msg = call(variant=3, D=64, Hq=32, Hkv=2)  # 16 rows a head, 32 a pair
    assert status != 0 and "at most 16 packed rows a pair" in msg, msg
    status, msg = call(variant=3, D=64)  # head stride 1024 elements: not side by side
    assert status != 0 and "side by side" in msg and "k_cache has 1024" in msg, msg
    status, msg = call(variant=2, D=64)  # the stream variant exists at D = 128 only
    assert status != 0 and "variant=2 invalid for D=64" in msg and "D = 128 only" in msg, msg
    status, msg = call(B=0)
    assert status != 0 and "out of range" in msg


def test_merge_query_rejects_bad_arguments(build):
    """fmha_sm90_cluster_merge answers -1 for a head dim, dtype or variant it has no kernel for (no GPU
    needed: it returns before any CUDA call)."""
    import ctypes

    lib = loader._declare(ctypes.CDLL(str(build[0])))
    assert lib.fmha_sm90_cluster_merge(96, 1, 1, 8, 8, 4) == -1
    assert lib.fmha_sm90_cluster_merge(128, 2, 1, 8, 8, 4) == -1
    assert lib.fmha_sm90_cluster_merge(128, 1, 3, 8, 8, 4) == -1
    assert lib.fmha_sm90_cluster_merge(64, 1, 3, 8, 8, 4) == -1  # KV-head pairs run unsplit
    assert lib.fmha_sm90_cluster_merge(64, 1, 4, 8, 8, 4) == -1
    assert lib.fmha_sm90_cluster_merge(64, 1, 2, 8, 8, 4) == -1  # no stream instantiation at D = 64
    # stream = the wide configuration (tiles, CTAs per SM) with the deep variant's narrow loop, whatever the knobs
    assert lib.fmha_sm90_tile_n(128, 2) == lib.fmha_sm90_tile_n(128, 0) > 0
    assert lib.fmha_sm90_ctas_per_sm(128, 2) == lib.fmha_sm90_ctas_per_sm(128, 0)
    assert lib.fmha_sm90_narrow_rows(128, 2) == lib.fmha_sm90_narrow_rows(128, 1)
    assert lib.fmha_sm90_tile_n(64, 2) == 0 and lib.fmha_sm90_tile_n(128, 3) == 0


def test_timing_probe_is_off_by_default(build):
    """The default library has no timing probe (FMHA_SM90_PROBE_TIMESTAMPS) and says so, without a GPU;
    the probe's layout matches what perf/stream_probe.py expects."""
    import ctypes

    from perf.stream_probe import EVENTS, TIMELINE

    lib = loader._declare(ctypes.CDLL(str(build[0])))
    ctas, tiles, events = ctypes.c_int(), ctypes.c_int(), ctypes.c_int()
    assert lib.fmha_sm90_probe_layout(ctypes.byref(ctas), ctypes.byref(tiles), ctypes.byref(events)) == 0
    assert (ctas.value, tiles.value, events.value) == (256, 64 + 1, len(EVENTS))  # 64 ring positions + the timeline
    assert len(TIMELINE) <= len(EVENTS)
    assert lib.fmha_sm90_probe_read(None, 0, 1) == 1
    assert "built without the timing probe" in lib.fmha_last_error().decode()
