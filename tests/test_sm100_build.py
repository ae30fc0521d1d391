"""The sm_100a (Blackwell) groundwork, checked without a Blackwell GPU (issue 25 §3).

* Pure Python, everywhere: a tiny mirror of fmha/cuda/csrc/sm100/descriptors.h re-derives every worked
  instruction- and shared-memory-descriptor value of shared/BLACKWELL-FACTS.md and design-sm100.md §1, and
  each of those values must still be static_assert-ed in descriptors.h. ptxas accepts any descriptor
  constant silently, so a bit-layout slip is caught here or on hardware, nowhere else.
* With nvcc (skipped only when nvcc is absent): tests/sm100_probe.cu compiles for sm_100a with no spills
  and no local memory; its SASS holds UTCHMMA, UTCBAR, LDTM, STTM, the TMEM allocator (UTCATOMSWS) and the
  idesc / descriptor immediates the encoders produce; its ELF carries EIATTR_TCGEN05_1CTA_USED; built for
  plain sm_100 the wrappers compile to traps.
Nothing here runs a kernel, and nothing has run on Blackwell hardware (the kernel's own gates:
tests/test_sm100_kernel.py).
"""
from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from fmha.cuda import loader

REPO = Path(__file__).resolve().parents[1]
PROBE = REPO / "tests" / "sm100_probe.cu"
SM100 = loader.CSRC / "sm100"
NVCC = loader.find_nvcc()
needs_nvcc = pytest.mark.skipif(NVCC is None, reason="nvcc not found (set CUDA_HOME or FMHA_NVCC)")

# ---------------------------------------------------------------------------------------------------------
# Python mirror of descriptors.h
# ---------------------------------------------------------------------------------------------------------
F16, BF16 = 0, 1          # A/B type codes (bits 7-9, 10-12)
ACC_F16, ACC_F32 = 0, 1   # D type (bits 4-5)
K, MN = 0, 1              # transpose A/B (bits 15/16): 0 = K-major
SW_NONE, SW_128B_32B_ATOM, SW_128B, SW_64B, SW_32B = 0, 1, 2, 4, 6   # bits 61-63


def idesc_f16(m, n, ab=BF16, d=ACC_F32, a_major=K, b_major=K):
    return (d << 4) | (ab << 7) | (ab << 10) | (a_major << 15) | (b_major << 16) | ((n >> 3) << 17) | ((m >> 4) << 24)


def decode_idesc(v):
    return {"m": ((v >> 24) & 0x1F) << 4, "n": ((v >> 17) & 0x3F) << 3, "d": (v >> 4) & 3, "a": (v >> 7) & 7,
            "b": (v >> 10) & 7, "a_major": (v >> 15) & 1, "b_major": (v >> 16) & 1,
            "zero_bits": v & (0xF | 1 << 6 | 3 << 13 | 1 << 23 | 7 << 29)}


def smem_desc(start, lbo, sbo, swizzle, base_offset=0):
    return (((start & 0x3FFFF) >> 4) | (((lbo >> 4) & 0x3FFF) << 16) | (((sbo >> 4) & 0x3FFF) << 32) | (1 << 46)
            | ((base_offset & 7) << 49) | (swizzle << 61))


def decode_smem_desc(v):
    return {"start": (v & 0x3FFF) << 4, "lbo": ((v >> 16) & 0x3FFF) << 4, "sbo": ((v >> 32) & 0x3FFF) << 4,
            "fixed": (v >> 46) & 7, "base_offset": (v >> 49) & 7, "lbo_mode": (v >> 52) & 1,
            "swizzle": v >> 61}


