// fmha sm_100a: inline-PTX wrappers of the tcgen05 instructions (5th-generation Tensor Core, Tensor
// Memory) that docs/design-sm100.md needs, one small function per instruction, each naming its PTX ISA
// section (the conventions of common/ptx.cuh). Compiled for any target other than sm_100a they trap.
//
// Used by the sm_100a decode kernel (mainloop_rows.cuh, kernel.cuh); checked by compiling and
// disassembling tests/sm100_probe.cu (tests/test_sm100_build.py) and the kernel (tests/test_sm100_kernel.py).
// The PTX syntax follows the PTX ISA and CCCL's cuda/__ptx/instructions/generated/tcgen05_*.h (nvcc 13.0);
// the SASS each produces is listed in shared/BLACKWELL-FACTS.md §SASS.
//
// Section numbers are those of PTX ISA 9.0/9.1 (chapter 9.7.16, "TensorCore 5th Generation Family
// Instructions"); later ISA versions renumber the chapter (9.7.17, 9.7.18), not the instructions.
//
// Every tcgen05 instruction of one kernel must use the same .cta_group (ptxas rejects a mix): all
// wrappers here are .cta_group::1. The .sync.aligned ones (alloc, dealloc, relinquish, ld, st, wait)
// must be executed by every thread of the warp with the same operands: calling them under a lane-
// divergent condition compiles silently and is undefined (often a hang; BLACKWELL-FACTS.md §Pitfalls).
// mma and commit are issued by a single thread.
//
// Not wrapped, because the design does not use them: the TS form of tcgen05.mma (A from Tensor Memory;
// P lives in shared memory in both of the design's loops, §1 "Where P lives"), tcgen05.cp / shift,
// .ws and cta_group::2, the multicast commit.
#pragma once

#include <cstdint>

#include "../common/ptx.cuh"

// nvcc -arch=sm_100a (or -gencode arch=compute_100a,code=sm_100a) defines __CUDA_ARCH__ = 1000,
// __CUDA_ARCH_SPECIFIC__ = 1000, __CUDA_ARCH_FAMILY_SPECIFIC__ = 1000 and __CUDA_ARCH_FEAT_SM100_ALL
// (nvcc 13.0.88 --dryrun); sm_100f defines only the family macro and sm_100 neither. tcgen05 is enabled
// for sm_100a alone, the one target the design builds; sm_100f / sm_103a would compile it too (ptxas
// accepts tcgen05 there) but get the trapping stubs until someone checks them.
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM100_ALL)
#define FMHA_SM100_ENABLED 1
#else
#define FMHA_SM100_ENABLED 0
#endif

