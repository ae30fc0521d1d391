// fmha sm_90a: inline-PTX wrappers of the instructions that need the architecture-specific target
// sm_90a (wgmma, setmaxnreg), one small function per instruction, each naming its PTX ISA section
// (the conventions of common/ptx.cuh). Compiled for another target they trap.
#pragma once

#include <cstdint>

#include "../common/ptx.cuh"

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define FMHA_SM90_ENABLED 1
#else
#define FMHA_SM90_ENABLED 0
#endif

namespace fmha {
namespace ptx {

// ---------------------------------------------------------------------------
// wgmma (PTX 9.7.15 "Asynchronous Warpgroup Level Matrix Multiply-Accumulate")
// ---------------------------------------------------------------------------

// wgmma.fence (9.7.15.7.1): orders prior register/shared writes of the
// accumulator and A fragment before the next wgmma.mma_async reads them.
__device__ __forceinline__ void wgmma_fence() {
#if FMHA_SM90_ENABLED
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#else
  FMHA_TRAP_UNSUPPORTED();
#endif
}

// wgmma.commit_group (9.7.15.7.2): closes the group of pending mma_async ops.
__device__ __forceinline__ void wgmma_commit_group() {
#if FMHA_SM90_ENABLED
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#else
  FMHA_TRAP_UNSUPPORTED();
#endif
}

// wgmma.wait_group N (9.7.15.7.3): waits until at most N groups are pending.
template <int N>
__device__ __forceinline__ void wgmma_wait_group() {
#if FMHA_SM90_ENABLED
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
#else
  FMHA_TRAP_UNSUPPORTED();
#endif
}

// setmaxnreg (PTX 9.7.17.1 "setmaxnreg", sm_90a): re-balance the per-thread
// register budget of a whole warpgroup (count in 24..256, multiple of 8).
// Only honoured in kernels with __launch_bounds__(threads, 1).
template <int kRegs>
__device__ __forceinline__ void setmaxnreg_inc() {
  static_assert(kRegs >= 24 && kRegs <= 256 && kRegs % 8 == 0, "setmaxnreg count");
#if FMHA_SM90_ENABLED
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegs));
#else
  FMHA_TRAP_UNSUPPORTED();
#endif
}
template <int kRegs>
__device__ __forceinline__ void setmaxnreg_dec() {
  static_assert(kRegs >= 24 && kRegs <= 256 && kRegs % 8 == 0, "setmaxnreg count");
#if FMHA_SM90_ENABLED
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegs));
#else
  FMHA_TRAP_UNSUPPORTED();
#endif
}

// Shared-memory matrix descriptor (9.7.15.5.1.2.2 "Matrix Descriptor Format"):
//   bits  0-13 start address >> 4 (shared window, 18-bit address)
//   bits 16-29 leading-dimension byte offset >> 4
//   bits 32-45 stride-dimension byte offset >> 4
//   bits 49-51 base offset (0: every swizzled tile starts on a 1024 B boundary)
//   bits 62-63 swizzle mode (1 = 128B swizzle)
constexpr uint64_t kDescSwizzle128B = 1;

__device__ __forceinline__ uint64_t make_smem_desc_sw128(uint32_t smem_byte_addr, uint32_t lbo_bytes,
                                                         uint32_t sbo_bytes) {
  uint64_t d = 0;
  d |= static_cast<uint64_t>((smem_byte_addr & 0x3FFFF) >> 4);
  d |= static_cast<uint64_t>((lbo_bytes >> 4) & 0x3FFF) << 16;
  d |= static_cast<uint64_t>((sbo_bytes >> 4) & 0x3FFF) << 32;
  d |= kDescSwizzle128B << 62;
  return d;
}

// A descriptor built once and moved by byte offsets: the start-address field holds addr >> 4 in bits
// 0-13 and every shared-memory address is below 2^18, so adding (offset >> 4) to the low word never
// carries out of the field. Building each descriptor from its address (mask, shift, or) cost about 7
// instructions a wgmma; this costs one add on the low word.
struct SmemDescSw128 {
  uint32_t lo, hi;
  __device__ __forceinline__ SmemDescSw128(uint32_t smem_byte_addr, uint32_t lbo_bytes, uint32_t sbo_bytes) {
    const uint64_t d = make_smem_desc_sw128(smem_byte_addr, lbo_bytes, sbo_bytes);
    lo = static_cast<uint32_t>(d);
    hi = static_cast<uint32_t>(d >> 32);
  }
  // The descriptor of the matrix `byte_offset` bytes further on (a multiple of 16).
  __device__ __forceinline__ uint64_t at(uint32_t byte_offset) const {
    return (static_cast<uint64_t>(hi) << 32) | (lo + (byte_offset >> 4));
  }
};

