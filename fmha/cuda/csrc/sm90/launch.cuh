// fmha sm_90a: definitions of the host side of one instantiation (sm90/launch.h): function attributes,
// cluster occupancy, the split-KV merge mode and the launch. Included by instantiations/sm90_*.cu only.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>

#include "../common/combine_launch.h"
#include "../common/host.h"
#include "../common/merge_layout.h"
#include "../common/probe.cuh"
#include "kernel.cuh"
#include "launch.h"
#include "traits.h"

namespace fmha {
namespace sm90 {
namespace detail {

// Dynamic shared memory of a decode launch: the kernel's storage, or for an exclusive launch (exclusive_sms) at
// least half an SM's (two such CTAs with their reserved 1 KB each exceed kSmemPerSm).
template <class Tr>
constexpr size_t launch_smem_bytes(bool exclusive) {
  constexpr size_t own = smem_bytes<Tr>();
  constexpr size_t half_sm = kSmemPerSm / 2;
  return exclusive && own < half_sm ? half_sm : own;
}

// Sets the decode kernel's function attributes once per device: the dynamic shared memory it needs,
// and cluster sizes above the portable 8 (the cluster merge uses up to kMaxClusterSplits CTAs).
template <int D, bool kBf16, int kConfig>
int configure_kernel() {
  using Tr = DecodeTraits<D, kConfig>;
  auto kernel = decode_kernel<D, kBf16, kConfig>;
  constexpr size_t smem = launch_smem_bytes<Tr>(true);  // the most a launch asks for
  // The attributes are per function and per device (one static per instantiation). Remember which
  // devices are done so the hot path skips the driver calls; setting them twice (a race between
  // threads) is harmless.
  static std::atomic<uint64_t> configured_devices{0};
  int device = 0;
  if (check_cuda(cudaGetDevice(&device), "cudaGetDevice")) return 1;
  const uint64_t device_bit = device < kMaxDevices ? (uint64_t{1} << device) : 0;
  if (device_bit == 0 || !(configured_devices.load(std::memory_order_relaxed) & device_bit)) {
    if (check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)),
                   "cudaFuncSetAttribute(decode, max dynamic smem)"))
      return 1;
    if (cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1) != cudaSuccess)
      (void)cudaGetLastError();  // then only portable cluster sizes (<= 8) can merge in clusters
    configured_devices.fetch_or(device_bit, std::memory_order_relaxed);
  }
  return 0;
}

