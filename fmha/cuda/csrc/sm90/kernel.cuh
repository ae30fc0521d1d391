// fmha: Hopper (sm_90a) decode attention, TMA + WGMMA: the kernel entry (setup, role split).
//
// Grid -> work
//   blockIdx.x = row_block * num_splits + split
//   blockIdx.y = kvh  (KV head)
//   blockIdx.z = b    (sequence)
//   row_block: 64 packed query rows r in [64 row_block, 64 row_block + 64) of
//   the T * G rows that share KV head kvh; row r is query token t = r / G of
//   query head hq = kvh * G + r % G. Rows >= T * G are padding (computed on
//   zeros, never stored). split: a contiguous range of the KV tiles this row
//   block needs (all of them when num_splits == 1).
//
// Instantiations: head dim D x dtype x configuration (config.h; one translation unit each under
// instantiations/). The host (fmha/cuda/backend.py) runs grids of more CTAs than SMs with WIDE (two
// CTAs per SM at D <= 128, shallow ring), narrow grids of one wave (unsplit or split) at D = 128 with
// STREAM (WIDE's ring, the narrow loop; at D = 64 WIDE is that), other smaller or split-KV grids with
// DEEP (one CTA per SM, deeper ring), and D >= 512 with d512_config's choice (backend.py).
// The C API launches a split grid of one wave one CTA per SM (exclusive_sms). D = 64 caches whose KV
// heads lie side by side run on the D = 128 STREAM kernel as KV-head pairs where the pairs fill most
// SMs (DecodeParams::head_pairs, pair_row; FMHA_CONFIG_KV_HEAD_PAIRS): blockIdx.y is then a pair.
// Paged caches add their own choices (docs/paged.md): DEEP or STREAM at D = 128, WIDE_GATHER at D = 64.
//
// Roles (kConsumerWGs consumer warpgroups, then the producer: one warp, or a
// warpgroup of which one warp works when setmaxnreg is used)
//   Producer warp (one elected lane, common/kv_ring.cuh): streams K and V tiles of kBlockN tokens
//     by TMA into rings of kStages (K) and kStagesV (V) stages; full_k/full_v[stage] complete on the TMA
//     bytes; empty_k[stage] is armed by the warps that read the K tile once their last read of
//     it completed (Tr::kKFreedByOneWg), empty_v[stage] once their P V did. Gathered paged launches
//     (kv_gather) instead run Tr::kGatherWarps producer warps, every lane copying with cp.async (the CTA
//     then has kGatherThreads threads), and the full barriers complete on their arrivals.
//   Consumer warpgroup(s): load Q once (plain 16 B loads, written in the
//     128B-swizzled K-major layout; at D >= 512 Config::q_reg_cols columns of it as
//     register fragments instead, see QRegs; in the shared-latent 64-key seesaw and narrow
//     loop the producer loads it by TMA where its rows are one box, q_tma), then per tile
//       S = Q K^T            wgmma, A = Q (smem desc, or registers), B = K (smem desc), both K-major
//       online softmax        in registers (FA2 rescale), masks keys j >= limit
//       O += P V              wgmma, A = P (registers), B = V (smem desc, MN-major)
//     and finally O / l and the LSE (or per-split partials for the combine).
//     consumer_loop_overlapped keeps the tensor core busy across tiles: Q K^T
//     of tile i+1 is issued with P V of tile i, and the softmax of i+1 runs
//     while P V of i is in flight (with two consumer warpgroups P V of i is
//     issued once Q K^T of i+1 landed).
//   With two consumer warpgroups (D = 512) each computes S over half of the
//   head dim and they add each other's partial scores through shared memory
//   (exchange_scores, SPLIT_QK; both then hold the same S and identical softmax
//   statistics), or take turns over the tiles (consumer_loop_seesaw, SEESAW; consumer_loop_seesaw64 over
//   64-key tiles of a ring whose stages fill and free by halves, LATENT_SEESAW64); each owns half of the
//   output columns.
//   Problems of at most 16 packed rows (T = 1 with up to 16 query heads per KV
//   head, or T x G <= 16; LATENT_NARROW: 32) take consumer_loop_narrow instead, where keys and
//   head-dim columns fill the MMA's M and the 16 (32) rows its N (see its comment);
//   the D = 128 WIDE configuration keeps the 64-row loop (measured faster; STREAM is the same
//   ring with the narrow loop).
//   Split-KV partials are merged inside a thread-block cluster when the host
//   launches the splits of a row block as one (p.cluster_merge): kMergeDealtRows (see
//   ClusterMerge: at most 16 splits, every cluster resident at once, <= 16 packed
//   rows, any in LATENT_SEESAW64, whose two splits merge from registers: store_output_cluster_pair) or
//   kMergePair (two splits of the 64-row loop, see store_output_pair), common/merge.cuh;
//   else by combine_splits_kernel (common/combine.cuh, launched as a programmatic dependent).
// The shared latent's narrow loop has a second entry, decode_kernel_balanced (schedule_balanced.cuh), whose CTAs
// take shares of the tiles dealt by cache length instead of one (sequence, KV head) each.
//
// Shared-memory tiles: every tile is a stack of 64-column "boxes"; a box of R
// rows is R x 128 B, 128B-swizzled (16 B chunk c of row r lives at chunk
// c ^ (r % 8)), 1024 B aligned. A box is filled by TMA boxes of 64 head-dim columns x kTmaRows
// tokens of one (KV head, sequence) (Config::tma_rows; fewer inside a page of a paged cache), each
// starting on a 1024 B boundary; both tensor-map dimension orders give the same shared-memory image.
#pragma once

