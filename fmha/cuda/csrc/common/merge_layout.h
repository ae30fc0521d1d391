// fmha: the layout of the cluster merge's receive buffer (common/merge.cuh), as constexpr functions
// the host and every architecture's shared-memory plan can evaluate.
#pragma once

#include <cuda_runtime.h>  // __host__ __device__

#include <cstddef>

namespace fmha {

// Most CTAs in one cluster merge (p.cluster_merge): the non-portable maximum on sm_90.
constexpr int kMaxClusterSplits = 16;

// Floats between two received rows of o: rows are padded by 4 floats so that the fragment stores of
// several rows do not fall on one bank.
__host__ __device__ constexpr int merge_stride(int head_dim) { return head_dim + 4; }

// Whether a receive buffer of `capacity_floats` holds num_splits x ceil(rows / num_splits) rows of o and
// their LSEs, rows = the packed rows of the fullest row block of block_m rows.
__host__ __device__ constexpr bool merge_slots_fit(int num_splits, int rows, int block_m, int head_dim, size_t capacity_floats) {
  const int block_rows = rows < block_m ? rows : block_m;
  const size_t slots = static_cast<size_t>(num_splits) * ((block_rows + num_splits - 1) / num_splits);
  return slots * (merge_stride(head_dim) + 1) <= capacity_floats;
}

}  // namespace fmha