// Tokens per TMA box of a paged launch: the largest power of two dividing the page size, at most the
// configuration's TMA rows; 0 below 8 rows (the gather path).
constexpr int paged_box_rows(int page_size, int tma_rows) {
  const int low = page_size & -page_size;
  return low < 8 ? 0 : low < tma_rows ? low : tma_rows;
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
// cost more than the combine kernel saves): dealt rows for at most kClusterMergeMaxRows packed rows
// (64-row problems measured slower that way), else pairs for two splits of the 64-row loop (the narrow
// loop has its own epilogue), else the combine kernel. `exclusive`: the launch runs one CTA per SM
// (exclusive_sms), so the occupancy query asks as the launch will.
template <int D, bool kBf16, int kConfig>
int Instance<D, kBf16, kConfig>::merge_mode(int num_splits, long long clusters, int rows, bool exclusive) {
  using Tr = DecodeTraits<D, kConfig>;
  if (!kClusterMergeEnabled || kProbeNoCombine || num_splits < 2) return kMergeByKernel;
  if (Tr::kClusterMerge && rows <= kClusterMergeMaxRows && num_splits <= kMaxClusterSplits &&
      merge_fits<Tr>(num_splits, rows) && max_active_clusters(num_splits, exclusive) >= clusters)
    return kMergeDealtRows;
  const bool narrow = Tr::kNarrow && rows <= Tr::kNarrowRows;
  if (Tr::kPairMerge && num_splits == 2 && !narrow && max_active_clusters(2, exclusive) >= clusters)
    return kMergePair;
  return kMergeByKernel;
}

template <int D, bool kBf16, int kConfig>
int Instance<D, kBf16, kConfig>::launch(const DecodeParams& p, const KvCaches& kv, size_t workspace_size,
                                        cudaStream_t stream) {
  using Tr = DecodeTraits<D, kConfig>;
  DecodeParams lp = p;
  // Paged caches: the maps run over the pools, in boxes that stay inside one page (page_box_rows; 0 where
  // the page size is no multiple of 8, a box's 1024-byte swizzle group: the producer warp gathers).
  const bool paged = p.block_table != nullptr;
  if (paged) lp.page_box_rows = detail::paged_box_rows(p.page_size, Tr::kTmaRows);
  const int map_b = paged ? p.num_blocks : p.B, map_s = paged ? p.page_size : p.S;
  const int box_rows = !paged ? Tr::kTmaRows : lp.page_box_rows > 0 ? lp.page_box_rows : 1;
  CUtensorMap tmap_k, tmap_v;
  const int dtype = kBf16 ? 1 : 0;
  if (encode_kv_map(&tmap_k, kv.k, dtype, map_b, map_s, p.Hkv, D, kv.k_b, kv.k_s, kv.k_h, box_rows, p.k_head_major,
                    "k_cache", paged))
    return 1;
  if (encode_kv_map(&tmap_v, kv.v, dtype, map_b, map_s, p.Hkv, D, kv.v_b, kv.v_s, kv.v_h, box_rows, p.v_head_major,
                    "v_cache", paged))
    return 1;

  auto kernel = decode_kernel<D, kBf16, kConfig>;
  constexpr size_t smem = smem_bytes<Tr>();
  static_assert(smem <= 227 * 1024, "decode kernel shared memory exceeds the sm_90 limit");
  static_assert(fits_ctas_per_sm<Tr>(), "shared memory of kCtasPerSm CTAs exceeds one SM");
  static_assert(merge_capacity_floats<Tr>() > 0, "cluster merge: the K and V rings must be adjacent");
  if (detail::configure_kernel<D, kBf16, kConfig>()) return 1;

  const int row_blocks = (p.rows + Tr::kBlockM - 1) / Tr::kBlockM;
  const long long grid_x = static_cast<long long>(row_blocks) * p.num_splits;
  if (grid_x > 0x7fffffffLL || p.Hkv > 65535 || p.B > 65535)
    return fail("grid too large: row_blocks*num_splits=%lld Hkv=%d B=%d (limits 2^31-1, 65535, 65535)", grid_x,
                p.Hkv, p.B);
  dim3 grid(static_cast<unsigned>(grid_x), static_cast<unsigned>(p.Hkv), static_cast<unsigned>(p.B));
  const long long clusters = static_cast<long long>(row_blocks) * p.Hkv * p.B;  // one per split group
  // Decided once: the shared memory the launch asks for and the cluster occupancy the merge mode reads.
  const bool exclusive = exclusive_sms(clusters * p.num_splits, p.num_splits);
  lp.cluster_merge = merge_mode(p.num_splits, clusters, p.rows, exclusive);
  // The gather path's cp.async writes into the ring, which the dealt-rows merge then receives into:
  // racecheck reports them as racing with the pushes, so gathered launches merge by kernel.
  if (paged && lp.page_box_rows == 0 && lp.cluster_merge == kMergeDealtRows) lp.cluster_merge = kMergeByKernel;
  if (p.num_splits > 1 && lp.cluster_merge == kMergeByKernel) {  // partials go through the workspace
    const size_t need = workspace_bytes(p.B, p.T, p.Hq, D, p.num_splits);
    if (p.o_partial == nullptr || workspace_size < need)
      return fail("workspace of %zu bytes is too small: num_splits=%d merged by the combine kernel needs %zu",
                  p.o_partial == nullptr ? size_t{0} : workspace_size, p.num_splits, need);
  } else {
    lp.o_partial = nullptr;  // merged in clusters (or unsplit): the kernel never touches a workspace
    lp.lse_partial = nullptr;
  }
  // Programmatic stream serialization (PDL): the grid may be scheduled before the previous kernel
  // on the stream has finished; the kernel waits (griddepcontrol.wait) before reading or writing
  // global memory. Without a PDL-aware predecessor it behaves like a plain launch.
  cudaLaunchAttribute attr[2];
  int n_attr = 0;
  if (kPdl) {
    attr[n_attr].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[n_attr++].val.programmaticStreamSerializationAllowed = 1;
  }
  if (lp.cluster_merge != kMergeByKernel) {  // the splits of one (row block, KV head, sequence): blockIdx.x = row_block * num_splits + split
    attr[n_attr].id = cudaLaunchAttributeClusterDimension;
    attr[n_attr].val.clusterDim.x = static_cast<unsigned>(p.num_splits);
    attr[n_attr].val.clusterDim.y = 1;
    attr[n_attr++].val.clusterDim.z = 1;
  }
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = dim3(Tr::kThreads);
  cfg.dynamicSmemBytes = detail::launch_smem_bytes<Tr>(exclusive);
  cfg.stream = stream;
  cfg.attrs = attr;
  cfg.numAttrs = n_attr;
  if (check_cuda(cudaLaunchKernelEx(&cfg, kernel, tmap_k, tmap_v, lp), "decode kernel launch")) return 1;

  if (p.num_splits > 1 && lp.cluster_merge == kMergeByKernel && !kProbeNoCombine)
    return launch_combine<D, kBf16>(lp, stream, kPdl);
  return 0;
}

}  // namespace sm90
}  // namespace fmha