// wgmma.mma_async (9.7.15.5.2), dense f16/bf16 inputs, f32 accumulator.
//   wgmma_ss_*: A and B from descriptors, both K-major (imm-trans-a = imm-trans-b = 0): S = Q K^T.
//   wgmma_rs_*: A from registers (4 x b32 per thread, 8 halves), B from a
//               descriptor, MN-major (imm-trans-b = 1): O += P V.
// scale_d != 0 accumulates (D += A B), 0 overwrites (D = A B). One function per shape, the input
// type a template parameter; the accumulator operand lists are spelled out once per size below.
#define FMHA_ACC_REGS_16 \
  "%0, %1, %2, %3, %4, %5, %6, %7, " \
  "%8, %9, %10, %11, %12, %13, %14, %15"
#define FMHA_ACC_OPERANDS_16(d) \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
  "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
#define FMHA_ACC_REGS_24 \
  "%0, %1, %2, %3, %4, %5, %6, %7, " \
  "%8, %9, %10, %11, %12, %13, %14, %15, " \
  "%16, %17, %18, %19, %20, %21, %22, %23"
#define FMHA_ACC_OPERANDS_24(d) \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
  "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), \
  "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23])
#define FMHA_ACC_REGS_32 \
  "%0, %1, %2, %3, %4, %5, %6, %7, " \
  "%8, %9, %10, %11, %12, %13, %14, %15, " \
  "%16, %17, %18, %19, %20, %21, %22, %23, " \
  "%24, %25, %26, %27, %28, %29, %30, %31"
#define FMHA_ACC_OPERANDS_32(d) \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
  "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), \
  "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), \
  "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
#define FMHA_ACC_REGS_64 \
  "%0, %1, %2, %3, %4, %5, %6, %7, " \
  "%8, %9, %10, %11, %12, %13, %14, %15, " \
  "%16, %17, %18, %19, %20, %21, %22, %23, " \
  "%24, %25, %26, %27, %28, %29, %30, %31, " \
  "%32, %33, %34, %35, %36, %37, %38, %39, " \
  "%40, %41, %42, %43, %44, %45, %46, %47, " \
  "%48, %49, %50, %51, %52, %53, %54, %55, " \
  "%56, %57, %58, %59, %60, %61, %62, %63"
#define FMHA_ACC_OPERANDS_64(d) \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
  "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), \
  "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), \
  "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), \
  "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), \
  "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), \
  "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), \
  "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
#define FMHA_ACC_REGS_128 \
  "%0, %1, %2, %3, %4, %5, %6, %7, " \
  "%8, %9, %10, %11, %12, %13, %14, %15, " \
  "%16, %17, %18, %19, %20, %21, %22, %23, " \
  "%24, %25, %26, %27, %28, %29, %30, %31, " \
  "%32, %33, %34, %35, %36, %37, %38, %39, " \
  "%40, %41, %42, %43, %44, %45, %46, %47, " \
  "%48, %49, %50, %51, %52, %53, %54, %55, " \
  "%56, %57, %58, %59, %60, %61, %62, %63, " \
  "%64, %65, %66, %67, %68, %69, %70, %71, " \
  "%72, %73, %74, %75, %76, %77, %78, %79, " \
  "%80, %81, %82, %83, %84, %85, %86, %87, " \
  "%88, %89, %90, %91, %92, %93, %94, %95, " \
  "%96, %97, %98, %99, %100, %101, %102, %103, " \
  "%104, %105, %106, %107, %108, %109, %110, %111, " \
  "%112, %113, %114, %115, %116, %117, %118, %119, " \
  "%120, %121, %122, %123, %124, %125, %126, %127"
#define FMHA_ACC_OPERANDS_128(d) \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
  "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), \
  "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), \
  "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), \
  "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), \
  "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), \
  "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), \
  "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), \
  "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), \
  "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), \
  "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), \
  "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), \
  "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), \
  "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), \
  "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), \
  "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
