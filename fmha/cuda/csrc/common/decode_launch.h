// fmha: the host pieces every architecture's decode launch shares (each arch's launch.cuh):
// the K/V caches of a launch, the tensor maps over them (or over page pools), the grid and workspace
// checks, and the launch with its attributes. Host code only.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "host.h"
#include "params.h"

namespace fmha {

// The K and V caches of a launch: base pointers and element strides (batch, token, head); for paged
// caches, the pools (batch = page, token = row in the page).
struct KvCaches {
  const void* k;
  const void* v;
  int64_t k_b, k_s, k_h;
  int64_t v_b, v_s, v_h;
};

// Dynamic shared memory a decode launch asks for: the kernel's own (`own`), or for an exclusive launch
// (exclusive_sms) at least half an SM's, so that two CTAs (with their reserved 1 KB each) never share an SM.
constexpr size_t launch_smem_bytes(size_t own, size_t smem_per_sm, bool exclusive) {
  return exclusive && own < smem_per_sm / 2 ? smem_per_sm / 2 : own;
}

// The K and V tensor maps of a launch, in boxes of tma_rows tokens, or over the page pools in boxes that
// stay inside one page (lp.page_box_rows is set for paged caches: 0 where `gather`, the architecture's
// paged_gathers). 0, or fail() naming the tensor.
// shared_kv (one ring): V is read through K's map, which tmap_v then copies.
inline int encode_kv_maps(DecodeParams& lp, const KvCaches& kv, int D, bool bf16, int tma_rows, bool gather,
                          CUtensorMap* tmap_k, CUtensorMap* tmap_v, bool shared_kv = false) {
  const bool paged = lp.block_table != nullptr;
  if (paged) lp.page_box_rows = gather ? 0 : paged_box_rows(lp.page_size, tma_rows);
  const int map_b = paged ? lp.num_blocks : lp.B, map_s = paged ? lp.page_size : lp.S;
  const int box_rows = !paged ? tma_rows : lp.page_box_rows > 0 ? lp.page_box_rows : 1;
  const int dtype = bf16 ? 1 : 0;
  if (encode_kv_map(tmap_k, kv.k, dtype, map_b, map_s, lp.Hkv, D, kv.k_b, kv.k_s, kv.k_h, box_rows, lp.k_head_major,
                    "k_cache", paged))
    return 1;
  if (shared_kv) {
    *tmap_v = *tmap_k;
    return 0;
  }
  return encode_kv_map(tmap_v, kv.v, dtype, map_b, map_s, lp.Hkv, D, kv.v_b, kv.v_s, kv.v_h, box_rows,
                       lp.v_head_major, "v_cache", paged);
}

// The decode grid (row blocks x splits, KV heads, sequences; see sm90/kernel.cuh), or fail() past the
// hardware's limits.
inline int decode_grid(const DecodeParams& p, int block_m, dim3* grid) {
  const int row_blocks = (p.rows + block_m - 1) / block_m;
  const long long grid_x = static_cast<long long>(row_blocks) * p.num_splits;
  if (grid_x > 0x7fffffffLL || p.Hkv > 65535 || p.B > 65535)
    return fail("grid too large: row_blocks*num_splits=%lld Hkv=%d B=%d (limits 2^31-1, 65535, 65535)", grid_x,
                p.Hkv, p.B);
  *grid = dim3(static_cast<unsigned>(grid_x), static_cast<unsigned>(p.Hkv), static_cast<unsigned>(p.B));
  return 0;
}

// Where the splits merge through the combine kernel, the workspace must hold their partials; otherwise
// the kernel never touches one (its pointers are cleared). 0, or fail().
inline int check_workspace(DecodeParams& lp, int D, size_t workspace_size) {
  if (lp.num_splits > 1 && lp.cluster_merge == kMergeByKernel) {
    const size_t need = workspace_bytes(lp.B, lp.T, lp.Hq, D, lp.num_splits);
    if (lp.o_partial == nullptr || workspace_size < need)
      return fail("workspace of %zu bytes is too small: num_splits=%d merged by the combine kernel needs %zu",
                  lp.o_partial == nullptr ? size_t{0} : workspace_size, lp.num_splits, need);
    if (reinterpret_cast<uintptr_t>(lp.o_partial) % 16 != 0)
      return fail("workspace must be 16-byte aligned: num_splits=%d merged by the combine kernel reads it by float4",
                  lp.num_splits);
  } else if (!lp.balanced) {  // (the balanced schedule's pieces use the workspace: capi.cu sized it)
    lp.o_partial = nullptr;
    lp.lse_partial = nullptr;
  }
  return 0;
}

// Sets a decode kernel's dynamic shared memory (and, with non_portable_clusters, cluster sizes above the
// portable 8) once per device: the attributes are per function and per device, so the hot path skips the
// driver calls once `configured` has the device's bit (setting them twice, a race, is harmless).
template <class Kernel>
int configure_decode_kernel(Kernel kernel, size_t smem, bool non_portable_clusters,
                            std::atomic<uint64_t>& configured) {
  int device = 0;
  if (check_cuda(cudaGetDevice(&device), "cudaGetDevice")) return 1;
  const uint64_t device_bit = device < kMaxDevices ? (uint64_t{1} << device) : 0;
  if (device_bit == 0 || !(configured.load(std::memory_order_relaxed) & device_bit)) {
    if (check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)),
                   "cudaFuncSetAttribute(decode, max dynamic smem)"))
      return 1;
    if (non_portable_clusters && cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1) !=
                                     cudaSuccess)
      (void)cudaGetLastError();  // then only portable cluster sizes (<= 8) can merge in clusters
    configured.fetch_or(device_bit, std::memory_order_relaxed);
  }
  return 0;
}

// Launches a decode kernel: programmatic stream serialization (PDL) where `pdl` (the grid may be scheduled
// before the previous kernel on the stream has finished; the kernel waits in griddepcontrol.wait before
// it touches global memory), and clusters of `cluster_x` CTAs along x where cluster_x > 0.
template <class Kernel>
int launch_decode_kernel(Kernel kernel, dim3 grid, int threads, size_t smem, cudaStream_t stream, bool pdl,
                         int cluster_x, const CUtensorMap& tmap_k, const CUtensorMap& tmap_v, const DecodeParams& lp) {
  cudaLaunchAttribute attr[2];
  int n_attr = 0;
  if (pdl) {
    attr[n_attr].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[n_attr++].val.programmaticStreamSerializationAllowed = 1;
  }
  if (cluster_x > 0) {
    attr[n_attr].id = cudaLaunchAttributeClusterDimension;
    attr[n_attr].val.clusterDim.x = static_cast<unsigned>(cluster_x);
    attr[n_attr].val.clusterDim.y = 1;
    attr[n_attr++].val.clusterDim.z = 1;
  }
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = dim3(static_cast<unsigned>(threads));
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cfg.attrs = attr;
  cfg.numAttrs = n_attr;
  return check_cuda(cudaLaunchKernelEx(&cfg, kernel, tmap_k, tmap_v, lp), "decode kernel launch");
}

}  // namespace fmha
