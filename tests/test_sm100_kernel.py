"""The sm_100a decode kernel, checked without a Blackwell GPU (issue 25 §3). Nothing here runs it: no
Blackwell GPU exists where this project is tested, and no simulator executes tcgen05 code.

With nvcc (skipped only where nvcc is absent), the whole sm_100a library is built once with
`-Xptxas -v`, then:
* build gates: every decode kernel compiles with no spill and no stack frame, its SASS has no local-memory
  access (LDL / STL), and its registers fit the CTAs per SM its configuration asks for;
* SASS gates: every decode kernel holds UTCHMMA, UTCBAR, LDTM, UTMALDG and the Tensor Memory allocator
  (UTCATOMSWS), no 2-CTA or .ws MMA, the number of UTCHMMA its tile plan issues, and the library's ELF
  carries EIATTR_TCGEN05_1CTA_USED;
* descriptors: the instruction descriptor of every UTCHMMA (the immediate moved into its idesc register)
  decodes to the M, N, types and majors the kernel must issue for its head dim, tile and dtype, and every
  shared-memory descriptor's high word has bit 46 set, SBO 1024 and the 128B swizzle (ptxas accepts any
  descriptor silently: only this catches a wrong one before hardware);
* one instantiation compiles with `-Xptxas -g-tmem-access-check` (runtime Tensor Memory traps).
"""
from __future__ import annotations

import ctypes
import re
import subprocess
from collections import defaultdict
from pathlib import Path

import pytest

from fmha.cuda import loader
from tests.test_sm100_build import ACC_F32, BF16, F16, K, MN, NVCC, _cuobjdump, decode_idesc, idesc_f16

needs_nvcc = pytest.mark.skipif(NVCC is None, reason="nvcc not found (set CUDA_HOME or FMHA_NVCC)")

# sm100/config.h: (D, config) -> (tile, CTAs per SM); config numbers of fmha_capi.h (WIDE 0, DEEP 1, SPLIT_QK 5,
# LATENT_SPLIT_QK 7: K = V, one ring)
PLAN = {(64, 0): (128, 2), (64, 1): (128, 1), (128, 0): (64, 2), (128, 1): (64, 1), (256, 0): (64, 1),
        (256, 1): (64, 1), (512, 5): (32, 1), (512, 7): (32, 1), (576, 7): (32, 1)}


def head_dim_v(d: int) -> int:
    """576-wide keys have 512-wide values (their first 512 columns)."""
    return 512 if d == 576 else d
KERNEL = re.compile(r"_ZN4fmha5sm10013decode_kernelILi(\d+)ELb([01])ELi(\d+)E")


def expected_idescs(d: int, tile: int, bf16: bool) -> set:
    """S = Q K^T: M 64, N tile, both K-major; O += P V: M 64, N = D_v (256 a MMA at D_v = 512), B MN-major."""
    ab = BF16 if bf16 else F16
    return {idesc_f16(64, tile, ab, ACC_F32, K, K), idesc_f16(64, min(head_dim_v(d), 256), ab, ACC_F32, K, MN)}


