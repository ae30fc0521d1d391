// fmha: merge of split-KV partial results (arch-neutral, plain CUDA).
//
// Grid: one 128-thread CTA per kCombineThreads / kLanes output rows, a row being one (b, t, hq); row
// index = (b * T + t) * Hq + hq. kLanes threads share a row, each owning D / (4 kLanes) groups of 4
// consecutive head-dim columns, group c at column 4 (lane + kLanes c) (one load instruction reads a
// contiguous stretch of the row).
//   M   = max_s lse_s                     (-inf when every split was empty)
//   w_s = exp(lse_s - M)                  (0 for an empty split)
//   out = sum_s w_s o_s / sum_s w_s,  lse = M + log(sum_s w_s)
// A row with no visible key in any split gets out = 0, lse = -inf. A sink (p.sinks) joins as one more
// split of LSE sinks[hq] and output 0.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "params.h"
#include "ptx.cuh"
#include "softmax.cuh"

namespace fmha {

constexpr int kCombineThreads = 128;

// Threads per row of combine_splits_kernel: a row's D / 4 column groups, one a thread, except at D = 512 with at
// most 4 splits (DeepSeek's split launches, 2048 rows and more), where 32 threads take four groups each: a quarter
// of the CTAs, each thread's 16 loads in flight together.
template <int D, int kChunk>
constexpr int combine_lanes() {
  return D == 512 && kChunk <= 4 ? 32 : D / 4;
}

// The merge of one row's split partials, 4 head-dim columns of it (a thread's share), fed in
// chunks of splits whose values were loaded together; a chunk whose max exceeds the running one
// rescales what was summed so far. Used by combine_splits_kernel (from the workspace) and by the
// in-cluster merge of common/merge.cuh (from shared memory).
struct SplitMerge {
  float m = -INFINITY;  // running max of the LSEs
  float wsum = 0.f;     // sum of w_s = exp(lse_s - m)
  float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);  // sum of w_s o_s

  // split_lse[j] = -inf marks an empty (or absent) split: it contributes nothing, whatever o[j] holds.
  template <int kN>
  __device__ __forceinline__ void add(const float (&split_lse)[kN], const float4 (&o)[kN]) {
    float m_new = m;
#pragma unroll
    for (int j = 0; j < kN; ++j) m_new = fmaxf(m_new, split_lse[j]);
    if (m_new == -INFINITY) return;  // no visible key so far
    const float scale = exp2_approx((m - m_new) * kLog2e);  // m = -inf -> 0
    acc.x *= scale;
    acc.y *= scale;
    acc.z *= scale;
    acc.w *= scale;
    wsum *= scale;
#pragma unroll
    for (int j = 0; j < kN; ++j) {
      const float w = exp2_approx((split_lse[j] - m_new) * kLog2e);  // -inf -> 0
      acc.x += w > 0.f ? w * o[j].x : 0.f;
      acc.y += w > 0.f ? w * o[j].y : 0.f;
      acc.z += w > 0.f ? w * o[j].z : 0.f;
      acc.w += w > 0.f ? w * o[j].w : 0.f;
      wsum += w;
    }
    m = m_new;
  }

  // out = acc / wsum as 4 packed 16-bit values; a row with no visible key in any split gets 0.
  template <bool kBf16>
  __device__ __forceinline__ uint2 packed_out() const {
    const float inv = wsum > 0.f ? 1.f / wsum : 0.f;
    uint2 packed;
    packed.x = pack2<kBf16>(acc.x * inv, acc.y * inv);
    packed.y = pack2<kBf16>(acc.z * inv, acc.w * inv);
    return packed;
  }
  // lse = m + ln(wsum), -inf for a row with no visible key.
  __device__ __forceinline__ float lse() const { return wsum > 0.f ? m + logf(wsum) : -INFINITY; }
};

