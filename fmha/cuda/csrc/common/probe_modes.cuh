// fmha: the timing probe's modes that replace part of the kernel (probe build only, see probe.cuh).
#pragma once

#include <cstdint>

#include "kv_ring.cuh"
#include "probe.cuh"

#if !FMHA_PROBE
#error "probe_modes.cuh belongs to the probe build (FMHA_PROBE=1)"
#endif

namespace fmha {

// FMHA_PROBE_STREAM_ONLY (wrong results by design): the consumers release each stage as soon as it
// lands, with no MMA or softmax, to time the K/V stream alone; they still take part in the cluster
// barriers the producer takes part in. Each empty barrier gets the arrivals its count expects
// (Tr::kKFreedByOneWg, Tr::kVBarriers).
template <class Tr, class Ss>
__device__ __forceinline__ void probe_stream_only_consumer(Ss& ss, const TileRange& tr, bool cluster_merge,
                                                           bool pair_merge) {
  const int lane = threadIdx.x % 32;
  const int wg = static_cast<int>(threadIdx.x) / 128;  // (consumers are the CTA's first threads)
  for (int it = 0; it < tr.end - tr.begin; ++it) {
    const int stage = it % Tr::kStages;
    const uint32_t phase = static_cast<uint32_t>(it / Tr::kStages) & 1u;
    ptx::mbarrier_wait_parity(&ss.full_k[stage], phase);
    const int k_wg = Tr::kRingHalves ? 0 : it % 2;  // (kKFreedByOneWg only)
    if (!Tr::kKFreedByOneWg || wg == k_wg) release_stage(&ss.empty_k[stage], lane);
    if constexpr (Tr::kVBarriers) {
      const int stage_v = it % Tr::kStagesV;
      ptx::mbarrier_wait_parity(&ss.full_v[stage_v], static_cast<uint32_t>(it / Tr::kStagesV) & 1u);
      if (!Tr::kRingHalves || wg == 1) release_stage(&ss.empty_v[stage_v], lane);
      // (the rope box lands with the second half; its owner frees it)
      if constexpr (Tr::kRopeRing)
        if (wg == it % 2) release_stage(&ss.empty_rope[Tr::rope_stage(it)], lane);
    }
  }
  if (cluster_merge) {
    ptx::cluster_sync();
    ptx::cluster_sync();
  }
  if (pair_merge) ptx::cluster_sync();
}

}  // namespace fmha
