// fmha sm_100a: definitions of the host side of one instantiation (sm100/launch.h): function attributes,
// the merge mode (always the combine kernel) and the launch. Included by instantiations/sm100_*.cu only.
// Compiled for sm_100a and never run: no Blackwell GPU has launched it.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>

#include "../common/combine_launch.h"
#include "../common/host.h"
#include "kernel.cuh"
#include "launch.h"
#include "traits.h"

namespace fmha {
namespace sm100 {
namespace detail {

// Dynamic shared memory of a decode launch: the kernel's storage, or for an exclusive launch (exclusive_sms)
// at least half an SM's, so that two CTAs never share an SM (as on sm_90).
template <class Tr>
constexpr size_t launch_smem_bytes(bool exclusive) {
  constexpr size_t own = smem_bytes<Tr>();
  constexpr size_t half_sm = kSmemPerSm / 2;
  return exclusive && own < half_sm ? half_sm : own;
}

// Sets the decode kernel's dynamic shared memory attribute once per device.
template <int D, bool kBf16, int kConfig>
int configure_kernel() {
  using Tr = DecodeTraits<D, kConfig>;
  auto kernel = decode_kernel<D, kBf16, kConfig>;
  constexpr size_t smem = launch_smem_bytes<Tr>(true);
  static std::atomic<uint64_t> configured_devices{0};
  int device = 0;
  if (check_cuda(cudaGetDevice(&device), "cudaGetDevice")) return 1;
  const uint64_t device_bit = device < 64 ? (uint64_t{1} << device) : 0;
  if (device_bit == 0 || !(configured_devices.load(std::memory_order_relaxed) & device_bit)) {
    if (check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)),
                   "cudaFuncSetAttribute(decode, max dynamic smem)"))
      return 1;
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
  static_assert(smem <= 227 * 1024, "decode kernel shared memory exceeds the sm_100 limit");
  static_assert(fits_ctas_per_sm<Tr>(), "shared memory of kCtasPerSm CTAs exceeds one SM");
  if (detail::configure_kernel<D, kBf16, kConfig>()) return 1;

  const int row_blocks = (p.rows + Tr::kBlockM - 1) / Tr::kBlockM;
  const long long grid_x = static_cast<long long>(row_blocks) * p.num_splits;
  if (grid_x > 0x7fffffffLL || p.Hkv > 65535 || p.B > 65535)
    return fail("grid too large: row_blocks*num_splits=%lld Hkv=%d B=%d (limits 2^31-1, 65535, 65535)", grid_x,
                p.Hkv, p.B);
  dim3 grid(static_cast<unsigned>(grid_x), static_cast<unsigned>(p.Hkv), static_cast<unsigned>(p.B));
  const long long ctas = static_cast<long long>(grid_x) * p.Hkv * p.B;
  const bool exclusive = exclusive_sms(ctas, p.num_splits);
  lp.cluster_merge = kMergeByKernel;
  if (p.num_splits > 1) {  // partials go through the workspace
    const size_t need = workspace_bytes(p.B, p.T, p.Hq, D, p.num_splits);
    if (p.o_partial == nullptr || workspace_size < need)
      return fail("workspace of %zu bytes is too small: num_splits=%d merged by the combine kernel needs %zu",
                  p.o_partial == nullptr ? size_t{0} : workspace_size, p.num_splits, need);
  } else {
    lp.o_partial = nullptr;
    lp.lse_partial = nullptr;
  }
  // Programmatic stream serialization (PDL), as on sm_90: the kernel waits (griddepcontrol.wait) before
  // it touches global memory or allocates Tensor Memory.
  cudaLaunchAttribute attr[1];
  int n_attr = 0;
  if (kPdl) {
    attr[n_attr].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[n_attr++].val.programmaticStreamSerializationAllowed = 1;
  }
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = dim3(Tr::kThreads);
  cfg.dynamicSmemBytes = detail::launch_smem_bytes<Tr>(exclusive);
  cfg.stream = stream;
  cfg.attrs = attr;
  cfg.numAttrs = n_attr;
  if (check_cuda(cudaLaunchKernelEx(&cfg, kernel, tmap_k, tmap_v, lp), "decode kernel launch")) return 1;
  if (p.num_splits > 1) return launch_combine<D, kBf16>(lp, stream, kPdl);
  return 0;
}

}  // namespace sm100
}  // namespace fmha