def expected_mmas(d: int, tile: int) -> int:
    """UTCHMMA in the SASS: Q K^T (D / 16) at two sites (the first tile, then the next tile in the loop),
    P V (tile / 16, twice at D_v = 512: two column halves)."""
    return 2 * (d // 16) + (tile // 16) * (2 if head_dim_v(d) == 512 else 1)


@pytest.fixture(scope="module")
def sm100_library(tmp_path_factory):
    """(ptxas -v log, {kernel: SASS text}, ELF listing) of the sm_100a library."""
    if NVCC is None:
        pytest.skip("nvcc not found (set CUDA_HOME or FMHA_NVCC)")
    out = tmp_path_factory.mktemp("sm100_lib") / "libfmha_sm100a.so"
    log = loader.compile_library(NVCC, "sm_100a", str(out), extra_flags=("-Xptxas", "-v"))
    tool = _cuobjdump()
    sass = subprocess.run([tool, "-sass", str(out)], capture_output=True, text=True, timeout=600).stdout
    elf = subprocess.run([tool, "-elf", str(out)], capture_output=True, text=True, timeout=600).stdout
    kernels, name = {}, None
    for line in sass.splitlines():
        m = re.search(r"Function : (\S+)", line)
        if m:
            name = m.group(1)
            kernels[name] = []
        elif name is not None:
            kernels[name].append(line)
    decode = {k: "\n".join(v) for k, v in kernels.items() if KERNEL.search(k)}
    return log, decode, elf, out


def _plan(name: str):
    d, bf16, cfg = (int(x) for x in KERNEL.search(name).groups())
    tile, ctas = PLAN[(d, cfg)]
    return d, bool(bf16), cfg, tile, ctas


@needs_nvcc
def test_sm100_every_configuration_is_built(sm100_library):
    _, decode, _, _ = sm100_library
    built = {(_plan(k)[0], _plan(k)[2], _plan(k)[1]) for k in decode}
    assert built == {(d, c, bf) for (d, c) in PLAN for bf in (False, True)}


@needs_nvcc
def test_sm100_no_spills_no_local_memory_registers_fit(sm100_library):
    log, decode, _, _ = sm100_library
    stats = defaultdict(dict)
    name = None
    for line in log.splitlines():
        m = re.search(r"Compiling entry function '(\S+)' for 'sm_100a'", line)
        if m:
            name = m.group(1)
        elif name and "bytes stack frame" in line:
            stats[name]["stack"], stats[name]["spill_st"], stats[name]["spill_ld"] = (
                int(x) for x in re.findall(r"(\d+) bytes", line)[:3])
        elif name and "Used" in line and "registers" in line:
            stats[name]["regs"] = int(re.search(r"Used (\d+) registers", line).group(1))
    report = []
    for k, text in decode.items():
        d, bf16, cfg, tile, ctas = _plan(k)
        s = stats[k]
        assert s["stack"] == 0 and s["spill_st"] == 0 and s["spill_ld"] == 0, f"{k}: {s}"
        assert not re.search(r"\b(LDL|STL)\b", text), f"{k}: local memory in the SASS"
        assert s["regs"] * 192 * ctas <= 65536, f"{k}: {s['regs']} registers x 192 threads x {ctas} CTAs"
        report.append(f"D={d} {'bf16' if bf16 else 'fp16'} config {cfg}: {s['regs']} registers")
    print("\n".join(sorted(report)))


@needs_nvcc
def test_sm100_sass_gates(sm100_library):
    _, decode, elf, _ = sm100_library
    assert "EIATTR_TCGEN05_1CTA_USED" in elf and "EIATTR_TCGEN05_2CTA_USED" not in elf
    for k, text in decode.items():
        d, _, _, tile, _ = _plan(k)
        for op in ("UTCHMMA", "UTCBAR", "LDTM.16dp256bit", "STTM.16dp256bit", "UTMALDG", "UTCATOMSWS.FIND_AND_SET",
                   "UTCATOMSWS.AND", "UVIRTCOUNT.DEALLOC.SMPOOL"):
            assert op in text, f"{k}: no {op}"
        assert "UTCHMMA.2CTA" not in text and "UTCHMMA.WS" not in text, f"{k}: 2-CTA or .ws MMA"
        n = len(re.findall(r"\bUTCHMMA\b", text))
        assert n == expected_mmas(d, tile), f"{k}: {n} UTCHMMA, the plan issues {expected_mmas(d, tile)}"


@needs_nvcc
def test_sm100_shared_latent_kernel_loads_no_v(sm100_library):
    """K = V (LATENT_SPLIT_QK): the producer's TMA issues only K's boxes, half the sites of the kernel with a V
    ring of the same tile (the contiguous and paged producers each drop V's), with the same MMAs; at 576 the
    nine boxes of K's row (V: its first eight, read from the K stage)."""
    _, decode, _, _ = sm100_library
    sites = {}
    for k, text in decode.items():
        d, bf16, cfg, _, _ = _plan(k)
        sites[(d, bf16, cfg)] = len(re.findall(r"\bUTMALDG\b", text))
    for bf16 in (False, True):
        assert 0 < 2 * sites[(512, bf16, 7)] == sites[(512, bf16, 5)], sites
        assert 8 * sites[(576, bf16, 7)] == 9 * sites[(512, bf16, 7)], sites


def _idesc_immediates(text: str) -> list:
    """The immediate last moved into each UTCHMMA's idesc register (UMOV URn, 0x... above it)."""
    lines = text.splitlines()
    found = []
    for i, line in enumerate(lines):
        m = re.search(r"UTCHMMA .*idesc\[(UR\d+)\]", line)
        if not m:
            continue
        reg = m.group(1)
        for prev in reversed(lines[max(0, i - 80):i]):
            mv = re.search(rf"UMOV {reg}, (0x[0-9a-f]+)", prev)
            if mv:
                found.append(int(mv.group(1), 16))
                break
    return found


@needs_nvcc
def test_sm100_instruction_descriptors_in_sass(sm100_library):
    _, decode, _, _ = sm100_library
    for k, text in decode.items():
        d, bf16, _, tile, _ = _plan(k)
        got = _idesc_immediates(text)
        assert got, f"{k}: no idesc immediate found above its UTCHMMA"
        want = expected_idescs(d, tile, bf16)
        assert set(got) <= want, f"{k}: idesc {[hex(v) for v in set(got) - want]} not in {[hex(v) for v in want]}"
        assert set(got) == want, f"{k}: the SASS moves only {[hex(v) for v in set(got)]}"
        for v in got:
            f = decode_idesc(v)
            assert f["zero_bits"] == 0 and f["m"] == 64, f"{k}: {hex(v)} {f}"


@needs_nvcc
def test_sm100_smem_descriptor_high_words(sm100_library):
    """Every 64-bit smem descriptor of the kernel has SBO 1024, bit 46 and swizzle code 2 (128B): high
    word 0x40004040. The low word (start, LBO) is computed at run time from the shared-memory address."""
    _, decode, _, _ = sm100_library
    for k, text in decode.items():
        highs = {int(v, 16) for v in re.findall(r"(?:UMOV UR\d+|IMAD\.MOV\.U32 R\d+, RZ, RZ), (0x4000[0-9a-f]{4})\b", text)}
        assert 0x40004040 in highs, f"{k}: no SW128 / SBO 1024 descriptor high word"
        for h in highs:
            assert (h >> 14) & 1 and h >> 29 == 2 and ((h & 0x3FFF) << 4) == 1024, f"{k}: high word {h:#x}"


@needs_nvcc
def test_sm100_tmem_access_check_build(tmp_path):
    """-Xptxas -g-tmem-access-check (ptxas compiles runtime traps for wrong lane quarters, unallocated
    columns and bad alignment; they fire only on hardware): one instantiation compiles with it."""
    unit = loader.CSRC / "instantiations" / "sm100_decode_d128_bf16_wide.cu"
    cmd = loader.compile_command(NVCC, "sm_100a", unit, str(tmp_path / "u.o"), ("-Xptxas", "-g-tmem-access-check"))
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]


