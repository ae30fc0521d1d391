// fmha sm_100a: constexpr encoders (host and device) of the two descriptors a tcgen05.mma reads:
//   * the 32-bit instruction descriptor of kind::f16 (PTX ISA 9.7.16.4.2 "Instruction descriptor",
//     Table 42 in ISA 9.1), and
//   * the 64-bit shared-memory matrix descriptor (9.7.16.4.1 "Shared memory descriptor", Table 40).
// Bit layouts and every worked value below are those of shared/BLACKWELL-FACTS.md (§Instruction
// descriptor, §Shared-memory descriptor: hand-encoded = CUTLASS's encoders = the probes' SASS).
// ptxas accepts ANY descriptor constant without a warning, so these static_asserts, and the Python
// mirror in tests/test_sm100_build.py, are the only checks a bit-layout slip meets before hardware.
//
// The values are checked against the ISA tables, CUTLASS's encoders and SASS immediates
// (tests/test_sm100_build.py, tests/test_sm100_kernel.py), not against an MMA's result.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define FMHA_SM100_HD __host__ __device__
#else
#define FMHA_SM100_HD
#endif

namespace fmha {
namespace sm100 {

// ---------------------------------------------------------------------------
// Instruction descriptor, kind::f16 (dense, cta_group::1, not .ws):
//   bits  0-1 sparsity selector = 0, 2 sparse = 0, 3 saturate = 0
//   bits  4-5 D type: F16 = 0, F32 = 1          bit  6 reserved
//   bits  7-9 A type: F16 = 0, BF16 = 1         bits 10-12 B type (same codes)
//   bit  13/14 negate A/B = 0                   bit 15/16 transpose A/B: 0 = K-major, 1 = MN-major
//   bits 17-22 N >> 3                           bit 23 reserved (0)
//   bits 24-28 M >> 4                           bit 29 reserved, bits 30-31 .ws shift = 0
// M and N exist only here (the PTX instruction carries no shape); K is 16.
// ---------------------------------------------------------------------------

enum class AccumType : uint32_t { kF16 = 0, kF32 = 1 };
enum class InputType : uint32_t { kF16 = 0, kBF16 = 1 };
enum class Major : uint32_t { kK = 0, kMN = 1 };

FMHA_SM100_HD constexpr uint32_t make_idesc_f16(int m, int n, InputType ab, AccumType d, Major a_major,
                                                Major b_major) {
  return (static_cast<uint32_t>(d) << 4) | (static_cast<uint32_t>(ab) << 7) | (static_cast<uint32_t>(ab) << 10) |
         (static_cast<uint32_t>(a_major) << 15) | (static_cast<uint32_t>(b_major) << 16) |
         ((static_cast<uint32_t>(n) >> 3) << 17) | ((static_cast<uint32_t>(m) >> 4) << 24);
}

// Dense kind::f16 shapes of cta_group::1 (ISA Table 39 as BLACKWELL-FACTS.md gives it): M in {64, 128},
// N = 8 .. 256 in steps of 8. (Every N the design uses is a multiple of 16.)
FMHA_SM100_HD constexpr bool idesc_f16_shape_ok(int m, int n) {
  return (m == 64 || m == 128) && n >= 8 && n <= 256 && n % 8 == 0;
}

// The checked form for kernels: a bad shape fails to compile instead of reaching ptxas, which would
// accept it silently.
template <int M, int N, InputType AB, Major AMajor, Major BMajor, AccumType D = AccumType::kF32>
struct IdescF16 {
  static_assert(idesc_f16_shape_ok(M, N), "tcgen05.mma kind::f16 cta_group::1: M in {64,128}, N in 8..256 step 8");
  static constexpr uint32_t value = make_idesc_f16(M, N, AB, D, AMajor, BMajor);
};

// Field readers (what tests and SASS checks decode).
FMHA_SM100_HD constexpr int idesc_m(uint32_t idesc) { return static_cast<int>((idesc >> 24) & 0x1F) << 4; }
FMHA_SM100_HD constexpr int idesc_n(uint32_t idesc) { return static_cast<int>((idesc >> 17) & 0x3F) << 3; }
// Bits that must be 0 for dense, non-.ws kind::f16: 0-3, 6, 13-14, 23, 29-31.
constexpr uint32_t kIdescF16ZeroMask = 0xFu | (1u << 6) | (3u << 13) | (1u << 23) | (7u << 29);

// ---------------------------------------------------------------------------
// Shared-memory descriptor (sm_100; 64 bits):
//   bits  0-13 start address: (addr & 0x3FFFF) >> 4      bits 14-15 reserved
//   bits 16-29 LBO >> 4 (relative mode)                   bits 30-31 reserved
//   bits 32-45 SBO >> 4
//   bits 46-48 fixed 0b001: BIT 46 MUST BE 1 on sm_100 (the one difference from an sm_90 wgmma
//              descriptor of the same K-major SW128 tile)
//   bits 49-51 base offset: 0 when the swizzle pattern starts on its boundary (1024 B for 128B)
//   bit  52    LBO mode: 0 relative (always 0 on sm_100a)  bits 53-60 fixed 0
//   bits 61-63 swizzle: 0 none, 1 128B with 32B atom, 2 128B, 4 64B, 6 32B (3/5/7 invalid). Note the
//              sm_90 numeric code of 128B (1, at bits 62-63) is NOT the sm_100 code: 128B is 2 here.
// Start, LBO and SBO are byte values, multiples of 16.
// K-major swizzled (the design's Q, K, P, P^T): LBO unused ("assumed 1", written as 16 B = field 1),
// SBO = the next 8-row group = 8 x 128 B = 1024 B when packed. MN-major SW128 (V as the A or B operand):
// LBO = the next 64-element panel along MN (one TMA box), SBO = the next 8 K-rows = 1024 B.
// ---------------------------------------------------------------------------

enum class Swizzle : uint64_t { kNone = 0, k128B32BAtom = 1, k128B = 2, k64B = 4, k32B = 6 };

FMHA_SM100_HD constexpr uint64_t make_smem_desc(uint32_t start_addr, uint32_t lbo_bytes, uint32_t sbo_bytes,
                                                Swizzle swizzle, uint32_t base_offset = 0) {
  return static_cast<uint64_t>((start_addr & 0x3FFFFu) >> 4) |
         (static_cast<uint64_t>((lbo_bytes >> 4) & 0x3FFFu) << 16) |
         (static_cast<uint64_t>((sbo_bytes >> 4) & 0x3FFFu) << 32) | (uint64_t{1} << 46) |
         (static_cast<uint64_t>(base_offset & 7u) << 49) | (static_cast<uint64_t>(swizzle) << 61);
}

// K-major, 128B swizzle, 128-byte rows (64 bf16/f16 elements), 8-row groups packed 1024 B apart.
FMHA_SM100_HD constexpr uint64_t make_smem_desc_k_sw128(uint32_t start_addr, uint32_t sbo_bytes = 1024) {
  return make_smem_desc(start_addr, 16, sbo_bytes, Swizzle::k128B);
}

// MN-major, 128B swizzle: lbo_bytes = one 64-element MN panel (a TMA box), SBO = 8 K-rows of 128 B.
FMHA_SM100_HD constexpr uint64_t make_smem_desc_mn_sw128(uint32_t start_addr, uint32_t lbo_bytes,
                                                         uint32_t sbo_bytes = 1024) {
  return make_smem_desc(start_addr, lbo_bytes, sbo_bytes, Swizzle::k128B);
}

// The descriptor `byte_offset` bytes further on (a multiple of 16): the K16 step inside a K-major SW128
// row is +32 B (field + 2), the MN-major V step +2048 B (16 keys x 128 B). Shared addresses are below
// 2^18, so adding to the 14-bit field cannot carry into bit 14 for an in-range address.
FMHA_SM100_HD constexpr uint64_t smem_desc_advance(uint64_t desc, uint32_t byte_offset) {
  return desc + (byte_offset >> 4);
}

// Field readers.
FMHA_SM100_HD constexpr uint32_t smem_desc_start(uint64_t d) { return static_cast<uint32_t>(d & 0x3FFF) << 4; }
FMHA_SM100_HD constexpr uint32_t smem_desc_lbo(uint64_t d) { return static_cast<uint32_t>((d >> 16) & 0x3FFF) << 4; }
FMHA_SM100_HD constexpr uint32_t smem_desc_sbo(uint64_t d) { return static_cast<uint32_t>((d >> 32) & 0x3FFF) << 4; }
FMHA_SM100_HD constexpr uint32_t smem_desc_swizzle(uint64_t d) { return static_cast<uint32_t>(d >> 61); }
FMHA_SM100_HD constexpr bool smem_desc_bit46(uint64_t d) { return ((d >> 46) & 1) != 0; }

// ---------------------------------------------------------------------------
// Worked values (BLACKWELL-FACTS.md; design-sm100.md §1 for the kernel's own MMAs).
// ---------------------------------------------------------------------------
namespace check {
constexpr InputType BF = InputType::kBF16;
constexpr InputType HF = InputType::kF16;
constexpr AccumType F32 = AccumType::kF32;
constexpr Major K = Major::kK;
constexpr Major MN = Major::kMN;

// BLACKWELL-FACTS.md §Instruction descriptor: bf16 x bf16 -> f32, both K-major unless stated.
static_assert(make_idesc_f16(128, 128, BF, F32, K, K) == 0x08200490u, "idesc M128 N128 bf16");
static_assert(((1u << 4) | (1u << 7) | (1u << 10) | (16u << 17) | (8u << 24)) == 0x08200490u, "idesc by hand");
static_assert(make_idesc_f16(64, 64, BF, F32, K, K) == 0x04100490u, "idesc M64 N64 bf16");
static_assert(make_idesc_f16(64, 128, BF, F32, K, K) == 0x04200490u, "idesc M64 N128 bf16");
static_assert(make_idesc_f16(128, 16, BF, F32, K, K) == 0x08040490u, "idesc M128 N16 bf16");
static_assert(make_idesc_f16(128, 128, BF, F32, K, MN) == 0x08210490u, "idesc M128 N128 bf16, B MN-major");
static_assert(make_idesc_f16(128, 256, HF, F32, K, K) == 0x08400010u, "idesc M128 N256 f16");
static_assert(IdescF16<128, 128, InputType::kBF16, Major::kK, Major::kK>::value == 0x08200490u, "IdescF16");
static_assert(idesc_m(0x08200490u) == 128 && idesc_n(0x08200490u) == 128, "idesc readers");
static_assert(idesc_m(0x04088490u) == 64 && idesc_n(0x04088490u) == 32, "idesc readers");
static_assert((0x08200490u & kIdescF16ZeroMask) == 0, "idesc zero bits");

// design-sm100.md §1 "Instruction descriptors" (bf16; fp16 clears bits 7 and 10).
static_assert(make_idesc_f16(128, 32, BF, F32, K, K) == 0x08080490u, "swapped S^T");
static_assert(make_idesc_f16(128, 32, HF, F32, K, K) == 0x08080010u, "swapped S^T, fp16");
static_assert(make_idesc_f16(128, 32, BF, F32, MN, K) == 0x08088490u, "swapped O^T, D >= 128");
static_assert(make_idesc_f16(64, 32, BF, F32, MN, K) == 0x04088490u, "swapped O^T, D = 64");
static_assert(make_idesc_f16(64, 128, BF, F32, K, K) == 0x04200490u, "rows S, tile 128");
static_assert(make_idesc_f16(64, 64, BF, F32, K, K) == 0x04100490u, "rows S, tile 64");
static_assert(make_idesc_f16(64, 32, BF, F32, K, K) == 0x04080490u, "rows S, tile 32");
static_assert(make_idesc_f16(64, 32, BF, F32, K, MN) == 0x04090490u, "rows O, N = 32 (no head dim uses it)");
static_assert(make_idesc_f16(64, 64, BF, F32, K, MN) == 0x04110490u, "rows O, D = 64");
static_assert(make_idesc_f16(64, 128, BF, F32, K, MN) == 0x04210490u, "rows O, D = 128");
static_assert(make_idesc_f16(64, 256, BF, F32, K, MN) == 0x04410490u, "rows O, D = 256, and each half at D = 512");
static_assert(idesc_f16_shape_ok(64, 8) && idesc_f16_shape_ok(128, 256) && !idesc_f16_shape_ok(256, 128) &&
                  !idesc_f16_shape_ok(32, 64) && !idesc_f16_shape_ok(128, 0) && !idesc_f16_shape_ok(128, 264) &&
                  !idesc_f16_shape_ok(128, 20),
              "kind::f16 cta_group::1 shapes");

// BLACKWELL-FACTS.md §Shared-memory descriptor, worked descriptor: K-major bf16 128 x 64 (and 64 x 64),
// SW128, offset 0: start 0, LBO field 1, SBO 1024, bit 46, swizzle 2.
static_assert(make_smem_desc_k_sw128(0) == 0x4000404000010000ull, "K SW128 128x64");
static_assert(make_smem_desc(0, 16, 1024, Swizzle::k128B) == 0x4000404000010000ull, "K SW128 128x64");
static_assert(static_cast<uint32_t>(make_smem_desc_k_sw128(0) >> 32) == 0x40004040u, "SASS high word");
// Per K16 step inside the 128-byte row: start += 32 B (the probe SASS shows 0x10002, 0x10004, 0x10006).
static_assert(static_cast<uint32_t>(smem_desc_advance(make_smem_desc_k_sw128(0), 32)) == 0x10002u, "K16 step 1");
static_assert(static_cast<uint32_t>(smem_desc_advance(make_smem_desc_k_sw128(0), 64)) == 0x10004u, "K16 step 2");
static_assert(static_cast<uint32_t>(smem_desc_advance(make_smem_desc_k_sw128(0), 96)) == 0x10006u, "K16 step 3");
static_assert(make_smem_desc_k_sw128(32) == smem_desc_advance(make_smem_desc_k_sw128(0), 32), "advance = rebuild");
// Other CUTLASS values (start 0).
static_assert(make_smem_desc(0, 16, 512, Swizzle::k64B) == 0x8000402000010000ull, "K SW64 128x32");
static_assert(make_smem_desc(0, 16, 256, Swizzle::k32B) == 0xC000401000010000ull, "K SW32 128x16");
static_assert(make_smem_desc(0, 2048, 128, Swizzle::kNone) == 0x0000400800800000ull, "K no swizzle 128x16");
static_assert(make_smem_desc_mn_sw128(0, 1024, 2048) == 0x4000408000400000ull, "MN SW128 N128 x K64");
// [model] V tile [64 kv][128 d] as two [64][64] boxes, MN-major: LBO 8192 (one box), SBO 1024, +2048 B per K16.
static_assert(make_smem_desc_mn_sw128(0, 8192) == 0x4000404002000000ull, "V MN SW128");
static_assert(smem_desc_lbo(make_smem_desc_mn_sw128(0, 8192)) == 8192 &&
                  smem_desc_sbo(make_smem_desc_mn_sw128(0, 8192)) == 1024 &&
                  smem_desc_start(smem_desc_advance(make_smem_desc_mn_sw128(0, 8192), 2048)) == 2048,
              "V descriptor fields");
// The sm_90 wgmma descriptor of the same tile differs only in bit 46 (sm_90: 128B = 1 at bits 62-63).
static_assert((make_smem_desc_k_sw128(0) ^ ((uint64_t{1} << 62) | (uint64_t{64} << 32) | (uint64_t{1} << 16))) ==
                  (uint64_t{1} << 46),
              "sm90 vs sm100 descriptor");
static_assert(smem_desc_bit46(make_smem_desc_k_sw128(0)) && smem_desc_swizzle(make_smem_desc_k_sw128(0)) == 2,
              "fixed bit 46, swizzle code 2");
// The start field wraps at 2^18 bytes (the shared window): 0x40000 encodes as 0.
static_assert(smem_desc_start(make_smem_desc_k_sw128(0x40000 + 0x400)) == 0x400, "18-bit start address");
}  // namespace check

}  // namespace sm100
}  // namespace fmha
