// fmha sm_90a: definitions of the host side of one instantiation (sm90/launch.h): function attributes,
// cluster occupancy, the split-KV merge mode and the launch. Included by instantiations/sm90_*.cu only.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdint>

#include "../common/combine_launch.h"
#include "../common/decode_launch.h"
#include "../common/host.h"
#include "../common/merge_layout.h"
#include "../common/probe.cuh"
#include "kernel.cuh"
#include "launch.h"
#include "traits.h"

namespace fmha {
namespace sm90 {
namespace detail {

// Dynamic shared memory of a decode launch (common/decode_launch.h), exclusive or not.
template <class Tr>
constexpr size_t launch_smem_bytes(bool exclusive) {
  return ::fmha::launch_smem_bytes(smem_bytes<Tr>(), kSmemPerSm, exclusive);
}

// Sets the decode kernel's function attributes once per device: the dynamic shared memory it needs,
// and cluster sizes above the portable 8 (the cluster merge uses up to kMaxClusterSplits CTAs).
template <int D, bool kBf16, int kConfig, bool kBalanced = false>
int configure_kernel() {
  using Tr = DecodeTraits<D, kConfig>;
  static std::atomic<uint64_t> configured_devices{0};  // one per instantiation
  if constexpr (kBalanced)
    return configure_decode_kernel(decode_kernel_balanced<D, kBf16, kConfig>, launch_smem_bytes<Tr>(true), true,
                                   configured_devices);
  else
    return configure_decode_kernel(decode_kernel<D, kBf16, kConfig>, launch_smem_bytes<Tr>(true), true,
                                   configured_devices);
}

}  // namespace detail

// How many clusters of `cluster` CTAs of the decode kernel the current device holds at once (0 when
// it cannot launch them, or the query failed), launched exclusive (exclusive_sms) or not. A driver query:
// answers are cached per instantiation, device, launch kind and cluster size; failures are not (a later
// call asks again). The query may run during stream capture (the first launch of a shape inside
// torch.cuda.graph): the thread's capture mode is relaxed around it so that capture is never invalidated by it.
template <int D, bool kBf16, int kConfig>
int Instance<D, kBf16, kConfig>::max_active_clusters(int cluster, bool exclusive) {
  using Tr = DecodeTraits<D, kConfig>;
  auto kernel = decode_kernel<D, kBf16, kConfig>;
  const size_t smem = detail::launch_smem_bytes<Tr>(exclusive);
  static std::atomic<int> cached[kMaxDevices][2][kMaxClusterSplits + 1];  // answer + 1; 0: not known
  if (cluster < 1 || cluster > kMaxClusterSplits) return 0;
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  if (device >= kMaxDevices) return 0;
  const int known = cached[device][exclusive][cluster].load(std::memory_order_relaxed);
  if (known > 0) return known - 1;
  if (detail::configure_kernel<D, kBf16, kConfig>()) {
    (void)cudaGetLastError();
    return 0;
  }
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = static_cast<unsigned>(cluster);
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(static_cast<unsigned>(cluster));
  cfg.blockDim = dim3(static_cast<unsigned>(Tr::kThreads));
  cfg.dynamicSmemBytes = smem;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  const bool exchanged = cudaThreadExchangeStreamCaptureMode(&mode) == cudaSuccess;
  int n = 0;
  const cudaError_t e = cudaOccupancyMaxActiveClusters(&n, reinterpret_cast<const void*>(kernel), &cfg);
  if (exchanged) (void)cudaThreadExchangeStreamCaptureMode(&mode);  // back to the caller's mode
  else (void)cudaGetLastError();
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  cached[device][exclusive][cluster].store(n + 1, std::memory_order_relaxed);
  return n;
}

// A split-KV grid merges in clusters only when the GPU holds every cluster at once (a second wave would
// cost more than the combine kernel saves): dealt rows for at most Tr::kClusterMergeMaxRows packed rows
// (traits.h), else pairs for two splits of the 64-row loop (the narrow loop has its own epilogue), else the
// combine kernel. `exclusive`: the launch runs one CTA per SM
// (exclusive_sms), so the occupancy query asks as the launch will.
template <int D, bool kBf16, int kConfig>
int Instance<D, kBf16, kConfig>::merge_mode(int num_splits, long long clusters, int rows, bool exclusive) {
  using Tr = DecodeTraits<D, kConfig>;
  if (!kClusterMergeEnabled || kProbeNoCombine || num_splits < 2) return kMergeByKernel;
  if (Tr::kClusterMerge && rows <= Tr::kClusterMergeMaxRows && num_splits <= kMaxClusterSplits &&
      merge_fits<Tr>(num_splits, rows) && max_active_clusters(num_splits, exclusive) >= clusters)
    return kMergeDealtRows;
  const bool narrow = Tr::kNarrow && rows <= Tr::kNarrowRows;
  if (Tr::kPairMerge && num_splits == 2 && !narrow && max_active_clusters(2, exclusive) >= clusters)
    return kMergePair;
  return kMergeByKernel;
}

// Row blocks 2i and 2i + 1 of an unsplit 64-key seesaw grid (blockIdx.x = row block) as a cluster of two,
// where the device holds such clusters.
template <int D, bool kBf16, int kConfig>
bool Instance<D, kBf16, kConfig>::pairs_row_blocks(int num_splits, long long row_blocks, bool exclusive) {
  using Tr = DecodeTraits<D, kConfig>;
  return kPairRowBlocksEnabled && Tr::kSeesaw64 && num_splits == 1 && row_blocks % 2 == 0 &&
         max_active_clusters(2, exclusive) > 0;
}

// bf16 outputs of the 64-key seesaw, split or dealt: fp16 partials (the pair and cluster merges keep fp32 in shared
// memory; fp16 outputs keep fp32 partials, whose rounding would rival their own).
template <int D, bool kBf16, int kConfig>
bool Instance<D, kBf16, kConfig>::half_partials() {
  return kBf16 && DecodeTraits<D, kConfig>::kHalfPartials && kHalfPartialsEnabled;
}

// The balanced schedule (schedule_balanced.cuh) deals the tiles by cache length: it needs the lengths, Q by TMA
// (each visit's Q), the TMA ring, at most kBalancedMaxB sequences and every position (tiles and visits) below
// 2^31; else (or past kBalancedMaxRows rows, which the launch checks) the launch runs one CTA a unit.
template <int D, bool kBf16, int kConfig>
bool Instance<D, kBf16, kConfig>::deals_tiles(int B, int Hkv, int S, long long ctas, bool has_seqlens, bool q_tma,
                                              bool gather) {
  using Tr = DecodeTraits<D, kConfig>;
  if constexpr (!Tr::kNarrowOnly && !Tr::kSeesaw64) {
    return false;
  } else {
    return q_tma && !gather && has_seqlens && B <= kBalancedMaxB &&
           static_cast<long long>(B) * Hkv * ((S + Tr::kBlockN - 1) / Tr::kBlockN + balanced_visit_weight<Tr>()) +
               ctas < INT32_MAX;
  }
}

template <int D, bool kBf16, int kConfig>
bool Instance<D, kBf16, kConfig>::q_box_tma(int G) {
  using Tr = DecodeTraits<D, kConfig>;
  return Tr::kQByTma && kQTmaEnabled && q_box_fits(G, Tr::kQTmaRows);
}

template <int D, bool kBf16, int kConfig>
int Instance<D, kBf16, kConfig>::launch(const DecodeParams& p, const KvCaches& kv, size_t workspace_size,
                                        cudaStream_t stream) {
  using Tr = DecodeTraits<D, kConfig>;
  DecodeParams lp = p;
  dim3 grid;
  if (decode_grid(p, Tr::kBlockM, &grid)) return 1;
  const long long ctas = static_cast<long long>(grid.x) * grid.y * grid.z;
  const bool gather = p.block_table != nullptr && paged_gathers(D, kConfig, p.page_size, ctas, sm_count());
  CUtensorMap tmap_k, tmap_v;
  if (encode_kv_maps(lp, kv, D, kBf16, Tr::kTmaRows, gather, &tmap_k, &tmap_v, Tr::kSharedKv)) return 1;
  // The shared-latent kernels' V is their K stage, so the V-map slot carries Q's map where Q's rows are one box.
  if constexpr (Tr::kQByTma)
    lp.q_tma = q_box_tma(p.G) && encode_q_map(&tmap_v, p.q, kBf16 ? 1 : 0, p.B, p.T, p.Hq, D, p.G, p.q_b, p.q_t,
                                              p.q_h, Tr::kQTmaRows);

  lp.balanced = p.balanced && p.rows <= kBalancedMaxRows &&
                deals_tiles(p.B, p.Hkv, p.S, ctas, p.seqlens != nullptr, lp.q_tma, gather);
  lp.pieces_by_fragment = lp.balanced && Tr::kSeesaw64 && p.rows % 8 == 0;  // (a slot of whole 8-row groups)
  auto kernel = decode_kernel<D, kBf16, kConfig>;
  constexpr size_t smem = smem_bytes<Tr>();
  static_assert(smem <= kSmemPerCta, "decode kernel shared memory exceeds the sm_90 limit");
  static_assert(fits_ctas_per_sm<Tr>(), "shared memory of kCtasPerSm CTAs exceeds one SM");
  static_assert(merge_capacity_floats<Tr>() > 0, "cluster merge: the K and V rings must be adjacent");
  static_assert(!Tr::kSeesaw64 || ClusterPairSlots<Tr>::kBytes <= merge_capacity_floats<Tr>() * sizeof(float),
                "the two-split merge from registers receives into the idle ring");
  if (detail::configure_kernel<D, kBf16, kConfig>()) return 1;
  if constexpr (Tr::kNarrowOnly || Tr::kSeesaw64) {
    if (lp.balanced) {
      if (detail::configure_kernel<D, kBf16, kConfig, true>()) return 1;
      kernel = decode_kernel_balanced<D, kBf16, kConfig>;
    }
  }

  const long long clusters = static_cast<long long>(grid.x / p.num_splits) * p.Hkv * p.B;  // one per split group
  // Decided once: the shared memory the launch asks for and the cluster occupancy the merge mode reads.
  const bool exclusive = exclusive_sms(clusters * p.num_splits, p.num_splits);
  lp.cluster_merge = lp.balanced ? kMergeByKernel : merge_mode(p.num_splits, clusters, p.rows, exclusive);
  // The gather path's cp.async writes into the ring, which the dealt-rows merge then receives into:
  // racecheck reports them as racing with the pushes, so gathered launches merge by kernel.
  if (kv_gather(lp) && lp.cluster_merge == kMergeDealtRows) lp.cluster_merge = kMergeByKernel;
  // The pair merge has no sinks (the dealt-rows merge and the combine kernel join them).
  if (lp.sinks != nullptr && lp.cluster_merge == kMergePair) lp.cluster_merge = kMergeByKernel;
  lp.partials_f16 = half_partials() && (lp.balanced || (p.num_splits > 1 && lp.cluster_merge == kMergeByKernel));
  if (check_workspace(lp, Tr::kHeadDimV, workspace_size)) return 1;
  // The splits of one (row block, KV head, sequence) form a cluster: blockIdx.x = row_block * num_splits + split.
  int cluster_x = lp.cluster_merge != kMergeByKernel ? p.num_splits : 0;
  // Unsplit 64-key seesaw grids of several row blocks read a sequence's latent once per row block, the
  // later reader from L2. Under PDL a CTA starts when an SM frees, so two row blocks of a sequence may
  // start microseconds apart; launched as a cluster, a pair starts together.
  if (!lp.balanced && pairs_row_blocks(p.num_splits, grid.x / p.num_splits, exclusive)) cluster_x = 2;
  // A balanced grid is at most one wave: its shares are dealt by length, so more CTAs than the SMs hold only add
  // a second wave and more pieces to merge (its workspace has slots for the plan's grid, which is no smaller).
  if (lp.balanced) {
    const long long resident = static_cast<long long>(sm_count()) * Tr::kCtasPerSm;
    if constexpr (Tr::kSeesaw64) {  // (C, row blocks): C CTAs deal each row block's units
      const long long row_blocks = grid.x / p.num_splits, per_block = ctas / row_blocks;
      const long long c = resident > 0 ? std::min(per_block, std::max(1LL, resident / row_blocks)) : per_block;
      grid = dim3(static_cast<unsigned>(c), static_cast<unsigned>(row_blocks), 1);
    } else if (resident > 0 && ctas > resident) {
      grid = dim3(static_cast<unsigned>(resident), 1, 1);
    }
  }
  const int threads = kv_gather(lp) ? Tr::kGatherThreads : Tr::kThreads;  // (the gathering warps)
  if (launch_decode_kernel(kernel, grid, threads, detail::launch_smem_bytes<Tr>(exclusive), stream, kPdl,
                           cluster_x, tmap_k, tmap_v, lp))
    return 1;
  if (!kProbeNoCombine && ((p.num_splits > 1 && lp.cluster_merge == kMergeByKernel) || lp.balanced))
    return launch_combine<Tr::kHeadDimV, kBf16>(lp, stream, kPdl);
  return 0;
}

}  // namespace sm90
}  // namespace fmha