// "{ p = scale_d != 0; wgmma <shape>.f32.<type>.<type> {acc}, <a>, <b>, p, 1, 1[, trans-a], trans-b; }"
#define FMHA_WGMMA_ASM(shape, type, acc, tail, scale) \
  "{\n.reg .pred p;\n" "setp.ne.b32 p, " scale ", 0;\n" "wgmma.mma_async.sync.aligned." shape ".f32." type "." type "\n" \
  "{" acc "}, " tail ";\n}\n"

// kTransA = 1: A MN-major (the narrow path's V^T, as m64n16k16 below).
template <bool kBf16, bool kTransA = false>
__device__ __forceinline__ void wgmma_ss_m64n32k16(float (&d)[16], uint64_t desc_a, uint64_t desc_b, int scale_d) {
#if FMHA_SM90_ENABLED
  if constexpr (kBf16)
    asm volatile(FMHA_WGMMA_ASM("m64n32k16", "bf16", FMHA_ACC_REGS_16, "%16, %17, p, 1, 1, %19, 0", "%18")
                 : FMHA_ACC_OPERANDS_16(d)
                 : "l"(desc_a), "l"(desc_b), "r"(scale_d), "n"(kTransA ? 1 : 0)
                 : "memory");
  else
    asm volatile(FMHA_WGMMA_ASM("m64n32k16", "f16", FMHA_ACC_REGS_16, "%16, %17, p, 1, 1, %19, 0", "%18")
                 : FMHA_ACC_OPERANDS_16(d)
                 : "l"(desc_a), "l"(desc_b), "r"(scale_d), "n"(kTransA ? 1 : 0)
                 : "memory");
#else
  (void)d; (void)desc_a; (void)desc_b; (void)scale_d;
  FMHA_TRAP_UNSUPPORTED();
#endif
}

// m64n48k16: the 48-key seesaw's Q K^T (three ring stages at D = 512), A and B K-major.
template <bool kBf16>
__device__ __forceinline__ void wgmma_ss_m64n48k16(float (&d)[24], uint64_t desc_a, uint64_t desc_b, int scale_d) {
#if FMHA_SM90_ENABLED
  if constexpr (kBf16)
    asm volatile(FMHA_WGMMA_ASM("m64n48k16", "bf16", FMHA_ACC_REGS_24, "%24, %25, p, 1, 1, 0, 0", "%26")
                 : FMHA_ACC_OPERANDS_24(d)
                 : "l"(desc_a), "l"(desc_b), "r"(scale_d)
                 : "memory");
  else
    asm volatile(FMHA_WGMMA_ASM("m64n48k16", "f16", FMHA_ACC_REGS_24, "%24, %25, p, 1, 1, 0, 0", "%26")
                 : FMHA_ACC_OPERANDS_24(d)
                 : "l"(desc_a), "l"(desc_b), "r"(scale_d)
                 : "memory");
#else
  (void)d; (void)desc_a; (void)desc_b; (void)scale_d;
  FMHA_TRAP_UNSUPPORTED();
#endif
}

// m64n48k16, A from registers (Q fragments held across tiles), B K-major.
template <bool kBf16>
__device__ __forceinline__ void wgmma_rs_m64n48k16_kmajor(float (&d)[24], const uint32_t (&a)[4], uint64_t desc_b,
                                                          int scale_d) {
#if FMHA_SM90_ENABLED
  if constexpr (kBf16)
    asm volatile(FMHA_WGMMA_ASM("m64n48k16", "bf16", FMHA_ACC_REGS_24, "{%24, %25, %26, %27}, %28, p, 1, 1, 0", "%29")
                 : FMHA_ACC_OPERANDS_24(d)
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d)
                 : "memory");
  else
    asm volatile(FMHA_WGMMA_ASM("m64n48k16", "f16", FMHA_ACC_REGS_24, "{%24, %25, %26, %27}, %28, p, 1, 1, 0", "%29")
                 : FMHA_ACC_OPERANDS_24(d)
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d)
                 : "memory");
#else
  (void)d; (void)a; (void)desc_b; (void)scale_d;
  FMHA_TRAP_UNSUPPORTED();
#endif
}