// Output row `row` of the split merges, (b, t, hq) with row = (b T + t) Hq + hq, and its LSE index ([B][Hq][T]).
struct CombineRow {
  int hq, t, b;
  int64_t lse_row;
  __device__ __forceinline__ CombineRow(const DecodeParams& p, int64_t row)
      : hq(static_cast<int>(row % p.Hq)),
        t(static_cast<int>((row / p.Hq) % p.T)),
        b(static_cast<int>(row / (static_cast<int64_t>(p.Hq) * p.T))),
        lse_row((static_cast<int64_t>(b) * p.Hq + hq) * p.T + t) {}
};

// A balanced combine kernel's unit (blockIdx.x), its descriptor (pieces first) and the packed row n (a thread's
// kLanes-lane group of blockIdx.y's rows) it merges, once the decode grid it depends on has written its pieces.
struct BalancedUnitRow {
  int unit;
  int4 desc;
  int n;
};
template <int kLanes>
__device__ __forceinline__ BalancedUnitRow balanced_combine_start(const DecodeParams& p) {
  ptx::griddep_wait();  // (launched as a programmatic dependent of the decode grid: its pieces)
  ptx::griddep_launch_dependents();
  const int unit = static_cast<int>(blockIdx.x);
  return {unit, __ldg(reinterpret_cast<const int4*>(p.balanced_desc) + unit),
          static_cast<int>(blockIdx.y) * (kCombineThreads / kLanes) + static_cast<int>(threadIdx.x) / kLanes};
}

// Packed row n (= t G + hq % G) of unit `unit` (= b Hkv + kvh) of the balanced schedule, for its combine kernels.
struct BalancedCombineRow {
  int b, kvh, t, hq;
  __device__ __forceinline__ BalancedCombineRow(const DecodeParams& p, int unit, int n)
      : b(unit / p.Hkv), kvh(unit % p.Hkv), t(n / p.G), hq(kvh * p.G + n % p.G) {}
  __device__ __forceinline__ int64_t lse_row(const DecodeParams& p) const {
    return (static_cast<int64_t>(b) * p.Hq + hq) * p.T + t;
  }
};

// A row's sink, where there are sinks: one more partial of LSE sinks[hq] and no output.
__device__ __forceinline__ void merge_sink(const DecodeParams& p, SplitMerge& merge, int hq) {
  if (p.sinks != nullptr) {
    const float split_lse[1] = {__ldg(p.sinks + hq)};
    const float4 o[1] = {make_float4(0.f, 0.f, 0.f, 0.f)};
    merge.add(split_lse, o);
  }
}

// kChunk: splits whose loads are issued together (see below). 16 for many splits; 4 where there are
// at most 4, so that a grid of many rows keeps its occupancy (16 splits' float4 in flight per thread cost
// ~90 registers and measured slower on many rows; combine_lanes trades threads for columns instead).
template <int D, bool kBf16, int kChunk, int kLanes = combine_lanes<D, kChunk>()>
__global__ void __launch_bounds__(kCombineThreads) combine_splits_kernel(const DecodeParams p) {
  constexpr int kCols = D / (4 * kLanes), kRows = kCombineThreads / kLanes;
  static_assert(kCols * 4 * kLanes == D && kRows * kLanes == kCombineThreads, "combine: lanes and rows");
  // Launched as a programmatic dependent of the attention grid: wait for its partials.
  // (A no-op when launched without that dependency.)
  ptx::griddep_wait();
  ptx::griddep_launch_dependents();  // the next call's decode grid may be scheduled (it waits too)
  const int64_t total_rows = static_cast<int64_t>(p.B) * p.T * p.Hq;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kRows + threadIdx.x / kLanes;
  if (row >= total_rows) return;
  const int col = (threadIdx.x % kLanes) * 4;  // the thread's first group; group c at col + 4 kLanes c
  const CombineRow cr(p, row);
  const int hq = cr.hq, t = cr.t, b = cr.b;
  const int64_t lse_row = cr.lse_row;
  const int64_t lse_split_stride = static_cast<int64_t>(p.B) * p.Hq * p.T;
  const int64_t o_split_stride = total_rows * D;

  // Splits in chunks of kChunk, each chunk's LSEs and o loads issued together (one L2 round trip
  // per chunk, not one per split).
  SplitMerge merge[kCols];
  for (int s0 = 0; s0 < p.num_splits; s0 += kChunk) {
    float split_lse[kChunk];
    float4 o[kCols][kChunk];
#pragma unroll
    for (int j = 0; j < kChunk; ++j) {
      const int s = s0 + j;
      split_lse[j] = s < p.num_splits ? p.lse_partial[s * lse_split_stride + lse_row] : -INFINITY;
#pragma unroll
      for (int c = 0; c < kCols; ++c)
        o[c][j] = s < p.num_splits ? *reinterpret_cast<const float4*>(p.o_partial + s * o_split_stride + row * D +
                                                                      col + 4 * kLanes * c)
                                   : make_float4(0.f, 0.f, 0.f, 0.f);
    }
#pragma unroll
    for (int c = 0; c < kCols; ++c) merge[c].add(split_lse, o[c]);
  }
#pragma unroll
  for (int c = 0; c < kCols; ++c) merge_sink(p, merge[c], hq);
  uint16_t* out = static_cast<uint16_t*>(p.out) + b * p.o_b + t * p.o_t + hq * p.o_h + col;
  // 8 B a group: out's strides are multiples of 16 B, a group of 4 elements
#pragma unroll
  for (int c = 0; c < kCols; ++c, out += 4 * kLanes) *reinterpret_cast<uint2*>(out) = merge[c].template packed_out<kBf16>();
  if (col == 0) p.lse[lse_row] = merge[0].lse();
}

