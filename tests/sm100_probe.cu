// Compile-only probe of fmha/cuda/csrc/sm100/{ptx_sm100.cuh,descriptors.h} (tests/test_sm100_build.py):
// every tcgen05 wrapper the design needs, in the order a kernel uses them, with descriptors built by the
// constexpr encoders. Built with nvcc -arch=sm_100a -cubin and disassembled; NEVER RUN: there is no
// Blackwell GPU here, and nothing in this file has executed on one. The data layout is not a real tile
// (the K-major SW128 image TMA would write is not reproduced), so even on a B200 its output would only
// be a smoke test.
//
// One CTA of 4 warps: warp 0 allocates 128 TMEM columns and relinquishes the permit; one thread issues
// four K16 MMAs (M = 128, N = 128, K = 64, bf16 -> f32, both K-major SW128) and commits them to an
// mbarrier; every warp waits, loads its 32 lanes of the accumulator (32x32b and 16x256b), stores a copy
// back (tcgen05.st, wait::st) and writes the result to global memory; warp 0 deallocates.
#include <cstdint>

#include "sm100/descriptors.h"
#include "sm100/ptx_sm100.cuh"

namespace {

constexpr int kM = 128, kN = 128, kK = 64;              // one 128-byte (64 x bf16) row per M / N row
constexpr uint32_t kTileBytes = kM * kK * 2;            // 16 KiB per operand
constexpr uint32_t kTmemCols = 128;                     // N fp32 columns
constexpr uint32_t kIdesc = fmha::sm100::IdescF16<kM, kN, fmha::sm100::InputType::kBF16, fmha::sm100::Major::kK,
                                                  fmha::sm100::Major::kK>::value;
static_assert(kIdesc == 0x08200490u, "the idesc the test looks for in the SASS");

}  // namespace

extern "C" __global__ void __launch_bounds__(128, 1)
    sm100_probe_kernel(const uint4* __restrict__ a_g, const uint4* __restrict__ b_g, float* __restrict__ out) {
  namespace ptx = fmha::ptx;
  namespace sm100 = fmha::sm100;
  __shared__ alignas(1024) uint4 smem_a[kTileBytes / 16];   // 1024-B aligned: base offset 0
  __shared__ alignas(1024) uint4 smem_b[kTileBytes / 16];
  __shared__ alignas(8) uint64_t mma_done;
  __shared__ uint32_t tmem_base_slot;

  const int tid = threadIdx.x;
  const int warp = tid / 32;

  for (int i = tid; i < int(kTileBytes / 16); i += blockDim.x) {
    smem_a[i] = a_g[i];
    smem_b[i] = b_g[i];
  }
  if (warp == 0) {  // warp-uniform: the .sync.aligned allocator instructions run converged
    ptx::tcgen05_alloc<kTmemCols>(&tmem_base_slot);
    ptx::tcgen05_relinquish_alloc_permit();
  }
  if (tid == 0) {
    ptx::mbarrier_init(&mma_done, 1);
    ptx::fence_mbarrier_init();
  }
  ptx::fence_proxy_async_shared();  // generic smem stores -> the MMA's async-proxy reads
  ptx::tcgen05_fence_before_thread_sync();
  __syncthreads();
  ptx::tcgen05_fence_after_thread_sync();
  const uint32_t tmem_d = tmem_base_slot;

  if (tid == 0) {
    const uint64_t da = sm100::make_smem_desc_k_sw128(ptx::smem_addr(smem_a));
    const uint64_t db = sm100::make_smem_desc_k_sw128(ptx::smem_addr(smem_b));
#pragma unroll
    for (int k = 0; k < kK / 16; ++k)  // K16 step: +32 B inside the 128-byte swizzled row
      ptx::tcgen05_mma_f16_ss(tmem_d, sm100::smem_desc_advance(da, 32 * k), sm100::smem_desc_advance(db, 32 * k),
                              kIdesc, k > 0);
    ptx::tcgen05_commit(&mma_done);
  }
  ptx::mbarrier_wait_parity(&mma_done, 0);
  ptx::tcgen05_fence_after_thread_sync();

  // Row r of D is lane r (M = 128); warp w reads lanes 32w .. 32w + 31.
  const uint32_t lane_base = ptx::tmem_addr(tmem_d, 32 * warp, 0);
  uint32_t acc[32];
  ptx::tcgen05_ld_32x32b<32>(lane_base, acc);  // columns 0..31 of this thread's row
  ptx::tcgen05_wait_ld(acc);
  uint32_t frag[16];
  ptx::tcgen05_ld_16x256b<4>(ptx::tmem_addr(lane_base, 0, 32), frag);  // lanes +0..15, columns 32..63
  ptx::tcgen05_wait_ld(frag);
  uint32_t twice[16];
#pragma unroll
  for (int j = 0; j < 16; ++j) twice[j] = __float_as_uint(2.0f * __uint_as_float(frag[j]));
  ptx::tcgen05_st_16x256b<4>(ptx::tmem_addr(lane_base, 0, 64), twice);  // columns 64..95
  uint32_t copy[32];
#pragma unroll
  for (int j = 0; j < 32; ++j) copy[j] = acc[j];
  ptx::tcgen05_st_32x32b<32>(ptx::tmem_addr(lane_base, 0, 96), copy);  // columns 96..127
  ptx::tcgen05_wait_st();

  float* row = out + size_t(tid) * 48;
#pragma unroll
  for (int j = 0; j < 32; ++j) row[j] = __uint_as_float(acc[j]);
#pragma unroll
  for (int j = 0; j < 16; ++j) row[32 + j] = __uint_as_float(frag[j]);

  ptx::tcgen05_fence_before_thread_sync();
  __syncthreads();
  if (warp == 0) {
    ptx::tcgen05_fence_after_thread_sync();
    ptx::tcgen05_dealloc<kTmemCols>(tmem_d);
  }
}