@needs_nvcc
def test_sm100_c_api_describes_its_kernels(sm100_library):
    """The sm_100a library's C API (loaded without a GPU: nothing here touches the device) says it is
    arch 100 and reports the table of sm100/config.h; STREAM and SEESAW name WIDE's and SPLIT_QK's
    kernels, and no kernel serves KV-head pairs."""
    lib = loader._declare(ctypes.CDLL(str(sm100_library[3])))
    assert lib.fmha_arch() == 100
    for (d, cfg), (tile, ctas) in PLAN.items():
        assert (lib.fmha_config_tile_n(d, cfg), lib.fmha_config_ctas_per_sm(d, cfg)) == (tile, ctas), (d, cfg)
        assert lib.fmha_config_narrow_rows(d, cfg) == 0
        assert lib.fmha_cluster_merge(d, 1, cfg, 4, 1, 8) == 0  # splits merge through the combine kernel
    assert lib.fmha_config_tile_n(128, 2) == 64 and lib.fmha_config_tile_n(512, 4) == 32  # STREAM, SEESAW
    assert lib.fmha_config_tile_n(512, 6) == 32  # LATENT_SEESAW runs LATENT_SPLIT_QK's kernel
    assert lib.fmha_config_tile_n(64, 3) == 0  # KV_HEAD_PAIRS
    assert lib.fmha_config_tile_n(576, 6) == 32  # ... at 576 too
    # sm_90a's latent kernels only: the narrow loop, the 64-key seesaw
    assert lib.fmha_config_tile_n(576, 8) == 0 and lib.fmha_config_tile_n(512, 9) == 0
    assert lib.fmha_config_tile_n(512, 11) == 0  # (the 48-key seesaw)


def test_the_loader_builds_sm100a_for_compute_capability_10():
    """The cuda backend builds for the current device: sm_100a on compute capability 10.0, sm_90a on 9.0
    and without a GPU; no other capability has a kernel."""
    from fmha.cuda import backend as cb

    assert loader.arch_for_capability((10, 0)) == "sm_100a" and loader.arch_for_capability((9, 0)) == "sm_90a"
    assert loader.arch_for_capability((12, 0)) is None and loader.arch_for_capability((8, 0)) is None
    import torch

    if not torch.cuda.is_available():
        assert cb._target_arch() == "sm_90a"
    assert "never run on hardware" in cb.CudaBackend.summary