# (value, encoder arguments, where the value comes from)
IDESC_WORKED = [
    (0x08200490, (128, 128), "BF M128 N128"),
    (0x04100490, (64, 64), "BF M64 N64"),
    (0x04200490, (64, 128), "BF M64 N128; design rows S, tile 128"),
    (0x08040490, (128, 16), "BF M128 N16"),
    (0x08210490, (128, 128, BF16, ACC_F32, K, MN), "BF M128 N128, B MN-major"),
    (0x08400010, (128, 256, F16), "BF f16 M128 N256"),
    (0x08080490, (128, 32), "design swapped S^T"),
    (0x08080010, (128, 32, F16), "design swapped S^T, fp16"),
    (0x08088490, (128, 32, BF16, ACC_F32, MN, K), "design swapped O^T, D >= 128"),
    (0x04088490, (64, 32, BF16, ACC_F32, MN, K), "design swapped O^T, D = 64"),
    (0x04080490, (64, 32), "design rows S, tile 32"),
    (0x04090490, (64, 32, BF16, ACC_F32, K, MN), "design rows O, D = 64"),
    (0x04110490, (64, 64, BF16, ACC_F32, K, MN), "design rows O, D = 128"),
    (0x04210490, (64, 128, BF16, ACC_F32, K, MN), "design rows O, D = 256"),
    (0x04410490, (64, 256, BF16, ACC_F32, K, MN), "design rows O, D = 512"),
]
SMEM_WORKED = [
    (0x4000404000010000, (0, 16, 1024, SW_128B), "BF K-major SW128 bf16 128x64 (and 64x64)"),
    (0x8000402000010000, (0, 16, 512, SW_64B), "BF K SW64 128x32"),
    (0xC000401000010000, (0, 16, 256, SW_32B), "BF K SW32 128x16"),
    (0x0000400800800000, (0, 2048, 128, SW_NONE), "BF K no swizzle 128x16"),
    (0x4000408000400000, (0, 1024, 2048, SW_128B), "BF MN SW128 N128 x K64"),
    (0x4000404002000000, (0, 8192, 1024, SW_128B), "BF [model] V MN-major, LBO one box"),
]


@pytest.mark.parametrize("value,args,what", IDESC_WORKED, ids=[w for _, _, w in IDESC_WORKED])
def test_sm100_idesc_worked_values(value, args, what):
    assert idesc_f16(*args) == value, f"{what}: {idesc_f16(*args):#010x} != {value:#010x}"
    d = decode_idesc(value)
    assert (d["m"], d["n"]) == args[:2] and d["zero_bits"] == 0 and d["d"] == ACC_F32


@pytest.mark.parametrize("value,args,what", SMEM_WORKED, ids=[w for _, _, w in SMEM_WORKED])
def test_sm100_smem_desc_worked_values(value, args, what):
    assert smem_desc(*args) == value, f"{what}: {smem_desc(*args):#018x} != {value:#018x}"
    d = decode_smem_desc(value)
    assert d["fixed"] == 1 and d["lbo_mode"] == 0 and d["base_offset"] == 0
    assert (d["start"], d["lbo"], d["sbo"], d["swizzle"]) == args


def test_sm100_descriptor_pitfalls():
    """The mistakes BLACKWELL-FACTS.md §Pitfalls names change the value: bit 46 left at 0 (the sm_90 wgmma
    descriptor), the sm_90 numeric swizzle code (1) in the sm_100 field, a 16-byte K step."""
    good = smem_desc(0, 16, 1024, SW_128B)
    sm90 = (1 << 62) | (64 << 32) | (1 << 16)
    assert good ^ sm90 == 1 << 46
    assert smem_desc(0, 16, 1024, 1) != good and decode_smem_desc(smem_desc(0, 16, 1024, 1))["swizzle"] == 1
    # K16 step inside a 128-byte row: +32 B, i.e. the low word goes 0x10000, 0x10002, 0x10004, 0x10006
    assert [(good + (32 * k >> 4)) & 0xFFFFFFFF for k in range(4)] == [0x10000, 0x10002, 0x10004, 0x10006]
    # M and N only live in the idesc: M=256 (cta_group::2) or N=264 encode without complaint, so the
    # encoders' callers must check shapes (descriptors.h: IdescF16's static_assert).
    assert decode_idesc(idesc_f16(128, 256))["n"] == 256