template <bool kBf16>
__device__ __forceinline__ void wgmma_ss_m64n64k16(float (&d)[32], uint64_t desc_a, uint64_t desc_b, int scale_d) {
#if FMHA_SM90_ENABLED
  if constexpr (kBf16)
    asm volatile(FMHA_WGMMA_ASM("m64n64k16", "bf16", FMHA_ACC_REGS_32, "%32, %33, p, 1, 1, 0, 0", "%34")
                 : FMHA_ACC_OPERANDS_32(d)
                 : "l"(desc_a), "l"(desc_b), "r"(scale_d)
                 : "memory");
  else
    asm volatile(FMHA_WGMMA_ASM("m64n64k16", "f16", FMHA_ACC_REGS_32, "%32, %33, p, 1, 1, 0, 0", "%34")
                 : FMHA_ACC_OPERANDS_32(d)
                 : "l"(desc_a), "l"(desc_b), "r"(scale_d)
                 : "memory");
#else
  (void)d; (void)desc_a; (void)desc_b; (void)scale_d;
  FMHA_TRAP_UNSUPPORTED();
#endif
}

template <bool kBf16>
__device__ __forceinline__ void wgmma_ss_m64n128k16(float (&d)[64], uint64_t desc_a, uint64_t desc_b, int scale_d) {
#if FMHA_SM90_ENABLED
  if constexpr (kBf16)
    asm volatile(FMHA_WGMMA_ASM("m64n128k16", "bf16", FMHA_ACC_REGS_64, "%64, %65, p, 1, 1, 0, 0", "%66")
                 : FMHA_ACC_OPERANDS_64(d)
                 : "l"(desc_a), "l"(desc_b), "r"(scale_d)
                 : "memory");
  else
    asm volatile(FMHA_WGMMA_ASM("m64n128k16", "f16", FMHA_ACC_REGS_64, "%64, %65, p, 1, 1, 0, 0", "%66")
                 : FMHA_ACC_OPERANDS_64(d)
                 : "l"(desc_a), "l"(desc_b), "r"(scale_d)
                 : "memory");
#else
  (void)d; (void)desc_a; (void)desc_b; (void)scale_d;
  FMHA_TRAP_UNSUPPORTED();
#endif
}

// kTransB: B MN-major (imm-trans-b = 1: V in P V, the default) or K-major (0: K in Q K^T, with Q fragments
// held in registers, as the 64-key seesaw does).
template <bool kBf16, bool kTransB = true>
__device__ __forceinline__ void wgmma_rs_m64n64k16(float (&d)[32], const uint32_t (&a)[4], uint64_t desc_b, int scale_d) {
#if FMHA_SM90_ENABLED
  if constexpr (kBf16)
    asm volatile(FMHA_WGMMA_ASM("m64n64k16", "bf16", FMHA_ACC_REGS_32, "{%32, %33, %34, %35}, %36, p, 1, 1, %38", "%37")
                 : FMHA_ACC_OPERANDS_32(d)
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d), "n"(kTransB ? 1 : 0)
                 : "memory");
  else
    asm volatile(FMHA_WGMMA_ASM("m64n64k16", "f16", FMHA_ACC_REGS_32, "{%32, %33, %34, %35}, %36, p, 1, 1, %38", "%37")
                 : FMHA_ACC_OPERANDS_32(d)
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d), "n"(kTransB ? 1 : 0)
                 : "memory");
#else
  (void)d; (void)a; (void)desc_b; (void)scale_d;
  FMHA_TRAP_UNSUPPORTED();
#endif
}

template <bool kBf16>
__device__ __forceinline__ void wgmma_rs_m64n128k16(float (&d)[64], const uint32_t (&a)[4], uint64_t desc_b, int scale_d) {
#if FMHA_SM90_ENABLED
  if constexpr (kBf16)
    asm volatile(FMHA_WGMMA_ASM("m64n128k16", "bf16", FMHA_ACC_REGS_64, "{%64, %65, %66, %67}, %68, p, 1, 1, 1", "%69")
                 : FMHA_ACC_OPERANDS_64(d)
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d)
                 : "memory");
  else
    asm volatile(FMHA_WGMMA_ASM("m64n128k16", "f16", FMHA_ACC_REGS_64, "{%64, %65, %66, %67}, %68, p, 1, 1, 1", "%69")
                 : FMHA_ACC_OPERANDS_64(d)
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d)
                 : "memory");