#include <cuda.h>  // CUtensorMap (types only; no driver calls from device code)

#include <cstdint>

#include "../common/epilogue.cuh"
#include "../common/kv_ring.cuh"
#include "../common/merge.cuh"
#include "../common/params.h"
#include "../common/probe.cuh"
#if FMHA_PROBE_STREAM_ONLY
#include "../common/probe_modes.cuh"
#endif
#include "mainloop_narrow.cuh"
#include "mainloop_overlapped.cuh"
#include "mainloop_seesaw.cuh"
#include "mainloop_seesaw64.cuh"
#include "mainloop_serial.cuh"
#include "ptx_sm90.cuh"
#include "schedule_balanced.cuh"
#include "traits.h"

namespace fmha {
namespace sm90 {

// tmap_v is V's map, except in the shared-latent kernels, which read V from the K stage: there it is K's, or Q's
// where DecodeParams::q_tma is set (Tr::kQByTma).
template <int D, bool kBf16, int kConfig>
__global__ void __launch_bounds__(DecodeTraits<D, kConfig>::kMaxThreads, DecodeTraits<D, kConfig>::kCtasPerSm)
    decode_kernel(const __grid_constant__ CUtensorMap tmap_k, const __grid_constant__ CUtensorMap tmap_v,
                  const DecodeParams p) {
  using Tr = DecodeTraits<D, kConfig>;
  static_assert(!Tr::kSetMaxNReg || Tr::kCtasPerSm == 1, "setmaxnreg budgets assume one CTA per SM");
  extern __shared__ uint8_t smem_raw[];
  // Round up on the shared-window address (what the swizzle and the descriptors see).
  const uint32_t pad = (1024u - (ptx::smem_addr(smem_raw) & 1023u)) & 1023u;
  SharedStorage<Tr>& ss = *reinterpret_cast<SharedStorage<Tr>*>(smem_raw + pad);

  const int split = blockIdx.x % p.num_splits;
  const int row_block = blockIdx.x / p.num_splits;
  const int kvh = blockIdx.y;
  const int b = blockIdx.z;
  const int row0 = row_block * Tr::kBlockM;
  if (threadIdx.x == 0) {
    probe_timeline(kTimelineEntry);
    probe_timeline(kTimelineSmId);  // the SM it runs on (not a time)
  }

  if (threadIdx.x == 0) {
    // Written out rather than through init_kv_ring (common/kv_ring.cuh): that schedules this prologue
    // differently and would change every sm_90a kernel's SASS.
    const uint32_t full_arrivals = ring_full_arrivals<Tr>(p);
#pragma unroll
    for (int s = 0; s < Tr::kStages; ++s) {
      ptx::mbarrier_init(&ss.full_k[s], full_arrivals);
      // One arrival per consumer warp that reads the stage's K tile (the seesaw: one warpgroup's; one
      // ring: every warp's P V reads it; halves: warpgroup 0's P V reads the first).
      ptx::mbarrier_init(&ss.empty_k[s], Tr::kEmptyKArrivals);
    }
    if constexpr (Tr::kVBarriers) {  // (halves: the second half's barriers, warpgroup 1's)
#pragma unroll
      for (int s = 0; s < Tr::kStagesV; ++s) {
        ptx::mbarrier_init(&ss.full_v[s], full_arrivals);
        ptx::mbarrier_init(&ss.empty_v[s], Tr::kEmptyVArrivals);
      }
    }
    if constexpr (Tr::kRopeRing)
      for (int s = 0; s < Tr::kRopeStages; ++s) ptx::mbarrier_init(&ss.empty_rope[s], Tr::kEmptyRopeArrivals);
    if (uses_pair_merge<Tr>(p)) ptx::mbarrier_init(&ss.pair_full, SharedStorage<Tr>::kPairSlots);  // the partner's pushers
    if constexpr (Tr::kSeesaw)
      for (int i = 0; i < 2; ++i) ptx::mbarrier_init(&ss.p_full[i], SharedStorage<Tr>::kPublishArrivals);
    if constexpr (Tr::kQByTma) ptx::mbarrier_init(&ss.q_full, 1);
    ptx::fence_mbarrier_init();  // (release at cluster scope: the partner arrives on pair_full)
    // The descriptors are kernel parameters, never written by an earlier kernel: warm them before the wait.
    ptx::prefetch_tensormap(&tmap_k);
    ptx::prefetch_tensormap(&tmap_v);
  }
  if constexpr (kPdl) {
    // Programmatic dependent launch (common/decode_launch.h): this grid may start while the previous kernel on
    // the stream finishes; nothing global is read before that kernel's results are visible.
    ptx::griddep_wait();
    // The kernel behind this one (the split-KV combine, or the next call's decode) may be
    // scheduled now; it waits in griddepcontrol.wait for this grid's completion and memory.
    ptx::griddep_launch_dependents();
  }
  if (threadIdx.x == 0) probe_timeline(kTimelineGridDep);
  const bool pair_merge = uses_pair_merge<Tr>(p);
  if (pair_merge) ptx::cluster_sync();  // both CTAs' pair_full initialised before either pushes (and a CTA-wide barrier)
  else __syncthreads();
  const TileRange tr = tile_range<Tr>(p, b, row_block, split);

  const int warp = threadIdx.x / 32;
  const bool cluster_merge = uses_cluster_merge<Tr>(p);
  if (warp >= Tr::kProducerWarp) {
    // Producer
    if constexpr (Tr::kSetMaxNReg) ptx::setmaxnreg_dec<Tr::kProducerRegs>();
#if !FMHA_PROBE_STREAM_ONLY  // (that probe's consumers never wait for Q: it times the K/V stream alone)
    // Q ahead of the ring's first stages (tmap_v is Q's map here: V is read from the K stage).
    if constexpr (Tr::kQByTma)
      if (p.q_tma && warp == Tr::kProducerWarp && threadIdx.x % 32 == 0) load_q_boxes_tma<Tr>(ss, &tmap_v, p, b, kvh, row0);
#endif
    if (kv_gather(p)) {
      if (warp < Tr::kProducerWarp + Tr::kGatherWarps)
        producer_loop_gather<Tr>(ss, p, tr, kvh, b, threadIdx.x % 32, warp - Tr::kProducerWarp);
    } else if (warp == Tr::kProducerWarp) {
      if (threadIdx.x % 32 == 0 && p.block_table != nullptr)
        producer_loop<Tr, true>(ss, &tmap_k, &tmap_v, p, tr, kvh, b);
      else if (threadIdx.x % 32 == 0)
        producer_loop<Tr, false>(ss, &tmap_k, &tmap_v, p, tr, kvh, b);
    }
    if (cluster_merge) {  // every thread of the cluster takes part in both cluster barriers (see ClusterMerge)
      ptx::cluster_sync();
      ptx::cluster_sync();
    }
    if (pair_merge) ptx::cluster_sync();  // the closing barrier (see below)
    return;
  }
  // Consumer
  if constexpr (Tr::kSetMaxNReg) ptx::setmaxnreg_inc<Tr::kConsumerRegs>();
#if FMHA_PROBE_STREAM_ONLY
  probe_stream_only_consumer<Tr>(ss, tr, cluster_merge, pair_merge);
  return;
#endif
  bool narrow = false;
  if constexpr (Tr::kNarrow) narrow = p.rows <= Tr::kNarrowRows;  // uniform over the grid (row_block is 0)
  if constexpr (Tr::kNarrowOnly) {  // (the shared latent's: N = 16 or 32, Q waited for ahead of the choice)
    narrow_wait_q<Tr>(ss, p, b, kvh, threadIdx.x);
    if (p.rows > 16) consumer_loop_narrow<Tr, kBf16, 32, true>(ss, p, tr, b, kvh, split, threadIdx.x);
    else consumer_loop_narrow<Tr, kBf16, 16, true>(ss, p, tr, b, kvh, split, threadIdx.x);
  } else if (narrow) {
    if constexpr (Tr::kNarrow) consumer_loop_narrow<Tr, kBf16>(ss, p, tr, b, kvh, split, threadIdx.x);
  } else if constexpr (Tr::kSeesaw64) {
    consumer_loop_seesaw64<Tr, kBf16>(ss, p, tr, b, kvh, row0, split, threadIdx.x);
  } else if constexpr (Tr::kSeesaw) {
    consumer_loop_seesaw<Tr, kBf16>(ss, p, tr, b, kvh, row0, split, threadIdx.x);
  } else if constexpr (Tr::kOverlap) {
    consumer_loop_overlapped<Tr, kBf16>(ss, p, tr, b, kvh, row0, split, threadIdx.x);
  } else {
    consumer_loop<Tr, kBf16>(ss, p, tr, b, kvh, row0, split, threadIdx.x);
  }
  if (cluster_merge && !merges_pair_in_registers<Tr>(p)) {
    ptx::cluster_sync();  // (the second barrier; the first is in the epilogue) every push landed
    merge_cluster_splits<Tr, kBf16>(ss, p, b, kvh, row0, threadIdx.x);
  }
  // kMergePair: neither CTA exits before the other is done with the pair's shared memory.
  if (pair_merge) ptx::cluster_sync();
  if (threadIdx.x == 0) probe_timeline(kTimelineEnd);
}

}  // namespace sm90
}  // namespace fmha