namespace fmha {
namespace ptx {

// Tensor Memory address (9.7.16.1.1 "Tensor Memory Addressing"): lane in bits 31-16, column in 15-0.
// Warp w % 4 of a warpgroup may ld/st only lanes 32 (w % 4) .. +31 (9.7.16.8.1 "Access restrictions").
__host__ __device__ constexpr uint32_t tmem_addr(uint32_t base, uint32_t lane, uint32_t col) {
  return base + (lane << 16) + col;
}

// ---------------------------------------------------------------------------
// Allocation (9.7.16.7.1 "tcgen05.alloc, tcgen05.dealloc, tcgen05.relinquish_alloc_permit").
// One warp allocates and the same warp deallocates, all 32 threads converged. nCols: a power of two in
// [32, 512] (ptxas rejects other immediates); it must not grow between two allocations of a CTA.
// ---------------------------------------------------------------------------

template <uint32_t kCols>
struct TmemColsCheck {
  static_assert(kCols >= 32 && kCols <= 512 && (kCols & (kCols - 1)) == 0,
                "tcgen05.alloc: nCols must be a power of two in [32, 512]");
  static constexpr uint32_t value = kCols;
};

// tcgen05.alloc.cta_group::1: allocates kCols columns (all 128 lanes) and writes their Tensor Memory
// address to *dst_smem (a weak shared-memory store: read it after a fence::before_thread_sync,
// a CTA barrier and fence::after_thread_sync). Blocks while the columns are not available.
template <uint32_t kCols>
__device__ __forceinline__ void tcgen05_alloc(uint32_t* dst_smem) {
#if FMHA_SM100_ENABLED
  asm volatile("tcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32 [%0], %1;\n" ::"r"(smem_addr(dst_smem)),
               "n"(TmemColsCheck<kCols>::value)
               : "memory");
#else
  (void)dst_smem;
  FMHA_TRAP_UNSUPPORTED();
#endif
}

// tcgen05.dealloc.cta_group::1: frees kCols columns at taddr (a prior allocation's address). Every
// allocation must be freed before the kernel exits.
template <uint32_t kCols>
__device__ __forceinline__ void tcgen05_dealloc(uint32_t taddr) {
#if FMHA_SM100_ENABLED
  asm volatile("tcgen05.dealloc.cta_group::1.sync.aligned.b32 %0, %1;\n" ::"r"(taddr),
               "n"(TmemColsCheck<kCols>::value)
               : "memory");
#else
  (void)taddr;
  FMHA_TRAP_UNSUPPORTED();
#endif
}

// tcgen05.relinquish_alloc_permit.cta_group::1: this CTA will allocate no more (a later alloc traps),
// which lets the allocator serve co-resident CTAs.
__device__ __forceinline__ void tcgen05_relinquish_alloc_permit() {
#if FMHA_SM100_ENABLED
  asm volatile("tcgen05.relinquish_alloc_permit.cta_group::1.sync.aligned;\n" ::: "memory");
#else
  FMHA_TRAP_UNSUPPORTED();
#endif
}

// ---------------------------------------------------------------------------
// MMA (9.7.16.10.9.1 "tcgen05.mma") and its completion (9.7.16.12.1 "tcgen05.commit")
// ---------------------------------------------------------------------------

// tcgen05.mma.cta_group::1.kind::f16, A and B from shared-memory descriptors (sm100/descriptors.h,
// 9.7.16.4.1), D in Tensor Memory at d_tmem: D = A B (accumulate == 0) or D += A B. M, N, the f16/bf16
// input type, the f16/f32 accumulator type and the A/B majors are all in the 32-bit instruction
// descriptor idesc (9.7.16.4.2); K is 16. Issued by one thread; asynchronous: completion is observed
// only through tcgen05.commit. SASS: UTCHMMA gdesc[..], gdesc[..], tmem[..], tmem[..], idesc[..], UPT/!UPT.
__device__ __forceinline__ void tcgen05_mma_f16_ss(uint32_t d_tmem, uint64_t a_desc, uint64_t b_desc, uint32_t idesc,
                                                   uint32_t accumulate) {
#if FMHA_SM100_ENABLED
  asm volatile(
      "{\n.reg .pred p;\n"
      "setp.ne.b32 p, %4, 0;\n"
      "tcgen05.mma.cta_group::1.kind::f16 [%0], %1, %2, %3, p;\n}\n" ::"r"(d_tmem),
      "l"(a_desc), "l"(b_desc), "r"(idesc), "r"(accumulate)
      : "memory");
#else
  (void)d_tmem; (void)a_desc; (void)b_desc; (void)idesc; (void)accumulate;
  FMHA_TRAP_UNSUPPORTED();
#endif
}

// tcgen05.commit.cta_group::1.mbarrier::arrive::one: one arrival on the mbarrier once ALL prior
// asynchronous tcgen05 operations (mma, cp, shift) issued by this thread have completed. Implicitly
// performs tcgen05.fence::before_thread_sync. The barrier is addressed through its shared::cta window
// address, which lies inside the shared::cluster window. SASS: UTCBAR [..], URZ.
__device__ __forceinline__ void tcgen05_commit(uint64_t* bar) {
#if FMHA_SM100_ENABLED
  asm volatile("tcgen05.commit.cta_group::1.mbarrier::arrive::one.shared::cluster.b64 [%0];\n" ::"r"(
                   smem_addr(bar))
               : "memory");
#else
  (void)bar;
  FMHA_TRAP_UNSUPPORTED();
#endif
}

// ---------------------------------------------------------------------------
// Thread-synchronisation fences (9.7.16.11.1 "tcgen05.fence"). No SASS of their own (compiler ordering
// only, BLACKWELL-FACTS.md §SASS). Pattern (9.7.16.6): producer side tcgen05 op -> fence::before ->
// barrier/arrive; consumer side barrier/wait -> fence::after -> tcgen05 op.
// ---------------------------------------------------------------------------

// tcgen05.fence::before_thread_sync: orders this thread's prior async tcgen05 operations before a
// following thread synchronisation (bar.sync, mbarrier arrive).
__device__ __forceinline__ void tcgen05_fence_before_thread_sync() {
#if FMHA_SM100_ENABLED
  asm volatile("tcgen05.fence::before_thread_sync;\n" ::: "memory");
#else
  FMHA_TRAP_UNSUPPORTED();
#endif
}

// tcgen05.fence::after_thread_sync: orders the following async tcgen05 operations after a preceding
// thread synchronisation (bar.sync, mbarrier wait).
__device__ __forceinline__ void tcgen05_fence_after_thread_sync() {
#if FMHA_SM100_ENABLED
  asm volatile("tcgen05.fence::after_thread_sync;\n" ::: "memory");
#else
  FMHA_TRAP_UNSUPPORTED();
#endif
}

// ---------------------------------------------------------------------------
// Tensor Memory <-> registers (9.7.16.8.3 "tcgen05.ld", 9.7.16.8.4 "tcgen05.st",
// 9.7.16.8.5 "tcgen05.wait"). Warp-collective; every thread passes the same taddr (the warp's lane base).
//   .32x32b.xN : 32 lanes; thread t owns lane base + t, N consecutive 32-bit columns -> N registers.
//   .16x256b.xN: 16 lanes x 8 columns per repetition, 4 registers per thread per repetition (the
//                m64nN wgmma-like fragment of design-sm100.md §1: unverified mapping, see there).
// The loaded registers are valid only after tcgen05.wait::ld; tcgen05_wait_ld(regs) below ties them to
// the wait so that the compiler cannot move a use above it.
// ---------------------------------------------------------------------------

#define FMHA_TMEM_STR_(x) #x
#define FMHA_TMEM_STR(x) FMHA_TMEM_STR_(x)

#define FMHA_TMEM_REGS_4 "%0, %1, %2, %3"
#define FMHA_TMEM_REGS_8 FMHA_TMEM_REGS_4 ", %4, %5, %6, %7"
#define FMHA_TMEM_REGS_16 FMHA_TMEM_REGS_8 ", %8, %9, %10, %11, %12, %13, %14, %15"
#define FMHA_TMEM_REGS_32 \
  FMHA_TMEM_REGS_16 ", %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
#define FMHA_TMEM_REGS_64                                                                                   \
  FMHA_TMEM_REGS_32 ", %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47"    \
                    ", %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"

// Operand lists r[i .. i + n - 1] with constraint c ("=r" for ld, "r" for st, "+r" for the wait).
#define FMHA_TMEM_OPS_4(c, r, i) c(r[(i)]), c(r[(i) + 1]), c(r[(i) + 2]), c(r[(i) + 3])
#define FMHA_TMEM_OPS_8(c, r, i) FMHA_TMEM_OPS_4(c, r, i), FMHA_TMEM_OPS_4(c, r, (i) + 4)
#define FMHA_TMEM_OPS_16(c, r, i) FMHA_TMEM_OPS_8(c, r, i), FMHA_TMEM_OPS_8(c, r, (i) + 8)
#define FMHA_TMEM_OPS_32(c, r, i) FMHA_TMEM_OPS_16(c, r, i), FMHA_TMEM_OPS_16(c, r, (i) + 16)
#define FMHA_TMEM_OPS_64(c, r, i) FMHA_TMEM_OPS_32(c, r, i), FMHA_TMEM_OPS_32(c, r, (i) + 32)

// One asm statement: registers %0 .. %(NREG - 1), the Tensor Memory address %NREG.
#define FMHA_TCGEN05_LD(shape_num, NREG, r, taddr)                                                      \
  asm volatile("tcgen05.ld.sync.aligned." shape_num ".b32 {" FMHA_TMEM_REGS_##NREG "}, [%" FMHA_TMEM_STR( \
                   NREG) "];\n"                                                                         \
               : FMHA_TMEM_OPS_##NREG("=r", r, 0)                                                       \
               : "r"(taddr)                                                                             \
               : "memory")
#define FMHA_TCGEN05_ST(shape_num, NREG, r, taddr)                                                    \
  asm volatile("tcgen05.st.sync.aligned." shape_num ".b32 [%" FMHA_TMEM_STR(NREG) "], {" FMHA_TMEM_REGS_##NREG \
               "};\n" ::FMHA_TMEM_OPS_##NREG("r", r, 0),                                              \
               "r"(taddr)                                                                             \
               : "memory")

// tcgen05.ld.sync.aligned.32x32b.xN.b32 (N = 8, 16, 32, 64). SASS: LDTM.xN.
template <int N>
__device__ __forceinline__ void tcgen05_ld_32x32b(uint32_t taddr, uint32_t (&r)[N]) {
  static_assert(N == 8 || N == 16 || N == 32 || N == 64, "tcgen05_ld_32x32b: .num not instantiated");
#if FMHA_SM100_ENABLED
  if constexpr (N == 8) FMHA_TCGEN05_LD("32x32b.x8", 8, r, taddr);
  else if constexpr (N == 16) FMHA_TCGEN05_LD("32x32b.x16", 16, r, taddr);
  else if constexpr (N == 32) FMHA_TCGEN05_LD("32x32b.x32", 32, r, taddr);
  else FMHA_TCGEN05_LD("32x32b.x64", 64, r, taddr);
#else
  (void)taddr;
  for (int i = 0; i < N; ++i) r[i] = 0;
  FMHA_TRAP_UNSUPPORTED();
#endif
}

// tcgen05.ld.sync.aligned.16x256b.xN.b32 (N = 1, 2, 4, 8, 16; 4N registers). SASS: LDTM.16dp256bit.xN.
template <int N>
__device__ __forceinline__ void tcgen05_ld_16x256b(uint32_t taddr, uint32_t (&r)[4 * N]) {
  static_assert(N == 1 || N == 2 || N == 4 || N == 8 || N == 16, "tcgen05_ld_16x256b: .num not instantiated");
#if FMHA_SM100_ENABLED
  if constexpr (N == 1) FMHA_TCGEN05_LD("16x256b.x1", 4, r, taddr);
  else if constexpr (N == 2) FMHA_TCGEN05_LD("16x256b.x2", 8, r, taddr);
  else if constexpr (N == 4) FMHA_TCGEN05_LD("16x256b.x4", 16, r, taddr);
  else if constexpr (N == 8) FMHA_TCGEN05_LD("16x256b.x8", 32, r, taddr);
  else FMHA_TCGEN05_LD("16x256b.x16", 64, r, taddr);
#else
  (void)taddr;
  for (int i = 0; i < 4 * N; ++i) r[i] = 0;
  FMHA_TRAP_UNSUPPORTED();
#endif
}

// tcgen05.st.sync.aligned.32x32b.xN.b32 (N = 8, 16, 32, 64). SASS: STTM.xN.
template <int N>
__device__ __forceinline__ void tcgen05_st_32x32b(uint32_t taddr, const uint32_t (&r)[N]) {
  static_assert(N == 8 || N == 16 || N == 32 || N == 64, "tcgen05_st_32x32b: .num not instantiated");
#if FMHA_SM100_ENABLED
  if constexpr (N == 8) FMHA_TCGEN05_ST("32x32b.x8", 8, r, taddr);
  else if constexpr (N == 16) FMHA_TCGEN05_ST("32x32b.x16", 16, r, taddr);
  else if constexpr (N == 32) FMHA_TCGEN05_ST("32x32b.x32", 32, r, taddr);
  else FMHA_TCGEN05_ST("32x32b.x64", 64, r, taddr);
#else
  (void)taddr; (void)r;
  FMHA_TRAP_UNSUPPORTED();
#endif
}

// tcgen05.st.sync.aligned.16x256b.xN.b32 (N = 1, 2, 4, 8, 16; 4N registers). SASS: STTM.16dp256bit.xN.
template <int N>
__device__ __forceinline__ void tcgen05_st_16x256b(uint32_t taddr, const uint32_t (&r)[4 * N]) {
  static_assert(N == 1 || N == 2 || N == 4 || N == 8 || N == 16, "tcgen05_st_16x256b: .num not instantiated");
#if FMHA_SM100_ENABLED
  if constexpr (N == 1) FMHA_TCGEN05_ST("16x256b.x1", 4, r, taddr);
  else if constexpr (N == 2) FMHA_TCGEN05_ST("16x256b.x2", 8, r, taddr);
  else if constexpr (N == 4) FMHA_TCGEN05_ST("16x256b.x4", 16, r, taddr);
  else if constexpr (N == 8) FMHA_TCGEN05_ST("16x256b.x8", 32, r, taddr);
  else FMHA_TCGEN05_ST("16x256b.x16", 64, r, taddr);
#else
  (void)taddr; (void)r;
  FMHA_TRAP_UNSUPPORTED();
#endif
}

// tcgen05.wait::ld.sync.aligned: waits for all of this thread's prior tcgen05.ld. No SASS of its own
// (a scoreboard wait on the LDTM results).
__device__ __forceinline__ void tcgen05_wait_ld() {
#if FMHA_SM100_ENABLED
  asm volatile("tcgen05.wait::ld.sync.aligned;\n" ::: "memory");
#else
  FMHA_TRAP_UNSUPPORTED();
#endif
}

// The same wait, with the loaded registers as in-out operands: no use of r can be scheduled above it.
template <int R>
__device__ __forceinline__ void tcgen05_wait_ld(uint32_t (&r)[R]) {
  static_assert(R == 4 || R == 8 || R == 16 || R == 32 || R == 64, "tcgen05_wait_ld: register count");
#if FMHA_SM100_ENABLED
  if constexpr (R == 4) asm volatile("tcgen05.wait::ld.sync.aligned;\n" : FMHA_TMEM_OPS_4("+r", r, 0)::"memory");
  else if constexpr (R == 8) asm volatile("tcgen05.wait::ld.sync.aligned;\n" : FMHA_TMEM_OPS_8("+r", r, 0)::"memory");
  else if constexpr (R == 16)
    asm volatile("tcgen05.wait::ld.sync.aligned;\n" : FMHA_TMEM_OPS_16("+r", r, 0)::"memory");
  else if constexpr (R == 32)
    asm volatile("tcgen05.wait::ld.sync.aligned;\n" : FMHA_TMEM_OPS_32("+r", r, 0)::"memory");
  else asm volatile("tcgen05.wait::ld.sync.aligned;\n" : FMHA_TMEM_OPS_64("+r", r, 0)::"memory");
#else
  (void)r;
  FMHA_TRAP_UNSUPPORTED();
#endif
}

// tcgen05.wait::st.sync.aligned: waits for all of this thread's prior tcgen05.st (before an MMA may
// read what they wrote: wait::st -> fence::before_thread_sync -> arrive). SASS: FENCE.VIEW.ASYNC.T.
__device__ __forceinline__ void tcgen05_wait_st() {
#if FMHA_SM100_ENABLED
  asm volatile("tcgen05.wait::st.sync.aligned;\n" ::: "memory");
#else
  FMHA_TRAP_UNSUPPORTED();
#endif
}

}  // namespace ptx
}  // namespace fmha