// Four fp16 partial values at positions pos .. pos + 3 of a row (columns half_partial_col(pos) + 0, 1, 8, 9) times
// the scale of the warpgroup half that wrote them.
__device__ __forceinline__ float4 half4_scaled(uint2 raw, float scale) {
  const float2 lo = __half22float2(*reinterpret_cast<const __half2*>(&raw.x));
  const float2 hi = __half22float2(*reinterpret_cast<const __half2*>(&raw.y));
  return make_float4(lo.x * scale, lo.y * scale, hi.x * scale, hi.y * scale);
}

// The merged values of positions pos .. pos + 3 of a row to their columns of out (half_partial_col's order).
__device__ __forceinline__ void store_half_order(uint16_t* out, int pos, uint2 packed) {
  const int col = half_partial_col(pos);
  *reinterpret_cast<uint32_t*>(out + col) = packed.x;      // columns col, col + 1
  *reinterpret_cast<uint32_t*>(out + col + 8) = packed.y;  // col + 8, col + 9
}

// combine_splits_kernel for fp16 partials (DecodeParams::partials_f16; D = 512, the half-precision workspace layout
// of common/params.h): half the bytes of fp32 partials to read. 32 threads a row, four rows a CTA; position group c of
// a thread, 4 (lane + 32 c), holds columns half_partial_col(pos) + 0, 1, 8, 9, scaled by the split's scale of the
// warpgroup half (c / 2) that wrote them.
template <bool kBf16>
__global__ void __launch_bounds__(kCombineThreads) combine_half_splits_kernel(const DecodeParams p) {
  constexpr int D = 512, kLanes = 32, kChunk = 4, kCols = D / (4 * kLanes), kRows = kCombineThreads / kLanes;
  ptx::griddep_wait();  // (launched as a programmatic dependent of the decode grid: its partials)
  ptx::griddep_launch_dependents();
  const int64_t total_rows = static_cast<int64_t>(p.B) * p.T * p.Hq;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kRows + threadIdx.x / kLanes;
  if (row >= total_rows) return;
  const int lane = static_cast<int>(threadIdx.x % kLanes);
  const CombineRow cr(p, row);
  const int hq = cr.hq, t = cr.t, b = cr.b;
  const int64_t lse_row = cr.lse_row;
  const int64_t lse_split_stride = static_cast<int64_t>(p.B) * p.Hq * p.T;
  const uint16_t* o_half = reinterpret_cast<const uint16_t*>(p.o_partial);
  const float* scales = p.o_partial + half_partial_scales_offset(total_rows, p.num_splits);

  SplitMerge merge[kCols];
  for (int s0 = 0; s0 < p.num_splits; s0 += kChunk) {
    float split_lse[kChunk];
    float2 scale[kChunk];
    uint2 raw[kCols][kChunk];
#pragma unroll
    for (int j = 0; j < kChunk; ++j) {
      const int s = s0 + j;
      const int64_t split_row = s * total_rows + row;
      split_lse[j] = s < p.num_splits ? p.lse_partial[s * lse_split_stride + lse_row] : -INFINITY;
      scale[j] = s < p.num_splits ? *reinterpret_cast<const float2*>(scales + 2 * split_row) : make_float2(0.f, 0.f);
#pragma unroll
      for (int c = 0; c < kCols; ++c)
        raw[c][j] = s < p.num_splits ? *reinterpret_cast<const uint2*>(o_half + split_row * D + 4 * (lane + kLanes * c))
                                     : make_uint2(0u, 0u);
    }
#pragma unroll
    for (int c = 0; c < kCols; ++c) {
      float4 o[kChunk];
#pragma unroll
      for (int j = 0; j < kChunk; ++j) o[j] = half4_scaled(raw[c][j], c < kCols / 2 ? scale[j].x : scale[j].y);
      merge[c].add(split_lse, o);
    }
  }
  uint16_t* out = static_cast<uint16_t*>(p.out) + b * p.o_b + t * p.o_t + hq * p.o_h;
#pragma unroll
  for (int c = 0; c < kCols; ++c) {
    merge_sink(p, merge[c], hq);
    store_half_order(out, 4 * (lane + kLanes * c), merge[c].template packed_out<kBf16>());
  }
  if (lane == 0) p.lse[lse_row] = merge[0].lse();
}

