"""NumPy model of the sm_100a kernel's shared-memory operands: what TMA writes, what tcgen05.mma reads.

Nothing here has run on Blackwell hardware: it is the PTX ISA's description, executed on the CPU.

* TMA with CU_TENSOR_MAP_SWIZZLE_128B (`tma_sw128_image`): a box is `rows` x 64 16-bit elements; row r
  lands at byte r * 128 of the box, its 16-byte chunk c at chunk position c ^ (r % 8). Boxes are
  1024-byte aligned; a matrix wider than 64 columns is D/64 boxes, box i at byte i * rows * 128.
* The tcgen05 shared-memory descriptor (`decode_smem_desc`), PTX ISA 9.1 §9.7.16.4.1 "Shared memory
  descriptor" (Table 40): start >> 4 in bits 0-13, LBO >> 4 in 16-29, SBO >> 4 in 32-45, fixed 0b001 in
  46-48, base offset 49-51, LBO mode 52, swizzle 61-63 (0 none, 1 128B with 32B atom, 2 128B, 4 64B,
  6 32B). It is decoded from the 64 bits; a descriptor without bit 46 (sm_90 wgmma style) is refused.
* What one K = 16 MMA reads (`read_k_major`, `read_mn_major`): the canonical layouts of §9.7.16.3
  ("Major-ness supported by strides": LBO §9.7.16.3.1, SBO §9.7.16.3.2, canonical layouts §9.7.16.3.3,
  the same table as wgmma's), T = 8 elements (16 bytes of a 16-bit type):
      K-major,  128B swizzle: Swizzle<3,4,3> o ((8,m),(T,2k)):((8T,SBO),(1,T))   LBO unused ("assumed 1")
      MN-major, 128B swizzle: Swizzle<3,4,3> o ((T,8,m),(8,k)):((1,T,LBO),(8T,SBO))
      K-major / MN-major, no swizzle: ((8,m),(T,2k)):((1T,SBO),(1,LBO)) / ((T,1,m),(8,k)):((1,T,SBO),(1T,LBO))
  so element (m, k) of a K-major SW128 operand is at start + (m // 8) * SBO + (m % 8) * 128 + 2k and
  element (mn, k) of an MN-major one at start + (mn // 64) * LBO + (k // 8) * SBO + (k % 8) * 128 +
  2 (mn % 64). The swizzle is applied to the absolute byte address (bits 4-6 ^= bits 7-9,
  `swizzle_address`), so a tile base off its 1024-byte boundary, a wrong SBO or a wrong K step reads
  wrong data here, as it would on hardware.
* The operands of the rows-on-M loop (docs/design-sm100.md §1): S = Q K^T with Q [64 x D] and the K tile
  [kBlockN x D], both K-major; O = P V with P [64 x kBlockN] K-major and the V tile [kBlockN x D] read
  MN-major (N = min(D, 256) output columns per MMA, K = keys). Descriptors come from a mirror of
  fmha/cuda/csrc/sm100/descriptors.h, whose worked values are asserted here too.

ISA versus the formulas above: the ISA's canonical layouts give exactly these offsets; its text says
LBO (K-major swizzled) is "not used, assumed to be 1", so the model ignores that field there, and for
MN-major swizzled LBO is the step between 64-element MN panels (the V box) and SBO the step between
groups of 8 K-rows. The ISA gives no canonical layout for mode 1 (128B with 32B atomicity); the model
refuses it. The base-offset field (for patterns not starting on a 1024-byte boundary) is not modelled:
the kernel keeps every tile 1024-aligned and writes 0, and the model refuses anything else.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pytest

DESCRIPTORS_H = Path(__file__).resolve().parents[1] / "fmha" / "cuda" / "csrc" / "sm100" / "descriptors.h"

SMEM_BYTES = 232448            # at most 227 KiB of shared memory per CTA (design-sm100.md)
SENTINEL = 0xFFFF              # fills the fake shared memory; operand data stays below 0x8000
M_ROWS = 64                    # packed query rows, M = 64 (rows-on-M loop)
KEY_TILE = {64: 128, 128: 64, 256: 64, 512: 32}   # kBlockN per head dim (design-sm100.md §1, §3)
HEAD_DIMS = sorted(KEY_TILE)

SW_NONE, SW_128B_32B_ATOM, SW_128B, SW_64B, SW_32B = 0, 1, 2, 4, 6
SWIZZLE_BITS = {SW_NONE: 0, SW_32B: 1, SW_64B: 2, SW_128B: 3}     # B of Swizzle<B,4,3>
SWIZZLE_ROW_BYTES = {SW_32B: 32, SW_64B: 64, SW_128B: 128}       # 8 x 16 B x w, w = 2 / 4 / 8


# ---------------------------------------------------------------------------------------------------------
# Mirror of descriptors.h (only what the kernel's shared-memory operands use)
# ---------------------------------------------------------------------------------------------------------
def smem_desc(start, lbo, sbo, swizzle, base_offset=0):
    return (((start & 0x3FFFF) >> 4) | (((lbo >> 4) & 0x3FFF) << 16) | (((sbo >> 4) & 0x3FFF) << 32) | (1 << 46)
            | ((base_offset & 7) << 49) | (swizzle << 61))


def make_smem_desc_k_sw128(start, sbo=1024):
    return smem_desc(start, 16, sbo, SW_128B)


def make_smem_desc_mn_sw128(start, lbo, sbo=1024):
    return smem_desc(start, lbo, sbo, SW_128B)


def smem_desc_advance(desc, byte_offset):
    return desc + (byte_offset >> 4)


# (value, smem_desc arguments, source): descriptors.h's static_asserts = BLACKWELL-FACTS.md's worked values
WORKED = [
    (0x4000404000010000, (0, 16, 1024, SW_128B), "K SW128 bf16 128x64 / 64x64"),
    (0x8000402000010000, (0, 16, 512, SW_64B), "K SW64 128x32"),
    (0xC000401000010000, (0, 16, 256, SW_32B), "K SW32 128x16"),
    (0x0000400800800000, (0, 2048, 128, SW_NONE), "K no swizzle 128x16"),
    (0x4000408000400000, (0, 1024, 2048, SW_128B), "MN SW128 N128 x K64"),
    (0x4000404002000000, (0, 8192, 1024, SW_128B), "V MN SW128, LBO one 64-key box"),
]


# ---------------------------------------------------------------------------------------------------------
# The model
# ---------------------------------------------------------------------------------------------------------
class SmemDesc(NamedTuple):
    start: int
    lbo: int
    sbo: int
    base_offset: int
    swizzle: int


RESERVED_MASK = (3 << 14) | (3 << 30) | (3 << 47) | (0xFF << 53)   # must be 0 (bits 47-48: fixed 0b001)


def decode_smem_desc(value: int) -> SmemDesc:
    """The fields of a 64-bit sm_100 shared-memory descriptor, or ValueError for one the MMA would misread."""
    if not 0 <= value < 1 << 64:
        raise ValueError(f"{value:#x} is not a 64-bit value")
    if not (value >> 46) & 1:
        raise ValueError(f"{value:#018x}: bit 46 is 0, an sm_90 wgmma descriptor, not an sm_100 one")
    if value & RESERVED_MASK:
        raise ValueError(f"{value:#018x}: reserved or fixed-zero bits set ({value & RESERVED_MASK:#x})")
    if (value >> 52) & 1:
        raise ValueError(f"{value:#018x}: LBO absolute-address mode (bit 52) exists on sm_103a only")
    swizzle = value >> 61
    if swizzle in (3, 5, 7):
        raise ValueError(f"{value:#018x}: swizzle code {swizzle} is invalid")
    return SmemDesc(start=(value & 0x3FFF) << 4, lbo=((value >> 16) & 0x3FFF) << 4,
                    sbo=((value >> 32) & 0x3FFF) << 4, base_offset=(value >> 49) & 7, swizzle=swizzle)


def _modelled(d: SmemDesc) -> SmemDesc:
    if d.swizzle == SW_128B_32B_ATOM:
        # the ISA gives no canonical layout for it; an sm_90 code 1 written into bits 61-63 lands here
        raise ValueError("swizzle mode 1 (128B with 32B atomicity) is not a layout this kernel writes")
    if d.base_offset:
        raise ValueError("non-zero base offset: the kernel's tiles start on their swizzle-pattern boundary")
    return d


def swizzle_address(addr, swizzle):
    """Swizzle<B,4,3> on byte addresses: bits [4, 4+B) ^= bits [7, 7+B)."""
    bits = SWIZZLE_BITS[swizzle]
    return addr ^ (((addr >> 7) & ((1 << bits) - 1)) << 4)


def _load_u16(smem: np.ndarray, addr: np.ndarray) -> np.ndarray:
    if addr.min() < 0 or addr.max() + 2 > smem.size:
        raise IndexError("the operand reaches outside shared memory")
    return smem[addr].astype(np.uint16) | (smem[addr + 1].astype(np.uint16) << 8)


def read_k_major(smem: np.ndarray, desc: int, rows: int, k: int = 16) -> np.ndarray:
    """The [rows x k] 16-bit slice that one MMA reads from a K-major operand (rows = its M or N)."""
    d = _modelled(decode_smem_desc(desc))
    m = np.arange(rows)[:, None]
    kb = 2 * np.arange(k)[None, :]
    if d.swizzle == SW_NONE:
        # 8-row x 16-byte core matrices: rows 16 B apart, SBO to the next 8 rows, LBO to the next 8 K
        off = (m % 8) * 16 + (m // 8) * d.sbo + (kb // 16) * d.lbo + kb % 16
    else:
        row_bytes = SWIZZLE_ROW_BYTES[d.swizzle]
        if d.start % row_bytes + 2 * k > row_bytes:
            raise ValueError("the K slice crosses its swizzle row: switch to the next box instead")
        off = (m % 8) * row_bytes + (m // 8) * d.sbo + kb   # LBO unused ("assumed 1")
    return _load_u16(smem, swizzle_address(d.start + off, d.swizzle))


def read_mn_major(smem: np.ndarray, desc: int, n: int, k: int = 16) -> np.ndarray:
    """The [k x n] 16-bit slice that one MMA reads from an MN-major operand (K rows, n = its M or N)."""
    d = _modelled(decode_smem_desc(desc))
    kk = np.arange(k)[:, None]
    mn = np.arange(n)[None, :]
    if d.swizzle == SW_NONE:
        # core matrices of 8 MN elements x 8 K rows: SBO to the next 8 MN, LBO to the next 8 K
        off = (mn % 8) * 2 + (mn // 8) * d.sbo + (kk % 8) * 16 + (kk // 8) * d.lbo
    else:
        row_bytes = SWIZZLE_ROW_BYTES[d.swizzle]
        panel = row_bytes // 2
        if d.start % row_bytes + 2 * min(n, panel) > row_bytes:
            raise ValueError("the MN extent crosses its swizzle row")
        off = (mn % panel) * 2 + (mn // panel) * d.lbo + (kk % 8) * row_bytes + (kk // 8) * d.sbo
    return _load_u16(smem, swizzle_address(d.start + off, d.swizzle))


def tma_sw128_image(mat: np.ndarray) -> np.ndarray:
    """The bytes TMA (SWIZZLE_128B, boxes of rows x 64 16-bit columns) writes for `mat`, box after box."""
    rows, cols = mat.shape
    assert cols % 64 == 0 and mat.dtype == np.uint16
    boxes = np.ascontiguousarray(mat.reshape(rows, cols // 64, 8, 8).transpose(1, 0, 2, 3))  # box,row,chunk,elem
    r = np.arange(rows)[:, None]
    c = np.arange(8)[None, :]
    image = np.empty_like(boxes)
    image[:, r, c ^ (r % 8), :] = boxes          # chunk c of row r goes to chunk position c ^ (r % 8)
    return image.astype("<u2").view(np.uint8).reshape(-1)


# ---------------------------------------------------------------------------------------------------------
# The kernel's operands: placement in shared memory and the descriptors it issues
# ---------------------------------------------------------------------------------------------------------
def k_major_step_desc(base: int, rows: int, k_step: int, k_bytes: int = 32) -> int:
    """K-major SW128 operand stored as 64-column boxes of `rows` rows at `base`: descriptor of K16 step k."""
    box = base + (k_step // 4) * rows * 128
    return smem_desc_advance(make_smem_desc_k_sw128(box), (k_step % 4) * k_bytes)


def v_step_desc(base: int, keys: int, n0: int, k_step: int, lbo: int | None = None) -> int:
    """V tile (64-column boxes of `keys` rows) as the MN-major B operand for output columns from n0."""
    box_bytes = keys * 128
    start = base + (n0 // 64) * box_bytes + (n0 % 64) * 2
    return smem_desc_advance(make_smem_desc_mn_sw128(start, box_bytes if lbo is None else lbo), k_step * 2048)


def _align(x: int, a: int = 1024) -> int:
    return (x + a - 1) // a * a


class Scene(NamedTuple):
    smem: np.ndarray
    mats: dict
    base: dict


def build_scene(head_dim: int, shift: int = 0, seed: int = 0) -> Scene:
    """Q, K, V and two P buffers of one head dim in a fake shared memory, each tile `shift` bytes past a
    1024-byte boundary, with sentinel-filled gaps between them."""
    rng = np.random.default_rng(seed + head_dim)
    keys = KEY_TILE[head_dim]
    p_cols = max(keys, 64)   # at kBlockN = 32, P is padded to one full 128-byte SW128 row
    p_pad = np.full((M_ROWS, p_cols - keys), SENTINEL, np.uint16)
    mats = {
        "q": rng.integers(0, 0x8000, (M_ROWS, head_dim), dtype=np.uint16),
        "k": rng.integers(0, 0x8000, (keys, head_dim), dtype=np.uint16),
        "v": rng.integers(0, 0x8000, (keys, head_dim), dtype=np.uint16),
        "p0": rng.integers(0, 0x8000, (M_ROWS, keys), dtype=np.uint16),
        "p1": rng.integers(0, 0x8000, (M_ROWS, keys), dtype=np.uint16),
    }
    smem = np.full(SMEM_BYTES, 0xFF, np.uint8)
    base, offset = {}, 1024
    for name, mat in mats.items():
        stored = np.hstack([mat, p_pad]) if name.startswith("p") else mat
        image = tma_sw128_image(stored)
        base[name] = offset + shift
        smem[base[name]:base[name] + image.size] = image
        offset = _align(base[name] + image.size) + 1024
    assert offset <= SMEM_BYTES
    return Scene(smem, mats, base)


def _k_steps(cols: int) -> range:
    return range(cols // 16)


def _v_chunks(head_dim: int):
    """(n0, N) of the P V MMAs the kernel issues (sm100/mainloop_rows.cuh): one of N = D up to D = 256, two
    of N = 256 at D = 512 (O's column halves)."""
    n = min(head_dim, 256)
    return [(n0, n) for n0 in range(0, head_dim, n)]


# ---------------------------------------------------------------------------------------------------------
# Descriptor mirror and decoder
# ---------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("value,args,what", WORKED, ids=[w for _, _, w in WORKED])
def test_worked_descriptor_values(value, args, what):
    assert smem_desc(*args) == value, f"{what}: {smem_desc(*args):#018x}"
    assert decode_smem_desc(value) == SmemDesc(args[0], args[1], args[2], 0, args[3])
    text = DESCRIPTORS_H.read_text()
    asserted = {int(h, 16) for h in re.findall(r"==\s*(0x[0-9A-Fa-f]+)ull", text)}
    assert value in asserted, f"descriptors.h no longer static_asserts {value:#x} ({what})"


def test_encoder_helpers_match_the_worked_values():
    assert make_smem_desc_k_sw128(0) == 0x4000404000010000
    assert make_smem_desc_k_sw128(0) >> 32 == 0x40004040                      # the SASS high word
    assert [smem_desc_advance(make_smem_desc_k_sw128(0), 32 * j) & 0xFFFFFFFF for j in range(4)] == [
        0x10000, 0x10002, 0x10004, 0x10006]                                   # K16 steps in the probe's SASS
    assert make_smem_desc_k_sw128(32) == smem_desc_advance(make_smem_desc_k_sw128(0), 32)
    assert make_smem_desc_mn_sw128(0, 1024, 2048) == 0x4000408000400000
    assert make_smem_desc_mn_sw128(0, 8192) == 0x4000404002000000
    assert decode_smem_desc(smem_desc_advance(make_smem_desc_mn_sw128(0, 8192), 2048)).start == 2048
    assert decode_smem_desc(make_smem_desc_k_sw128(0x40000 + 0x400)).start == 0x400   # 18-bit start address


def test_sm90_descriptor_differs_only_in_bit_46_and_is_refused():
    sm90 = (1 << 62) | (64 << 32) | (1 << 16)       # wgmma: 128B = code 1 in bits 62-63, no bit 46
    assert make_smem_desc_k_sw128(0) ^ sm90 == 1 << 46
    assert (1 << 62) == SW_128B << 61                # so the sm_90 field position reads as sm_100 code 2
    with pytest.raises(ValueError, match="bit 46"):
        decode_smem_desc(sm90)


@pytest.mark.parametrize("bad", [1 << 14, 1 << 31, 1 << 47, 1 << 52, 1 << 55, 3 << 61, 5 << 61, 7 << 61],
                         ids=["bit14", "bit31", "bit47", "lbo_mode", "bit55", "swz3", "swz5", "swz7"])
def test_decoder_refuses_reserved_bits_and_invalid_swizzle(bad):
    good = make_smem_desc_k_sw128(0x2000)
    with pytest.raises(ValueError):
        decode_smem_desc((good & ~(7 << 61)) | bad if bad >> 61 else good | bad)


# ---------------------------------------------------------------------------------------------------------
# The two formulations of the 128B swizzle agree on 1024-aligned boxes
# ---------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("rows", [32, 64, 128])
def test_tma_image_is_the_address_swizzle_of_the_linear_tile(rows):
    rng = np.random.default_rng(rows)
    mat = rng.integers(0, 0x8000, (rows, 128), dtype=np.uint16)
    base = 5 * 1024
    smem = np.full(SMEM_BYTES, 0xFF, np.uint8)
    image = tma_sw128_image(mat)
    smem[base:base + image.size] = image
    r, c = np.meshgrid(np.arange(rows), np.arange(128), indexing="ij")
    linear = base + (c // 64) * rows * 128 + r * 128 + (c % 64) * 2
    np.testing.assert_array_equal(_load_u16(smem, swizzle_address(linear, SW_128B)), mat)


# ---------------------------------------------------------------------------------------------------------
# The kernel's operands read back exactly
# ---------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("head_dim", HEAD_DIMS)
def test_qk_operands_read_back(head_dim):
    """S = Q K^T: A = Q [64 x D], B = the K tile [kBlockN x D], both K-major SW128, D/16 K16 steps."""
    s = build_scene(head_dim)
    keys = KEY_TILE[head_dim]
    for k in _k_steps(head_dim):
        cols = slice(16 * k, 16 * k + 16)
        np.testing.assert_array_equal(read_k_major(s.smem, k_major_step_desc(s.base["q"], M_ROWS, k), M_ROWS),
                                      s.mats["q"][:, cols], err_msg=f"Q, K16 step {k}")
        np.testing.assert_array_equal(read_k_major(s.smem, k_major_step_desc(s.base["k"], keys, k), keys),
                                      s.mats["k"][:, cols], err_msg=f"K, K16 step {k}")


@pytest.mark.parametrize("head_dim", HEAD_DIMS)
def test_pv_operands_read_back(head_dim):
    """O = P V: A = P [64 x kBlockN] K-major (both buffers), B = the V tile read MN-major, N = min(D, 256)."""
    s = build_scene(head_dim)
    keys = KEY_TILE[head_dim]
    for p in ("p0", "p1"):
        for k in _k_steps(keys):
            np.testing.assert_array_equal(read_k_major(s.smem, k_major_step_desc(s.base[p], M_ROWS, k), M_ROWS),
                                          s.mats[p][:, 16 * k:16 * k + 16], err_msg=f"{p}, K16 step {k}")
    for n0, n in _v_chunks(head_dim):
        for k in _k_steps(keys):
            np.testing.assert_array_equal(read_mn_major(s.smem, v_step_desc(s.base["v"], keys, n0, k), n),
                                          s.mats["v"][16 * k:16 * k + 16, n0:n0 + n],
                                          err_msg=f"V, columns {n0}+{n}, K16 step {k}")


@pytest.mark.parametrize("head_dim", [512, 576])
def test_shared_latent_k_stage_read_as_v(head_dim):
    """The shared latent (LATENT_SPLIT_QK): P V's MN-major descriptors point at the K stage itself. The same
    bytes, one 32-key K tile's TMA image (8 or 9 boxes), read back as Q K^T's K-major B operand give K's K16
    column steps and as P V's MN-major B operand V = K's first 512 columns, K16 key steps, both N = 256 halves."""
    keys = 32
    mat = np.random.default_rng(head_dim).integers(0, 0x8000, (keys, head_dim), dtype=np.uint16)
    smem, base = np.full(SMEM_BYTES, 0xFF, np.uint8), 2048
    image = tma_sw128_image(mat)
    smem[base:base + image.size] = image
    for k in _k_steps(head_dim):
        np.testing.assert_array_equal(read_k_major(smem, k_major_step_desc(base, keys, k), keys),
                                      mat[:, 16 * k:16 * k + 16], err_msg=f"K, K16 step {k}")
    for n0, n in _v_chunks(512):
        for k in _k_steps(keys):
            np.testing.assert_array_equal(read_mn_major(smem, v_step_desc(base, keys, n0, k), n),
                                          mat[16 * k:16 * k + 16, n0:n0 + n],
                                          err_msg=f"K as V, columns {n0}+{n}, K16 step {k}")


@pytest.mark.parametrize("head_dim", HEAD_DIMS)
def test_mma_sequence_computes_the_products(head_dim):
    """Summing the modelled K16 MMAs gives Q K^T and P V exactly (integer arithmetic)."""
    s = build_scene(head_dim)
    keys = KEY_TILE[head_dim]
    q, kt, v = (s.mats[x].astype(np.int64) for x in ("q", "k", "v"))
    acc_s = np.zeros((M_ROWS, keys), np.int64)
    for k in _k_steps(head_dim):
        a = read_k_major(s.smem, k_major_step_desc(s.base["q"], M_ROWS, k), M_ROWS).astype(np.int64)
        b = read_k_major(s.smem, k_major_step_desc(s.base["k"], keys, k), keys).astype(np.int64)
        acc_s += a @ b.T
    np.testing.assert_array_equal(acc_s, q @ kt.T)
    for p in ("p0", "p1"):
        acc_o = np.zeros((M_ROWS, head_dim), np.int64)
        for n0, n in _v_chunks(head_dim):
            for k in _k_steps(keys):
                a = read_k_major(s.smem, k_major_step_desc(s.base[p], M_ROWS, k), M_ROWS).astype(np.int64)
                b = read_mn_major(s.smem, v_step_desc(s.base["v"], keys, n0, k), n).astype(np.int64)
                acc_o[:, n0:n0 + n] += a @ b
        np.testing.assert_array_equal(acc_o, s.mats[p].astype(np.int64) @ v)


def test_p_tile_32_as_sw64_alternative():
    """At kBlockN = 32 P could also stay 32 columns wide with the 64B swizzle (rows of 64 B, SBO 512,
    code 4): half the shared memory of the padded SW128 buffer the tests above use."""
    rng = np.random.default_rng(32)
    p = rng.integers(0, 0x8000, (M_ROWS, 32), dtype=np.uint16)
    base = 3 * 1024
    smem = np.full(SMEM_BYTES, 0xFF, np.uint8)
    r, c = np.meshgrid(np.arange(M_ROWS), np.arange(32), indexing="ij")
    addr = swizzle_address(base + r * 64 + c * 2, SW_64B)   # what a 64B-swizzled store writes
    smem[addr], smem[addr + 1] = p & 0xFF, p >> 8
    for k in range(2):
        desc = smem_desc(base + 32 * k, 16, 512, SW_64B)
        np.testing.assert_array_equal(read_k_major(smem, desc, M_ROWS), p[:, 16 * k:16 * k + 16])
    assert smem_desc(0, 16, 512, SW_64B) == 0x8000402000010000


def test_lbo_is_not_read_when_it_has_no_role():
    """K-major swizzled: LBO unused. MN-major with N <= 64 from one panel: LBO never reached. So a wrong
    LBO is invisible in these reads (V at D = 64); the D >= 128 mutations below do catch it."""
    s = build_scene(128)
    keys = KEY_TILE[128]
    q_desc = k_major_step_desc(s.base["q"], M_ROWS, 1)
    wrong = (q_desc & ~(0x3FFF << 16)) | ((4096 >> 4) << 16)
    np.testing.assert_array_equal(read_k_major(s.smem, wrong, M_ROWS), s.mats["q"][:, 16:32])
    s64 = build_scene(64)  # V of one 64-column panel: the MMA never steps by LBO
    for n0, n in _v_chunks(64):
        np.testing.assert_array_equal(
            read_mn_major(s64.smem, v_step_desc(s64.base["v"], KEY_TILE[64], n0, 0, lbo=1024), n),
            s64.mats["v"][:16, n0:n0 + n])


# ---------------------------------------------------------------------------------------------------------
# Mutations: each must read wrong data or be refused
# ---------------------------------------------------------------------------------------------------------
def _with_field(desc: int, shift: int, width: int, value: int) -> int:
    return (desc & ~(((1 << width) - 1) << shift)) | (value << shift)


def _differs(got: np.ndarray, want: np.ndarray) -> bool:
    return got.shape != want.shape or not np.array_equal(got, want)


@pytest.mark.parametrize("sbo", [512, 2048])
@pytest.mark.parametrize("head_dim", HEAD_DIMS)
def test_wrong_sbo_misreads(head_dim, sbo):
    s = build_scene(head_dim)
    keys = KEY_TILE[head_dim]
    for k in _k_steps(head_dim):
        bad = _with_field(k_major_step_desc(s.base["q"], M_ROWS, k), 32, 14, sbo >> 4)
        assert _differs(read_k_major(s.smem, bad, M_ROWS), s.mats["q"][:, 16 * k:16 * k + 16])
    for n0, n in _v_chunks(head_dim):
        bad = _with_field(v_step_desc(s.base["v"], keys, n0, 0), 32, 14, sbo >> 4)
        assert _differs(read_mn_major(s.smem, bad, n), s.mats["v"][:16, n0:n0 + n])


@pytest.mark.parametrize("head_dim", HEAD_DIMS)
def test_16_byte_k_step_misreads(head_dim):
    s = build_scene(head_dim)
    for k in _k_steps(head_dim):
        if k % 4:   # step 0 of each box is the same either way
            bad = k_major_step_desc(s.base["q"], M_ROWS, k, k_bytes=16)
            assert _differs(read_k_major(s.smem, bad, M_ROWS), s.mats["q"][:, 16 * k:16 * k + 16]), k


@pytest.mark.parametrize("head_dim", [128, 256, 512])
def test_k_steps_past_the_box_without_switching_box_misread(head_dim):
    s = build_scene(head_dim)
    for k in range(4, head_dim // 16):
        bad = smem_desc_advance(make_smem_desc_k_sw128(s.base["q"]), 32 * k)   # start + 32 k, same box
        assert _differs(read_k_major(s.smem, bad, M_ROWS), s.mats["q"][:, 16 * k:16 * k + 16]), k


@pytest.mark.parametrize("head_dim", HEAD_DIMS)
def test_no_swizzle_misreads(head_dim):
    s = build_scene(head_dim)
    keys = KEY_TILE[head_dim]
    bad = _with_field(k_major_step_desc(s.base["k"], keys, 1), 61, 3, SW_NONE)
    assert _differs(read_k_major(s.smem, bad, keys), s.mats["k"][:, 16:32])
    for n0, n in _v_chunks(head_dim):
        bad = _with_field(v_step_desc(s.base["v"], keys, n0, 1), 61, 3, SW_NONE)
        assert _differs(read_mn_major(s.smem, bad, n), s.mats["v"][16:32, n0:n0 + n])


@pytest.mark.parametrize("head_dim", HEAD_DIMS)
def test_bit_46_cleared_is_refused(head_dim):
    s = build_scene(head_dim)
    keys = KEY_TILE[head_dim]
    with pytest.raises(ValueError, match="sm_90"):
        read_k_major(s.smem, k_major_step_desc(s.base["q"], M_ROWS, 0) & ~(1 << 46), M_ROWS)
    with pytest.raises(ValueError, match="sm_90"):
        read_mn_major(s.smem, v_step_desc(s.base["v"], keys, 0, 0) & ~(1 << 46), head_dim // 2)


@pytest.mark.parametrize("head_dim", HEAD_DIMS)
def test_sm90_swizzle_code_in_sm100_field_is_refused(head_dim):
    """The sm_90 numeric code of 128B (1) written into bits 61-63 means '128B with 32B atom' on sm_100."""
    s = build_scene(head_dim)
    keys = KEY_TILE[head_dim]
    bad = _with_field(k_major_step_desc(s.base["k"], keys, 0), 61, 3, 1)
    assert decode_smem_desc(bad).swizzle == SW_128B_32B_ATOM
    with pytest.raises(ValueError, match="32B atomicity"):
        read_k_major(s.smem, bad, keys)
    with pytest.raises(ValueError, match="32B atomicity"):
        read_mn_major(s.smem, _with_field(v_step_desc(s.base["v"], keys, 0, 0), 61, 3, 1), head_dim // 2)


@pytest.mark.parametrize("shift", [128, 512])
@pytest.mark.parametrize("head_dim", HEAD_DIMS)
def test_tile_base_off_1024_boundary_misreads(head_dim, shift):
    """Tiles written `shift` bytes past a 1024-byte boundary: the box-relative TMA pattern and the
    MMA's address-based swizzle disagree, so every operand misreads."""
    s = build_scene(head_dim, shift=shift)
    keys = KEY_TILE[head_dim]
    assert _differs(read_k_major(s.smem, k_major_step_desc(s.base["q"], M_ROWS, 0), M_ROWS), s.mats["q"][:, :16])
    assert _differs(read_k_major(s.smem, k_major_step_desc(s.base["k"], keys, 1), keys), s.mats["k"][:, 16:32])
    assert _differs(read_k_major(s.smem, k_major_step_desc(s.base["p0"], M_ROWS, 1), M_ROWS),
                    s.mats["p0"][:, 16:32])
    for n0, n in _v_chunks(head_dim):
        assert _differs(read_mn_major(s.smem, v_step_desc(s.base["v"], keys, n0, 0), n), s.mats["v"][:16, n0:n0 + n])


@pytest.mark.parametrize("shift", [128, 512])
@pytest.mark.parametrize("head_dim", HEAD_DIMS)
def test_descriptor_start_off_the_tile_base_misreads(head_dim, shift):
    s = build_scene(head_dim)
    keys = KEY_TILE[head_dim]
    assert _differs(read_k_major(s.smem, k_major_step_desc(s.base["q"] + shift, M_ROWS, 0), M_ROWS),
                    s.mats["q"][:, :16])
    assert _differs(read_mn_major(s.smem, v_step_desc(s.base["v"] + shift, keys, 0, 0), head_dim // 2),
                    s.mats["v"][:16, :head_dim // 2])


@pytest.mark.parametrize("head_dim", HEAD_DIMS)
def test_non_zero_base_offset_is_refused(head_dim):
    s = build_scene(head_dim)
    with pytest.raises(ValueError, match="base offset"):
        read_k_major(s.smem, _with_field(k_major_step_desc(s.base["q"], M_ROWS, 0), 49, 3, 4), M_ROWS)


@pytest.mark.parametrize("lbo_of", ["1024", "half_box", "two_boxes"])
@pytest.mark.parametrize("head_dim", [128, 256, 512])   # N > 64: the MMA spans several V boxes
def test_wrong_lbo_mn_major_misreads(head_dim, lbo_of):
    s = build_scene(head_dim)
    keys = KEY_TILE[head_dim]
    lbo = {"1024": 1024, "half_box": keys * 64, "two_boxes": keys * 256}[lbo_of]
    for n0, n in _v_chunks(head_dim):
        for k in _k_steps(keys):
            bad = v_step_desc(s.base["v"], keys, n0, k, lbo=lbo)
            assert _differs(read_mn_major(s.smem, bad, n), s.mats["v"][16 * k:16 * k + 16, n0:n0 + n]), (n0, k)