// Every instantiated .num of the ld / st wrappers (a typo in a branch that no kernel instantiates would
// otherwise go unseen): each warp copies its lane quarter of 128 allocated columns through registers
// (32x32b.x8 .. x64, 16x256b.x1 .. x16) and writes a checksum.
template <int N>
__device__ __forceinline__ uint32_t roundtrip_32x32b(uint32_t taddr) {
  uint32_t r[N];
  fmha::ptx::tcgen05_ld_32x32b<N>(taddr, r);
  fmha::ptx::tcgen05_wait_ld(r);
  fmha::ptx::tcgen05_st_32x32b<N>(taddr, r);
  uint32_t s = 0;
#pragma unroll
  for (int j = 0; j < N; ++j) s ^= r[j];
  return s;
}
template <int N>
__device__ __forceinline__ uint32_t roundtrip_16x256b(uint32_t taddr) {
  uint32_t r[4 * N];
  fmha::ptx::tcgen05_ld_16x256b<N>(taddr, r);
  fmha::ptx::tcgen05_wait_ld(r);
  fmha::ptx::tcgen05_st_16x256b<N>(taddr, r);
  uint32_t s = 0;
#pragma unroll
  for (int j = 0; j < 4 * N; ++j) s ^= r[j];
  return s;
}

extern "C" __global__ void __launch_bounds__(128, 1) sm100_probe_shapes_kernel(uint32_t* __restrict__ out) {
  namespace ptx = fmha::ptx;
  __shared__ uint32_t tmem_base_slot;
  const int warp = threadIdx.x / 32;
  if (warp == 0) {
    ptx::tcgen05_alloc<kTmemCols>(&tmem_base_slot);
    ptx::tcgen05_relinquish_alloc_permit();
  }
  ptx::tcgen05_fence_before_thread_sync();
  __syncthreads();
  ptx::tcgen05_fence_after_thread_sync();
  const uint32_t base = ptx::tmem_addr(tmem_base_slot, 32 * warp, 0);
  uint32_t s = roundtrip_32x32b<8>(base) ^ roundtrip_32x32b<16>(base) ^ roundtrip_32x32b<32>(base) ^
               roundtrip_32x32b<64>(base);
  s ^= roundtrip_16x256b<1>(base) ^ roundtrip_16x256b<2>(base) ^ roundtrip_16x256b<4>(base) ^
       roundtrip_16x256b<8>(base) ^ roundtrip_16x256b<16>(base);
  ptx::tcgen05_wait_st();
  out[threadIdx.x] = s;
  ptx::tcgen05_fence_before_thread_sync();
  __syncthreads();
  if (warp == 0) {
    ptx::tcgen05_fence_after_thread_sync();
    ptx::tcgen05_dealloc<kTmemCols>(tmem_base_slot);
  }
}
