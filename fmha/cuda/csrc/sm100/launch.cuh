// fmha sm_100a: definitions of the host side of one instantiation (sm100/launch.h): function attributes,
// the merge mode (always the combine kernel) and the launch. Included by instantiations/sm100_*.cu only.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>

#include "../common/combine_launch.h"
#include "../common/decode_launch.h"
#include "../common/host.h"
#include "kernel.cuh"
#include "launch.h"
#include "traits.h"

namespace fmha {
namespace sm100 {
namespace detail {

// Dynamic shared memory of a decode launch (common/decode_launch.h), exclusive or not.
template <class Tr>
constexpr size_t launch_smem_bytes(bool exclusive) {
  return ::fmha::launch_smem_bytes(smem_bytes<Tr>(), kSmemPerSm, exclusive);
}

// Sets the decode kernel's dynamic shared memory attribute once per device.
template <int D, bool kBf16, int kConfig>
int configure_kernel() {
  using Tr = DecodeTraits<D, kConfig>;
  static std::atomic<uint64_t> configured_devices{0};  // one per instantiation
  return configure_decode_kernel(decode_kernel<D, kBf16, kConfig>, launch_smem_bytes<Tr>(true), false,
                                 configured_devices);
}

}  // namespace detail

template <int D, bool kBf16, int kConfig>
int Instance<D, kBf16, kConfig>::max_active_clusters(int, bool) {
  return 0;  // no cluster merge on sm_100a
}

template <int D, bool kBf16, int kConfig>
int Instance<D, kBf16, kConfig>::merge_mode(int, long long, int, bool) {
  return kMergeByKernel;
}

template <int D, bool kBf16, int kConfig>
int Instance<D, kBf16, kConfig>::launch(const DecodeParams& p, const KvCaches& kv, size_t workspace_size,
                                        cudaStream_t stream) {
  using Tr = DecodeTraits<D, kConfig>;
  DecodeParams lp = p;
  CUtensorMap tmap_k, tmap_v;
  const bool gather = p.block_table != nullptr && paged_gathers(D, kConfig, p.page_size, 0, 0);
  if (encode_kv_maps(lp, kv, D, kBf16, Tr::kTmaRows, gather, &tmap_k, &tmap_v, Tr::kSharedKv)) return 1;

  auto kernel = decode_kernel<D, kBf16, kConfig>;
  constexpr size_t smem = smem_bytes<Tr>();
  static_assert(smem <= kSmemPerCta, "decode kernel shared memory exceeds the sm_100 limit");
  static_assert(fits_ctas_per_sm<Tr>(), "shared memory of kCtasPerSm CTAs exceeds one SM");
  if (detail::configure_kernel<D, kBf16, kConfig>()) return 1;

  dim3 grid;
  if (decode_grid(p, Tr::kBlockM, &grid)) return 1;
  const long long ctas = static_cast<long long>(grid.x) * p.Hkv * p.B;
  const bool exclusive = exclusive_sms(ctas, p.num_splits);
  lp.cluster_merge = kMergeByKernel;  // no cluster merge on sm_100a
  if (check_workspace(lp, Tr::kHeadDimV, workspace_size)) return 1;
  // PDL as on sm_90: the kernel waits (griddepcontrol.wait) before it touches global memory or allocates
  // Tensor Memory.
  if (launch_decode_kernel(kernel, grid, Tr::kThreads, detail::launch_smem_bytes<Tr>(exclusive), stream, kPdl, 0,
                           tmap_k, tmap_v, lp))
    return 1;
  if (p.num_splits > 1) return launch_combine<Tr::kHeadDimV, kBf16>(lp, stream, kPdl);
  return 0;
}

}  // namespace sm100
}  // namespace fmha
