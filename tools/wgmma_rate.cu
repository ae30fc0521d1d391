// Issue rate of the wgmma shapes the sm_90a loops use, with their shared-memory operand layouts: one CTA per
// SM, one or two warpgroups each issuing back-to-back wgmmas into one accumulator (as a Q K^T or P V chain
// does), groups of kGroup kept two in flight. Operands are zeros (timing only). Built and run by
// tools/wgmma_rate.py.
#include <cstdint>

#include "../fmha/cuda/csrc/common/ptx.cuh"
#include "../fmha/cuda/csrc/sm90/ptx_sm90.cuh"

namespace {

using fmha::ptx::SmemDescSw128;

constexpr int kBoxBytes = 64 * 128;  // a 64-row, 128 B-wide swizzled box, as the kernels' tiles
constexpr int kSbo = 8 * 128;
constexpr int kGroup = 36;           // one Q K^T over 576 head-dim columns (36 k16 steps)
constexpr int kSmemBytes = 160 * 1024;

// Shapes (the loop each comes from):
//   0 narrow Q K^T   ss m64n16k16, A = K box K-major, B = 16 rows of Q
//   1 narrow P V     ss m64n16k16, A = V box MN-major (transposed), B = 16 rows of P^T
//   2 ss m64n32k16   A = K box K-major, B = 32 rows
//   3 seesaw Q K^T   ss m64n64k16, A = Q box, B = K box, both K-major
//   4 seesaw P V     ss m64n256k16, A = P box K-major, B = V boxes MN-major
template <int kShape>
__device__ __forceinline__ void issue_group(float* acc, const SmemDescSw128& da, const SmemDescSw128& db) {
#pragma unroll
  for (int kk = 0; kk < kGroup; ++kk) {
    const uint32_t box = (kk / 4) % 8 * kBoxBytes, in_row = (kk % 4) * 32;
    if constexpr (kShape == 0)
      fmha::ptx::wgmma_ss_m64n16k16<true, false>(*reinterpret_cast<float(*)[8]>(acc), da.at(box + in_row),
                                                 db.at(in_row), 1);
    if constexpr (kShape == 1)
      fmha::ptx::wgmma_ss_m64n16k16<true, true>(*reinterpret_cast<float(*)[8]>(acc),
                                                da.at((kk % 8) * kBoxBytes + (kk / 8 % 4) * 16 * 128), db.at(in_row), 1);
    if constexpr (kShape == 2)
      fmha::ptx::wgmma_ss_m64n32k16<true>(*reinterpret_cast<float(*)[16]>(acc), da.at(box + in_row), db.at(in_row), 1);
    if constexpr (kShape == 3)
      fmha::ptx::wgmma_ss_m64n64k16<true>(*reinterpret_cast<float(*)[32]>(acc), da.at(box + in_row),
                                          db.at(box + in_row), 1);
    if constexpr (kShape == 4)
      fmha::ptx::wgmma_ss_m64n256k16_mn_b<true>(*reinterpret_cast<float(*)[128]>(acc), da.at(in_row),
                                                db.at((kk % 4) * 16 * 128), 1);
  }
}

template <int kShape>
__global__ void __launch_bounds__(256, 1) wgmma_rate_kernel(int iters, int wgs, long long* cycles, float* sink) {
  extern __shared__ __align__(1024) uint8_t smem[];
  for (int i = threadIdx.x; i < kSmemBytes / 16; i += blockDim.x) reinterpret_cast<uint4*>(smem)[i] = make_uint4(0, 0, 0, 0);
  fmha::ptx::fence_proxy_async_shared();
  __syncthreads();
  const int wg = threadIdx.x / 128;
  if (wg >= wgs) return;
  const uint32_t base = fmha::ptx::smem_addr(smem);
  // A region: 72 KB (nine boxes); B region after it. MN-major operands take the box stride as their LBO.
  const bool mn_a = kShape == 1, mn_b = kShape >= 4;
  const SmemDescSw128 da(base, mn_a ? kBoxBytes : 16, kSbo);
  const SmemDescSw128 db(base + 9 * kBoxBytes, mn_b ? kBoxBytes : 16, kSbo);
  constexpr int kAcc = kShape <= 1 ? 8 : kShape == 2 ? 16 : kShape == 3 ? 32 : 128;
  float acc[kAcc];
#pragma unroll
  for (int i = 0; i < kAcc; ++i) acc[i] = 0.f;
  fmha::ptx::named_barrier_sync(1, 128 * wgs);
  const long long t0 = clock64();
  for (int it = 0; it < iters; ++it) {
    fmha::ptx::wgmma_fence();
    issue_group<kShape>(acc, da, db);
    fmha::ptx::wgmma_commit_group();
    fmha::ptx::wgmma_wait_group<1>();
  }
  fmha::ptx::wgmma_wait_group<0>();
  const long long t1 = clock64();
  float s = 0.f;
#pragma unroll
  for (int i = 0; i < kAcc; ++i) s += acc[i];
  if (s != 0.f) sink[threadIdx.x] = s;  // never true (zero operands); keeps the wgmmas
  if (threadIdx.x % 128 == 0) cycles[2 * blockIdx.x + wg] = t1 - t0;
}

template <int kShape>
int launch(int ctas, int iters, int wgs, long long* cycles, float* sink) {
  auto k = wgmma_rate_kernel<kShape>;
  if (cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes) != cudaSuccess) return 1;
  k<<<ctas, 256, kSmemBytes>>>(iters, wgs, cycles, sink);
  return cudaDeviceSynchronize() != cudaSuccess ? 2 : 0;
}

}  // namespace

// 0 on success; 1, 2: a CUDA error; 3: no such shape; 4: wgs not 1 or 2 (the CTA has two warpgroups).
extern "C" int wgmma_rate(int shape, int ctas, int iters, int wgs, long long* cycles, float* sink) {
  if (wgs < 1 || wgs > 2) return 4;
  switch (shape) {
    case 0: return launch<0>(ctas, iters, wgs, cycles, sink);
    case 1: return launch<1>(ctas, iters, wgs, cycles, sink);
    case 2: return launch<2>(ctas, iters, wgs, cycles, sink);
    case 3: return launch<3>(ctas, iters, wgs, cycles, sink);
    case 4: return launch<4>(ctas, iters, wgs, cycles, sink);
    default: return 3;
  }
}