// The balanced schedule's merge (DecodeParams::balanced, sm90/schedule_balanced.cuh). Grid (units, blocks of
// kCombineThreads / kLanes packed rows of a unit): a CTA reads its unit's descriptor and leaves where the unit is one
// piece, written out by the decode kernel; else kLanes threads merge each of its rows from the pieces in piece order
// (balanced_slot), a thread holding D / (4 kLanes) float4 column groups (lane + kLanes c: coalesced row-major, or
// in fragment order 32-byte sectors, 16 lines a warp; balanced_piece_elem).
// kLanes = 64 (two rows a CTA, four pieces a load) where the plan has a unit a CTA: a launch of equal lengths whose
// plan fits the SMs merges nothing and is then half the CTAs. kLanes = D / 4 (a row a CTA) where the plan splits
// units, whose pieces are many and want more CTAs.
template <int D, bool kBf16, int kLanes>
__global__ void __launch_bounds__(kCombineThreads) combine_balanced_kernel(const DecodeParams p) {
  constexpr int kCols = D / (4 * kLanes), kRows = kCombineThreads / kLanes;
  constexpr int kChunk = kCols > 2 ? 2 : 4;  // (4 x 4 float4 in flight held 122 registers)
  static_assert(kCols * 4 * kLanes == D && kRows * kLanes == kCombineThreads, "combine_balanced: lanes and rows");
  const BalancedUnitRow u = balanced_combine_start<kLanes>(p);
  const int4 desc = u.desc;
  const int pieces = desc.x, n = u.n;
  if (pieces <= 1 || n >= p.rows) return;  // (one piece: the decode kernel wrote the unit out)
  const int lane = static_cast<int>(threadIdx.x) % kLanes;
  const BalancedCombineRow r(p, u.unit, n);
  SplitMerge merge[kCols];
  for (int k0 = 0; k0 < pieces; k0 += kChunk) {
    float split_lse[kChunk];
    float4 o[kCols][kChunk];
#pragma unroll
    for (int j = 0; j < kChunk; ++j) {
      const int slot = balanced_slot(desc.y, desc.z, min(k0 + j, pieces - 1));
      const int64_t slot_row = static_cast<int64_t>(slot) * p.rows + n;
      split_lse[j] = k0 + j < pieces ? p.lse_partial[slot_row] : -INFINITY;
#pragma unroll
      for (int c = 0; c < kCols; ++c)
        o[c][j] = *reinterpret_cast<const float4*>(
            p.o_partial + balanced_piece_elem(p.pieces_by_fragment, slot_row - n, n, 4 * (lane + kLanes * c), D));
    }
#pragma unroll
    for (int c = 0; c < kCols; ++c) merge[c].add(split_lse, o[c]);
  }
  uint16_t* out = static_cast<uint16_t*>(p.out) + r.b * p.o_b + r.t * p.o_t + r.hq * p.o_h;
#pragma unroll
  for (int c = 0; c < kCols; ++c) {
    merge_sink(p, merge[c], r.hq);
    *reinterpret_cast<uint2*>(out + 4 * (lane + kLanes * c)) = merge[c].template packed_out<kBf16>();
  }
  if (lane == 0) p.lse[r.lse_row(p)] = merge[0].lse();
}

