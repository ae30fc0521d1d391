// fmha: Blackwell (sm_100a) decode attention, TMA + tcgen05 MMA with Tensor Memory accumulators: the
// kernel entry (setup, Tensor Memory allocation, role split).
//
// Grid -> work: as the Hopper kernel (sm90/kernel.cuh):
//   blockIdx.x = row_block * num_splits + split, blockIdx.y = kvh (KV head), blockIdx.z = b (sequence);
//   row_block: 64 packed query rows (row r = query token r / G, query head kvh * G + r % G; rows >= T G
//   are padding, computed on zeros and never stored); split: a contiguous range of the KV tiles.
//
// Roles (enum class WarpRole; 192 threads, roles per warp, never per lane: a .sync.aligned tcgen05
// instruction in divergent code is undefined):
//   kSoftmax   warps 0-3, one per Tensor Memory lane quarter: Q into shared memory, then per tile S out
//              of Tensor Memory, the online softmax, P into shared memory, O corrected in Tensor Memory;
//              finally O / l and the LSE, or the split partials for the combine kernel.
//   kMma       warp 4: allocates Tensor Memory (after griddepcontrol.wait: the previous grid's columns
//              are free by then), relinquishes the permit, frees it at the end; its lane 0 issues every
//              tcgen05.mma and tcgen05.commit (mainloop_rows.cuh).
//   kProducer  warp 5: K and V tiles by TMA (one lane) or the paged gather (32 lanes), common/kv_ring.cuh,
//              unchanged from the Hopper kernel; the ring's empty barriers complete on tcgen05.commit, and
//              lane 0 waits for the last of them before the CTA exits (producer_tail).
// Split partials always merge through the combine kernel (no cluster merge on sm_100a yet).
//
// NOTHING HERE HAS RUN ON BLACKWELL HARDWARE: compiled for sm_100a and disassembled only
// (tests/test_sm100_kernel.py); tools/first_run_sm100.sh is the first run for whoever has a B200.
#pragma once

#include <cuda.h>  // CUtensorMap (types only)

#include <cstdint>

#include "../common/kv_ring.cuh"
#include "../common/params.h"
#include "../common/probe.cuh"
#include "../common/rows.cuh"
#include "mainloop_rows.cuh"
#include "ptx_sm100.cuh"
#include "traits.h"

namespace fmha {
namespace sm100 {

enum class WarpRole : int { kSoftmax, kMma, kProducer };

template <class Tr>
__device__ __forceinline__ WarpRole warp_role(int warp) {
  return warp < Tr::kMmaWarp ? WarpRole::kSoftmax : warp == Tr::kMmaWarp ? WarpRole::kMma : WarpRole::kProducer;
}

template <int D, bool kBf16, int kConfig>
__global__ void __launch_bounds__(DecodeTraits<D, kConfig>::kThreads, DecodeTraits<D, kConfig>::kCtasPerSm)
    decode_kernel(const __grid_constant__ CUtensorMap tmap_k, const __grid_constant__ CUtensorMap tmap_v,
                  const DecodeParams p) {
  using Tr = DecodeTraits<D, kConfig>;
  using Tm = typename Tr::Tmem;
  extern __shared__ uint8_t smem_raw[];
  // Round up on the shared-window address (what the swizzle and the descriptors see).
  const uint32_t pad = (1024u - (ptx::smem_addr(smem_raw) & 1023u)) & 1023u;
  SharedStorage<Tr>& ss = *reinterpret_cast<SharedStorage<Tr>*>(smem_raw + pad);

  const int split = blockIdx.x % p.num_splits;
  const int row_block = blockIdx.x / p.num_splits;
  const int kvh = blockIdx.y;
  const int b = blockIdx.z;
  const int row0 = row_block * Tr::kBlockM;
  const int warp = threadIdx.x / 32;
  const WarpRole role = warp_role<Tr>(warp);

  if (threadIdx.x == 0) {
    init_kv_ring<Tr>(ss, ring_full_arrivals<Tr>(p), 1, 1);  // a stage is released by one tcgen05.commit
    ptx::mbarrier_init(&ss.q_full, Tr::kConsumerThreads);
    for (int i = 0; i < 2; ++i) {
      ptx::mbarrier_init(&ss.s_full[i], 1);
      ptx::mbarrier_init(&ss.s_free[i], Tr::kConsumerThreads);
      ptx::mbarrier_init(&ss.p_full[i], Tr::kConsumerThreads);
      ptx::mbarrier_init(&ss.p_free[i], 1);
    }
    ptx::fence_mbarrier_init();
    ptx::prefetch_tensormap(&tmap_k);
    ptx::prefetch_tensormap(&tmap_v);
  }
  if constexpr (kPdl) ptx::griddep_wait();  // nothing global is read, and no Tensor Memory allocated, before this
  if (role == WarpRole::kMma) {
    ptx::tcgen05_alloc<Tm::kCols>(&ss.tmem_base);
    ptx::tcgen05_relinquish_alloc_permit();
  }
  ptx::tcgen05_fence_before_thread_sync();
  __syncthreads();  // barriers initialised, the allocation's address written
  ptx::tcgen05_fence_after_thread_sync();
  // Dependents only once every CTA holds its columns: a dependent grid that allocates before its own
  // griddepcontrol.wait could otherwise take them, and this CTA's allocation would spin forever.
  if constexpr (kPdl) ptx::griddep_launch_dependents();
  const uint32_t tmem = ss.tmem_base;
  const TileRange tr = tile_range<Tr>(p, b, row_block, split);

  if (role == WarpRole::kProducer) {
    if (kv_gather(p)) producer_loop_gather<Tr>(ss, p, tr, kvh, b, threadIdx.x % 32, 0);
    else if (threadIdx.x % 32 == 0 && p.block_table != nullptr)
      producer_loop<Tr, true>(ss, &tmap_k, &tmap_v, p, tr, kvh, b);
    else if (threadIdx.x % 32 == 0)
      producer_loop<Tr, false>(ss, &tmap_k, &tmap_v, p, tr, kvh, b);
    if (threadIdx.x % 32 == 0) producer_tail<Tr>(ss, tr.end - tr.begin);
  } else if (role == WarpRole::kMma) {
    if (threadIdx.x % 32 == 0) mma_loop<Tr, kBf16>(ss, p, tr, tmem);
  } else {
    softmax_loop<Tr, kBf16>(ss, p, tr, tmem, b, kvh, row0, split, threadIdx.x);
  }
  __syncwarp();

  // Free the Tensor Memory once every warp is done with it (the softmax warps' last loads).
  ptx::tcgen05_fence_before_thread_sync();
  __syncthreads();
  if (role == WarpRole::kMma) {
    ptx::tcgen05_fence_after_thread_sync();
    ptx::tcgen05_dealloc<Tm::kCols>(tmem);
  }
}

}  // namespace sm100
}  // namespace fmha