def test_sm100_descriptors_h_asserts_every_worked_value():
    """descriptors.h static_asserts the same worked values (so the C++ encoders are checked by any
    compiler that includes it, and the two tables cannot drift apart)."""
    text = (SM100 / "descriptors.h").read_text()
    asserted = {int(h, 16) for h in re.findall(r"==\s*(0x[0-9A-Fa-f]+)u", text)}
    asserted |= {int(h, 16) for h in re.findall(r"==\s*(0x[0-9A-Fa-f]+)ull", text)}
    missing = [f"{v:#x} ({w})" for v, _, w in IDESC_WORKED + SMEM_WORKED if v not in asserted]
    assert not missing, f"descriptors.h does not static_assert: {missing}"


def test_sm100_units_only_in_the_sm100a_build():
    """The sm_90a library compiles no sm100 unit, and the sm_100a library no sm90 one: each arch's build
    holds its own instantiations (capi.cu picks its kernels by FMHA_TARGET_SM)."""
    sm90, sm100 = loader.units(arch="sm_90a"), loader.units(arch="sm_100a")
    assert not any("sm100" in u.name for u in sm90) and any(u.name.startswith("sm90_") for u in sm90)
    assert not any("sm90" in u.name for u in sm100) and any(u.name.startswith("sm100_") for u in sm100)
    for f in loader.source_files():
        if f.parent.name not in ("sm100", "instantiations") and f.name != "capi.cu":
            assert "sm100/" not in f.read_text(), f"{f} includes an sm100 header"


# ---------------------------------------------------------------------------------------------------------
# The compiled probe
# ---------------------------------------------------------------------------------------------------------
def _cuobjdump() -> str:
    tool = loader.find_cuobjdump()
    if tool is None and NVCC is not None:
        cand = Path(NVCC).resolve().parent / "cuobjdump"
        tool = str(cand) if cand.exists() else shutil.which("cuobjdump")
    assert tool, "cuobjdump not found (neither in the triton wheel, beside nvcc nor on PATH)"
    return tool