#else
  (void)d; (void)a; (void)desc_b; (void)scale_d;
  FMHA_TRAP_UNSUPPORTED();
#endif
}

template <bool kBf16>
__device__ __forceinline__ void wgmma_rs_m64n256k16(float (&d)[128], const uint32_t (&a)[4], uint64_t desc_b, int scale_d) {
#if FMHA_SM90_ENABLED
  if constexpr (kBf16)
    asm volatile(FMHA_WGMMA_ASM("m64n256k16", "bf16", FMHA_ACC_REGS_128, "{%128, %129, %130, %131}, %132, p, 1, 1, 1", "%133")
                 : FMHA_ACC_OPERANDS_128(d)
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d)
                 : "memory");
  else
    asm volatile(FMHA_WGMMA_ASM("m64n256k16", "f16", FMHA_ACC_REGS_128, "{%128, %129, %130, %131}, %132, p, 1, 1, 1", "%133")
                 : FMHA_ACC_OPERANDS_128(d)
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d)
                 : "memory");
#else
  (void)d; (void)a; (void)desc_b; (void)scale_d;
  FMHA_TRAP_UNSUPPORTED();
#endif
}

// m64n256k16, A from a K-major descriptor (imm-trans-a = 0), B from an MN-major one (imm-trans-b = 1):
// O += P V with P in shared memory (the D = 512 seesaw loop, where one warpgroup computes P for both).
template <bool kBf16>
__device__ __forceinline__ void wgmma_ss_m64n256k16_mn_b(float (&d)[128], uint64_t desc_a, uint64_t desc_b,
                                                         int scale_d) {
#if FMHA_SM90_ENABLED
  if constexpr (kBf16)
    asm volatile(FMHA_WGMMA_ASM("m64n256k16", "bf16", FMHA_ACC_REGS_128, "%128, %129, p, 1, 1, 0, 1", "%130")
                 : FMHA_ACC_OPERANDS_128(d)
                 : "l"(desc_a), "l"(desc_b), "r"(scale_d)
                 : "memory");
  else
    asm volatile(FMHA_WGMMA_ASM("m64n256k16", "f16", FMHA_ACC_REGS_128, "%128, %129, p, 1, 1, 0, 1", "%130")
                 : FMHA_ACC_OPERANDS_128(d)
                 : "l"(desc_a), "l"(desc_b), "r"(scale_d)
                 : "memory");
#else
  (void)d; (void)desc_a; (void)desc_b; (void)scale_d;
  FMHA_TRAP_UNSUPPORTED();
#endif
}

// m64n32k16, A from registers (a Q fragment held across tiles), B from a K-major descriptor (imm-trans-b = 0):
// part of S = Q K^T at D = 512 (mma.cuh qk_gemm, Config::q_reg_cols).
template <bool kBf16>
__device__ __forceinline__ void wgmma_rs_m64n32k16_kmajor(float (&d)[16], const uint32_t (&a)[4], uint64_t desc_b,
                                                          int scale_d) {
#if FMHA_SM90_ENABLED
  if constexpr (kBf16)
    asm volatile(FMHA_WGMMA_ASM("m64n32k16", "bf16", FMHA_ACC_REGS_16, "{%16, %17, %18, %19}, %20, p, 1, 1, 0", "%21")
                 : FMHA_ACC_OPERANDS_16(d)
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d)
                 : "memory");
  else
    asm volatile(FMHA_WGMMA_ASM("m64n32k16", "f16", FMHA_ACC_REGS_16, "{%16, %17, %18, %19}, %20, p, 1, 1, 0", "%21")
                 : FMHA_ACC_OPERANDS_16(d)
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d)
                 : "memory");
#else
  (void)d; (void)a; (void)desc_b; (void)scale_d;
  FMHA_TRAP_UNSUPPORTED();
#endif
}