// combine_balanced_kernel for fp16 pieces (DecodeParams::partials_f16 with balanced; D = 512, the half-precision
// layouts of common/params.h): position group c of a thread, 4 (lane + kLanes c), holds columns half_partial_col(pos)
// + 0, 1, 8, 9 of the row, scaled by its piece's scale for the warpgroup half (pos / 256) that wrote them.
template <bool kBf16, int kLanes>
__global__ void __launch_bounds__(kCombineThreads) combine_balanced_half_kernel(const DecodeParams p) {
  constexpr int D = 512, kCols = D / (4 * kLanes), kRows = kCombineThreads / kLanes, kChunk = 4;
  static_assert(kCols * 4 * kLanes == D && kRows * kLanes == kCombineThreads, "combine_balanced_half: lanes and rows");
  const BalancedUnitRow u = balanced_combine_start<kLanes>(p);
  const int4 desc = u.desc;
  const int pieces = desc.x, n = u.n;
  if (pieces <= 1 || n >= p.rows) return;  // (one piece: the decode kernel wrote the unit out)
  const int lane = static_cast<int>(threadIdx.x) % kLanes;
  const BalancedCombineRow r(p, u.unit, n);
  const uint16_t* o_half = reinterpret_cast<const uint16_t*>(p.o_partial);
  const float* scales = p.o_partial + half_pieces_scales_offset(static_cast<int64_t>(p.B) * p.T * p.Hq, p.num_splits);
  SplitMerge merge[kCols];
  for (int k0 = 0; k0 < pieces; k0 += kChunk) {
    float split_lse[kChunk];
    float sc[kCols][kChunk];
    uint2 raw[kCols][kChunk];
#pragma unroll
    for (int j = 0; j < kChunk; ++j) {
      const int slot = balanced_slot(desc.y, desc.z, min(k0 + j, pieces - 1));
      const int64_t slot_row = static_cast<int64_t>(slot) * p.rows + n;
      split_lse[j] = k0 + j < pieces ? p.lse_partial[slot_row] : -INFINITY;
#pragma unroll
      for (int c = 0; c < kCols; ++c) {
        const int pos = 4 * (lane + kLanes * c);
        sc[c][j] = scales[2 * slot_row + pos / 256];
        raw[c][j] = *reinterpret_cast<const uint2*>(o_half + slot_row * D + pos);
      }
    }
#pragma unroll
    for (int c = 0; c < kCols; ++c) {
      float4 o[kChunk];
#pragma unroll
      for (int j = 0; j < kChunk; ++j) o[j] = half4_scaled(raw[c][j], sc[c][j]);
      merge[c].add(split_lse, o);
    }
  }
  uint16_t* out = static_cast<uint16_t*>(p.out) + r.b * p.o_b + r.t * p.o_t + r.hq * p.o_h;
#pragma unroll
  for (int c = 0; c < kCols; ++c) {
    merge_sink(p, merge[c], r.hq);
    store_half_order(out, 4 * (lane + kLanes * c), merge[c].template packed_out<kBf16>());
  }
  if (lane == 0) p.lse[r.lse_row(p)] = merge[0].lse();
}

}  // namespace fmha