def _compile(arch: str, out: Path) -> str:
    cmd = [NVCC, f"-arch={arch}", "-cubin", "-Xptxas", "-v", "-I", str(loader.CSRC), "-o", str(out), str(PROBE)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, f"{' '.join(cmd)}\n{r.stdout}\n{r.stderr}"
    return r.stdout + r.stderr


@pytest.fixture(scope="module")
def probe(tmp_path_factory):
    if NVCC is None:
        pytest.skip("nvcc not found (set CUDA_HOME or FMHA_NVCC)")
    cubin = tmp_path_factory.mktemp("sm100_probe") / "probe.cubin"
    log = _compile("sm_100a", cubin)
    tool = _cuobjdump()
    sass = subprocess.run([tool, "-sass", str(cubin)], capture_output=True, text=True, timeout=120)
    elf = subprocess.run([tool, "-elf", str(cubin)], capture_output=True, text=True, timeout=120)
    assert sass.returncode == 0 and elf.returncode == 0, sass.stderr + elf.stderr
    return log, sass.stdout, elf.stdout


@needs_nvcc
def test_sm100_probe_has_no_spills_or_local_memory(probe):
    log, sass, _ = probe
    props = re.findall(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", log)
    assert len(props) == 2, log  # sm100_probe_kernel, sm100_probe_shapes_kernel
    assert all(p == ("0", "0", "0") for p in props), f"stack / spill stores / spill loads: {props}\n{log}"
    assert not re.search(r"\b(LDL|STL)\b", sass), "local memory in the probe's SASS"


@needs_nvcc
def test_sm100_probe_sass_has_the_tcgen05_instructions(probe):
    _, sass, _ = probe
    ops = re.findall(r"^\s*/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Za-z0-9_.]*)", sass, re.M)
    count = lambda prefix: sum(1 for op in ops if op == prefix or op.startswith(prefix + "."))  # noqa: E731
    assert count("UTCHMMA") == 4, "four K16 MMAs (K = 64)"
    assert not any(op.startswith(("UTCHMMA.2CTA", "UTCHMMA.WS")) for op in ops)
    assert count("UTCBAR") == 1, "tcgen05.commit -> UTCBAR"
    # every instantiated .num of the ld / st wrappers (16x256b.x1 prints without its .x1)
    for n in (8, 16, 32, 64):
        assert f"LDTM.x{n}" in ops and f"STTM.x{n}" in ops, f"tcgen05.ld / st .32x32b.x{n}"
    for n in (1, 2, 4, 8, 16):
        sfx = "" if n == 1 else f".x{n}"
        assert f"LDTM.16dp256bit{sfx}" in ops and f"STTM.16dp256bit{sfx}" in ops, f"tcgen05.ld / st .16x256b.x{n}"
    assert "FENCE.VIEW.ASYNC.T" in ops, "tcgen05.wait::st"
    assert "UTCATOMSWS.FIND_AND_SET.ALIGN" in ops and "UTCATOMSWS.AND" in ops, "TMEM alloc / dealloc"
    assert "UVIRTCOUNT.DEALLOC.SMPOOL" in ops, "tcgen05.relinquish_alloc_permit"


@needs_nvcc
def test_sm100_probe_elf_attributes(probe):
    _, _, elf = probe
    assert "EIATTR_TCGEN05_1CTA_USED" in elf
    assert "EIATTR_TCGEN05_2CTA_USED" not in elf
    # Entry fragments' TMEM attributes, where this toolkit's cuobjdump names them (versions differ): one CTA's.
    assert not [f for f in re.findall(r"AT_ENTRY_FRAGMENT_TMEM\w*", elf) if "CTA2" in f]


@needs_nvcc
def test_sm100_probe_descriptor_immediates(probe):
    """Decode the idesc and the smem descriptors' high words of every UTCHMMA from the UMOVs before it:
    ptxas takes any constant, so this is where the encoders meet the machine code."""
    _, sass, _ = probe
    lines = sass.splitlines()
    umov = {}  # uniform register -> last immediate moved into it
    checked = 0
    for line in lines:
        m = re.search(r"\bUMOV (UR\d+), (0x[0-9a-f]+|\d+)\s*;", line)
        if m:
            umov[m.group(1)] = int(m.group(2), 0)
            continue
        m = re.search(r"\bUTCHMMA gdesc\[UR(\d+)\], gdesc\[UR(\d+)\], tmem\[UR\d+\], tmem\[UR\d+\], idesc\[(UR\d+)\]", line)
        if not m:
            continue
        checked += 1
        idesc = umov.get(m.group(3))
        assert idesc == 0x08200490, f"idesc {idesc!r} in: {line.strip()}"
        d = decode_idesc(idesc)
        assert (d["m"], d["n"], d["a"], d["b"], d["a_major"], d["b_major"]) == (128, 128, BF16, BF16, K, K)
        for lo in (m.group(1), m.group(2)):  # a 64-bit descriptor is the pair URn (low), URn+1 (high)
            hi = umov.get(f"UR{int(lo) + 1}")
            assert hi == 0x40004040, f"descriptor high word {hi!r} in: {line.strip()}"
            dd = decode_smem_desc(hi << 32)
            assert (dd["sbo"], dd["fixed"], dd["swizzle"], dd["base_offset"]) == (1024, 1, SW_128B, 0)
    assert checked == 4
    assert "UMOV UR19, 0x8200490" in sass or re.search(r"UMOV UR\d+, 0x8200490\b", sass)


@needs_nvcc
def test_sm100_wrappers_trap_off_target(tmp_path):
    """Built for plain sm_100 (no architecture-specific features) the wrappers compile to traps: no tcgen05
    instruction reaches the SASS, and the kernel is a trap stub rather than a silent no-op."""
    cubin = tmp_path / "probe_sm100.cubin"
    _compile("sm_100", cubin)
    sass = subprocess.run([_cuobjdump(), "-sass", str(cubin)], capture_output=True, text=True, timeout=120).stdout
    assert "sm100_probe_kernel" in sass and "sm100_probe_shapes_kernel" in sass
    assert not re.search(r"\b(UTCHMMA|UTCBAR|LDTM|STTM|UTCATOMSWS)\b", sass)
    assert "BPT.TRAP" in sass
