// fmha: split-KV merges inside thread-block clusters, arch-neutral: the dealt-rows merge (every split
// pushes each partial row to the rank that merges it; with two consumer warpgroups and two splits, only the
// partner's rows, the rank's own merged from registers) and the pair merge (two splits push as soon as
// each has finished). The combine kernel (combine.cuh) merges the rest through the workspace.
#pragma once

#include <cstdint>

#include "merge_layout.h"
#include "combine.cuh"  // SplitMerge
#include "ptx.cuh"
#include "rows.cuh"
#include "softmax.cuh"

namespace fmha {

// Split-KV merge inside a cluster (p.cluster_merge): the num_splits CTAs of one (row block, KV head,
// sequence) run as one cluster, rank = split. The block's rows are dealt out to the ranks,
// rows_per_rank each (rank r merges rows [r rows_per_rank, (r + 1) rows_per_rank)). Every CTA pushes
// each partial row (its split's normalised o and LSE) into the receive buffer of the rank that merges
// it (st.shared::cluster, no round trip), then every rank merges its rows from its own shared memory
// (merge_cluster_splits). Two cluster barriers: before the pushes (every ring in the cluster is idle)
// and after them.
template <class Tr>
struct ClusterMerge {
  int ns, rows_per_rank;
  uint32_t base;  // this CTA's receive buffer (shared::cta address; mapa gives the others')
  template <class Ss>
  __device__ __forceinline__ ClusterMerge(Ss& ss, const DecodeParams& p, int row0)
      : ns(p.num_splits), rows_per_rank((min(Tr::kBlockM, p.rows - row0) + p.num_splits - 1) / p.num_splits),
        base(ptx::smem_addr(ss.merge_base())) {}
  __device__ __forceinline__ int owner(int row_local) const { return row_local / rows_per_rank; }
  // Receive slot of (split, local row of its owner): o at column 0, and the LSE.
  __device__ __forceinline__ uint32_t o_slot(int split, int row_local) const {
    return base + 4u * static_cast<uint32_t>((split * rows_per_rank + row_local % rows_per_rank) *
                                             merge_stride(Tr::kHeadDimV));
  }
  __device__ __forceinline__ uint32_t lse_slot(int split, int row_local) const {
    return base + 4u * static_cast<uint32_t>(ns * rows_per_rank * merge_stride(Tr::kHeadDimV) +
                                             split * rows_per_rank + row_local % rows_per_rank);
  }
};

// Where one partial row of a split goes: the workspace (combine kernel), or the receive buffer of the
// cluster rank that merges it.
template <class Tr>
struct PartialRow {
  float* o = nullptr;    // workspace: the row's column 0
  float* lse = nullptr;
  uint32_t o_remote = 0, lse_remote = 0;  // cluster merge: shared::cluster addresses in the owner CTA
  bool cluster = false;
  // in_cluster: push into cm's ranks, else write the workspace. (cm by reference with a flag, not
  // a pointer that may be null: a pointer to it kept cm in local memory, a 24-byte stack frame.)
  __device__ __forceinline__ PartialRow(const DecodeParams& p, const OutRow& r, int b, int split, int row_local,
                                        const ClusterMerge<Tr>& cm, bool in_cluster) {
    if (in_cluster) {
      cluster = true;
      const uint32_t owner = static_cast<uint32_t>(cm.owner(row_local));
      o_remote = ptx::map_shared_rank(cm.o_slot(split, row_local), owner);
      lse_remote = ptx::map_shared_rank(cm.lse_slot(split, row_local), owner);
    } else {
      o = r.partial(p, b, split, Tr::kHeadDimV);
      lse = r.partial_lse(p, split);
    }
  }
  __device__ __forceinline__ void put(int col, float x) const {
    if (cluster) ptx::st_shared_cluster_f32(o_remote + 4u * col, x);
    else o[col] = x;
  }
  __device__ __forceinline__ void put2(int col, float x, float y) const {  // col even
    if (cluster) ptx::st_shared_cluster_v2f32(o_remote + 4u * col, x, y);
    else *reinterpret_cast<float2*>(o + col) = make_float2(x, y);
  }
  __device__ __forceinline__ void put_lse(float x) const {
    if (cluster) ptx::st_shared_cluster_f32(lse_remote, x);
    else *lse = x;
  }
};

// Whether this launch merges its splits in clusters. The kernel body and the epilogues must agree
// (every thread runs both cluster barriers or none), so both ask here. Instantiations without
// Tr::kClusterMerge compile the path out (the host never asks them for it).
template <class Tr>
__device__ __forceinline__ bool uses_cluster_merge(const DecodeParams& p) {
  if constexpr (!Tr::kClusterMerge) return false;
  return p.num_splits > 1 && p.cluster_merge == kMergeDealtRows;
}

// (Also checked here, as the host does: the narrow loop has its own epilogue, which would leave the
// partials unmerged; the host never asks, but a wrong answer must not be possible.)
template <class Tr>
__device__ __forceinline__ bool uses_pair_merge(const DecodeParams& p) {
  if constexpr (!Tr::kPairMerge) return false;
  const bool narrow = Tr::kNarrow && p.rows <= Tr::kNarrowRows;
  return p.num_splits == 2 && p.cluster_merge == kMergePair && !narrow;
}

// Before the first partial row of a cluster merge is pushed: every CTA of the cluster has finished
// with its ring. All threads of the CTA take part (the producer in the kernel body).
template <class Tr>
__device__ __forceinline__ bool begin_cluster_push(const DecodeParams& p) {
  const bool cluster = uses_cluster_merge<Tr>(p);
  if (cluster) ptx::cluster_sync();
  return cluster;
}

// Float4 k of a thread's accumulators as the partial a split writes (o / l): acc[4 k + e] is row e / 2 (0: g, 1:
// g + 8) of the warp's 16.
template <int N>
__device__ __forceinline__ float4 partial4(const float (&acc)[N], const float (&inv_l)[2], int k) {
  return make_float4(acc[4 * k] * inv_l[0], acc[4 * k + 1] * inv_l[0], acc[4 * k + 2] * inv_l[1],
                     acc[4 * k + 3] * inv_l[1]);
}

// Float4 k of a thread's two rows merged from its own split's values (mine) and the partner's (other), in
// split order, and stored out as 16-bit pairs (dst[h]: row h's output, null for a padding row).
template <bool kBf16>
__device__ __forceinline__ void store_pair_merged4(uint16_t* (&dst)[2], int k, int ql, int split, float4 mine,
                                                   float4 other, float (&wt)[2][2], float (&inv_w)[2]) {
  const float4 o0 = split == 0 ? mine : other, o1 = split == 0 ? other : mine;
  const float r00 = fmaf(wt[0][1], o1.x, wt[0][0] * o0.x) * inv_w[0];
  const float r01 = fmaf(wt[0][1], o1.y, wt[0][0] * o0.y) * inv_w[0];
  const float r10 = fmaf(wt[1][1], o1.z, wt[1][0] * o0.z) * inv_w[1];
  const float r11 = fmaf(wt[1][1], o1.w, wt[1][0] * o0.w) * inv_w[1];
  if (dst[0]) *reinterpret_cast<uint32_t*>(dst[0] + frag_col(4 * k, ql)) = pack2<kBf16>(r00, r01);
  if (dst[1]) *reinterpret_cast<uint32_t*>(dst[1] + frag_col(4 * k + 2, ql)) = pack2<kBf16>(r10, r11);
}

// kMergePair: the two splits of a row block run as a cluster pair (rank = split). Rank 0 merges rows
// 0-31 of the block (warps 0-1 hold them), rank 1 rows 32-63 (warps 2-3). As soon as a CTA's loop is
// done, its two warps holding the partner's rows push their partial (o already divided by l, and the
// LSE) into the partner's pair_recv and arrive on its pair_full (release, cluster scope), whether or
// not the partner is still streaming; its other two warps wait on their own pair_full and merge the
// partner's values with their registers, in split order (the bits do not depend on which CTA finishes
// first), then store out and the LSE. The first CTA to finish thus pushes while the second streams;
// after the second finishes, one push of 16 KB (D = 128) and the first's merge remain.
template <class Tr, bool kBf16, class Ss>
__device__ __forceinline__ void store_output_pair(Ss& ss, const DecodeParams& p,
                                                  const float (&acc)[Tr::kOutCols / 2], const float (&inv_l)[2],
                                                  const float (&lse)[2], int b, int kvh, int row0, int split,
                                                  int tid_wg) {
  static_assert(Tr::kConsumerWGs == 1, "one consumer warpgroup holds the whole row");
  constexpr int kVec = Tr::kOutCols / 8;  // float4 of a thread's accumulators (2 rows x kOutCols / 4 columns)
  const int w = tid_wg / 32, lane = tid_wg % 32, g = lane / 4, ql = lane % 4;
  const int slot = (w % 2) * 32 + lane;
  if (w / 2 != split) {  // the partner merges these rows: push them
    const uint32_t partner = static_cast<uint32_t>(split ^ 1);
    const uint32_t o_dst = ptx::map_shared_rank(ptx::smem_addr(&ss.pair_recv[0]), partner);
    const uint32_t lse_dst = ptx::map_shared_rank(ptx::smem_addr(&ss.pair_recv_lse[0]), partner);
#pragma unroll
    for (int k = 0; k < kVec; ++k)
      ptx::st_shared_cluster_v4f32(o_dst + 16u * (k * Ss::kPairSlots + slot), partial4(acc, inv_l, k));
#pragma unroll
    for (int h = 0; h < 2; ++h) ptx::st_shared_cluster_f32(lse_dst + 4u * (h * Ss::kPairSlots + slot), lse[h]);
    ptx::mbarrier_arrive_remote_release_cluster(ptx::map_shared_rank(ptx::smem_addr(&ss.pair_full), partner));
    return;
  }
  ptx::mbarrier_wait_parity_acquire_cluster(&ss.pair_full, 0);
  float wt[2][2], inv_w[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const float other = ss.pair_recv_lse[h * Ss::kPairSlots + slot];
    const float lse0 = split == 0 ? lse[h] : other, lse1 = split == 0 ? other : lse[h];
    const float m = fmaxf(lse0, lse1);
    wt[h][0] = lse0 == -INFINITY ? 0.f : exp2_approx((lse0 - m) * kLog2e);
    wt[h][1] = lse1 == -INFINITY ? 0.f : exp2_approx((lse1 - m) * kLog2e);
    const float wsum = wt[h][0] + wt[h][1];
    inv_w[h] = wsum > 0.f ? 1.f / wsum : 0.f;
    const int row = row0 + 16 * w + g + 8 * h;
    if (ql == 0 && row < p.rows) p.lse[OutRow(p, b, kvh, row).lse_idx] = wsum > 0.f ? m + logf(wsum) : -INFINITY;
  }
  uint16_t* dst[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int row = row0 + 16 * w + g + 8 * h;
    dst[h] = row < p.rows ? OutRow(p, b, kvh, row).out(p, b) : nullptr;
  }
#pragma unroll
  for (int k = 0; k < kVec; ++k) {
    const float4 mine = partial4(acc, inv_l, k), other = ss.pair_recv[k * Ss::kPairSlots + slot];
    store_pair_merged4<kBf16>(dst, k, ql, split, mine, other, wt, inv_w);
  }
}

// ----------------------------------------------------------------------------
// Two splits merged from registers (two consumer warpgroups; kMergeDealtRows with num_splits == 2, not
// kMergePair: the pair merge's CTAs push before the partner has finished, into buffers of their own)
// ----------------------------------------------------------------------------
// The dealt-rows merge for two splits without its copies: rank r merges rows 32 r .. 32 r + 31 of the
// block, which warps 2 r and 2 r + 1 of each warpgroup hold. After the first cluster barrier (both rings
// idle: the partner's ring is the receive buffer), the warps holding the partner's rows push them, o
// divided by l and the LSE, as float4 slots [k][slot] (slot = the pushing thread's place among the 128
// threads of its kind, so the partner's thread of the same place reads the same rows and columns); after
// the second, the merging warps combine the slots with their registers, in split order (the bits do not
// depend on which CTA finishes first), add the sink where the launch has sinks and store out and the LSE.
// Against the dealt-rows merge, a CTA pushes half the bytes (none to itself) and reads its own partial
// from registers; the kernel body runs neither its second barrier nor merge_cluster_splits.
template <class Tr>
struct ClusterPairSlots {
  static constexpr int kSlots = 128;                       // 2 warpgroups x 2 warps x 32 lanes
  static constexpr int kVec = Tr::kOutCols / 8;            // float4 of one thread's accumulators
  static constexpr int kOBytes = kVec * kSlots * 16;
  static constexpr int kBytes = kOBytes + 2 * kSlots * 4;  // + the LSEs of both rows of each slot
};

template <class Tr, bool kBf16, class Ss>
__device__ __forceinline__ void store_output_cluster_pair(Ss& ss, const DecodeParams& p,
                                                          const float (&acc)[Tr::kOutCols / 2],
                                                          const float (&inv_l)[2], const float (&lse)[2], int b,
                                                          int kvh, int row0, int split, int wg, int tid_wg) {
  static_assert(Tr::kConsumerWGs == 2, "two consumer warpgroups, each holding every row of its columns");
  using Sl = ClusterPairSlots<Tr>;
  const int w = tid_wg / 32, lane = tid_wg % 32, g = lane / 4, ql = lane % 4;
  const int slot = wg * 64 + (w % 2) * 32 + lane;
  const uint32_t base = ptx::smem_addr(ss.merge_base());
  ptx::cluster_sync();  // every ring of the pair idle
  if (w / 2 != split) {  // the partner merges these rows: push them
    const uint32_t partner = static_cast<uint32_t>(split ^ 1);
    const uint32_t dst = ptx::map_shared_rank(base, partner);
#pragma unroll
    for (int k = 0; k < Sl::kVec; ++k)
      ptx::st_shared_cluster_v4f32(dst + 16u * (k * Sl::kSlots + slot), partial4(acc, inv_l, k));
#pragma unroll
    for (int h = 0; h < 2; ++h) ptx::st_shared_cluster_f32(dst + Sl::kOBytes + 4u * (h * Sl::kSlots + slot), lse[h]);
  }
  ptx::cluster_sync();  // every push landed
  if (w / 2 != split) return;
  const float* recv = ss.merge_base();
  const float* recv_lse = recv + Sl::kOBytes / 4;
  float wt[2][2], inv_w[2];
  uint16_t* dst[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int row = row0 + 16 * w + g + 8 * h;
    const OutRow r(p, b, kvh, min(row, p.rows - 1));
    const float other = recv_lse[h * Sl::kSlots + slot];
    const float lse0 = split == 0 ? lse[h] : other, lse1 = split == 0 ? other : lse[h];
    const float sink = p.sinks != nullptr ? __ldg(p.sinks + r.hq) : -INFINITY;  // the sink: a partial of no output
    const float m = fmaxf(fmaxf(lse0, lse1), sink);
    wt[h][0] = lse0 == -INFINITY ? 0.f : exp2_approx((lse0 - m) * kLog2e);
    wt[h][1] = lse1 == -INFINITY ? 0.f : exp2_approx((lse1 - m) * kLog2e);
    const float wsum = wt[h][0] + wt[h][1] + (sink == -INFINITY ? 0.f : exp2_approx((sink - m) * kLog2e));
    inv_w[h] = wsum > 0.f ? 1.f / wsum : 0.f;
    dst[h] = row < p.rows ? r.out(p, b) + wg * Tr::kOutCols : nullptr;
    if (ql == 0 && wg == 0 && row < p.rows) p.lse[r.lse_idx] = wsum > 0.f ? m + logf(wsum) : -INFINITY;
  }
#pragma unroll
  for (int k = 0; k < Sl::kVec; ++k) {
    const float4 mine = partial4(acc, inv_l, k);
    const float4 other = *reinterpret_cast<const float4*>(recv + 4 * (k * Sl::kSlots + slot));
    store_pair_merged4<kBf16>(dst, k, ql, split, mine, other, wt, inv_w);
  }
}

// ----------------------------------------------------------------------------
// Split-KV merge inside a cluster (p.cluster_merge), after the pushes (see ClusterMerge)
// ----------------------------------------------------------------------------
// This rank's rows, from its own receive buffer, with combine_splits_kernel's merge step (SplitMerge,
// common/combine.cuh) over chunks of kMergeChunk splits (the combine kernel takes 4 or 16 at a time, so
// beyond 4 splits the two paths round differently), then the row's sink where the launch has sinks.
template <class Tr, bool kBf16, class Ss>
__device__ __forceinline__ void merge_cluster_splits(Ss& ss, const DecodeParams& p, int b, int kvh,
                                                     int row0, int ctid) {
  constexpr int kChunksPerRow = Tr::kHeadDimV / 4;
  constexpr int kMergeChunk = 4;
  const ClusterMerge<Tr> cm(ss, p, row0);
  const int rank = static_cast<int>(ptx::cluster_ctarank());
  const int first = rank * cm.rows_per_rank;  // local row index in the block
  const int n_rows = max(0, min(cm.rows_per_rank, min(Tr::kBlockM, p.rows - row0) - first));
  const float* buf = ss.merge_base();
  for (int c = ctid; c < n_rows * kChunksPerRow; c += Tr::kConsumerThreads) {
    const int lr = c / kChunksPerRow;
    const int col = (c % kChunksPerRow) * 4;
    const float* lse_s = buf + cm.ns * cm.rows_per_rank * merge_stride(Tr::kHeadDimV) + lr;
    SplitMerge merge;
    for (int s0 = 0; s0 < cm.ns; s0 += kMergeChunk) {
      float split_lse[kMergeChunk];
      float4 o[kMergeChunk];
#pragma unroll
      for (int j = 0; j < kMergeChunk; ++j) {
        const int s = s0 + j;
        split_lse[j] = s < cm.ns ? lse_s[s * cm.rows_per_rank] : -INFINITY;
        o[j] = s < cm.ns ? *reinterpret_cast<const float4*>(
                               buf + (s * cm.rows_per_rank + lr) * merge_stride(Tr::kHeadDimV) + col)
                         : make_float4(0.f, 0.f, 0.f, 0.f);
      }
      merge.add(split_lse, o);
    }
    const OutRow orow(p, b, kvh, row0 + first + lr);
    merge_sink(p, merge, orow.hq);  // as in the combine kernel
    *reinterpret_cast<uint2*>(orow.out(p, b) + col) = merge.packed_out<kBf16>();  // 8 B: out's strides are multiples of 16 B
    if (col == 0) p.lse[orow.lse_idx] = merge.lse();
  }
}

}  // namespace fmha