// m64n16k16, A and B from descriptors, for the narrow (swapped) decode path where the 64 M rows
// are keys (S^T = K Q^T) or head-dim columns (O^T = V^T P^T) and N = 16 query rows.
// kTransA = 1: A is MN-major in shared memory (V^T read from the token-major V tile);
// imm-trans-a is allowed for 16-bit inputs from descriptors (9.7.15.5.2). B is K-major.
#define FMHA_ACC_REGS_8 "%0, %1, %2, %3, %4, %5, %6, %7"
#define FMHA_ACC_OPERANDS_8(d) \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
template <bool kBf16, bool kTransA>
__device__ __forceinline__ void wgmma_ss_m64n16k16(float (&d)[8], uint64_t desc_a, uint64_t desc_b, int scale_d) {
#if FMHA_SM90_ENABLED
  // imm-trans-a is an immediate operand ("n"), so one asm string per input type serves both layouts.
  if constexpr (kBf16)
    asm volatile(FMHA_WGMMA_ASM("m64n16k16", "bf16", FMHA_ACC_REGS_8, "%8, %9, p, 1, 1, %11, 0", "%10")
                 : FMHA_ACC_OPERANDS_8(d)
                 : "l"(desc_a), "l"(desc_b), "r"(scale_d), "n"(kTransA ? 1 : 0)
                 : "memory");
  else
    asm volatile(FMHA_WGMMA_ASM("m64n16k16", "f16", FMHA_ACC_REGS_8, "%8, %9, p, 1, 1, %11, 0", "%10")
                 : FMHA_ACC_OPERANDS_8(d)
                 : "l"(desc_a), "l"(desc_b), "r"(scale_d), "n"(kTransA ? 1 : 0)
                 : "memory");
#else
  (void)d; (void)desc_a; (void)desc_b; (void)scale_d;
  FMHA_TRAP_UNSUPPORTED();
#endif
}

// The narrow path's wgmma over its N = 16 or 32 query rows.
template <int N, bool kBf16, bool kTransA>
__device__ __forceinline__ void wgmma_ss_narrow(float (&d)[N / 2], uint64_t desc_a, uint64_t desc_b, int scale_d) {
  static_assert(N == 16 || N == 32, "wgmma_ss_narrow: N not instantiated");
  if constexpr (N == 16) wgmma_ss_m64n16k16<kBf16, kTransA>(d, desc_a, desc_b, scale_d);
  else wgmma_ss_m64n32k16<kBf16, kTransA>(d, desc_a, desc_b, scale_d);
}

// Compile-time dispatch over N (kBf16: bf16 inputs, else f16).
template <int N, bool kBf16>
__device__ __forceinline__ void wgmma_ss(float (&d)[N / 2], uint64_t desc_a, uint64_t desc_b, int scale_d) {
  static_assert(N == 32 || N == 48 || N == 64 || N == 128, "wgmma_ss: N not instantiated");
  if constexpr (N == 32) wgmma_ss_m64n32k16<kBf16>(d, desc_a, desc_b, scale_d);
  else if constexpr (N == 48) wgmma_ss_m64n48k16<kBf16>(d, desc_a, desc_b, scale_d);
  else if constexpr (N == 64) wgmma_ss_m64n64k16<kBf16>(d, desc_a, desc_b, scale_d);
  else wgmma_ss_m64n128k16<kBf16>(d, desc_a, desc_b, scale_d);
}

// A from registers, B K-major (Q K^T with Q fragments held in registers).
template <int N, bool kBf16>
__device__ __forceinline__ void wgmma_rs_kmajor(float (&d)[N / 2], const uint32_t (&a)[4], uint64_t desc_b, int scale_d) {
  static_assert(N == 32 || N == 48 || N == 64, "wgmma_rs_kmajor: N not instantiated");
  if constexpr (N == 32) wgmma_rs_m64n32k16_kmajor<kBf16>(d, a, desc_b, scale_d);
  else if constexpr (N == 48) wgmma_rs_m64n48k16_kmajor<kBf16>(d, a, desc_b, scale_d);
  else wgmma_rs_m64n64k16<kBf16, false>(d, a, desc_b, scale_d);
}

template <int N, bool kBf16>
__device__ __forceinline__ void wgmma_rs(float (&d)[N / 2], const uint32_t (&a)[4], uint64_t desc_b, int scale_d) {
  static_assert(N == 64 || N == 128 || N == 256, "wgmma_rs: N not instantiated");
  if constexpr (N == 64) wgmma_rs_m64n64k16<kBf16>(d, a, desc_b, scale_d);
  else if constexpr (N == 128) wgmma_rs_m64n128k16<kBf16>(d, a, desc_b, scale_d);
  else wgmma_rs_m64n256k16<kBf16>(d, a, desc_b, scale_d);
}

}  // namespace ptx
}  // namespace fmha
