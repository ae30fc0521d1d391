// fmha: the epilogue of the 64-row loops, arch-neutral: O / l and the LSE from accumulators in the
// m64nN fragment layout (softmax.cuh) to out, or the split partials to the workspace or a cluster merge.
#pragma once

#include <cstdint>

#include "merge.cuh"
#include "rows.cuh"
#include "softmax.cuh"

namespace fmha {

// Row 16 w + g + 8 h of this thread's fragment (h: which of its two rows) normalised into out, this warpgroup's
// columns, with the sink joined; warpgroup 0 writes the row's LSE.
template <class Tr, bool kBf16>
__device__ __forceinline__ void put_row_out(const DecodeParams& p, const float (&acc)[Tr::kOutCols / 2], int h,
                                            const OutRow& r, int b, float row_inv_l, float row_lse, int wg, int ql) {
  uint16_t* dst = r.out(p, b) + wg * Tr::kOutCols;
  if (p.sinks != nullptr) add_sink(__ldg(p.sinks + r.hq), row_inv_l, row_lse);
#pragma unroll
  for (int c = 0; c < Tr::kOutCols / 8; ++c) {
    const int i = 4 * c + 2 * h;
    *reinterpret_cast<uint32_t*>(dst + frag_col(i, ql)) = pack2<kBf16>(acc[i] * row_inv_l, acc[i + 1] * row_inv_l);
  }
  if (ql == 0 && wg == 0) p.lse[r.lse_idx] = row_lse;
}

// The same row as an fp32 partial, o / l, at dst (this warpgroup's first column); warpgroup 0 writes its LSE at
// lse_at() (a callable, so that other threads compute no address).
template <class Tr, class LseAt>
__device__ __forceinline__ void put_row_partial(float* dst, const float (&acc)[Tr::kOutCols / 2], int h, float inv_l,
                                                float lse, int wg, int ql, LseAt lse_at) {
#pragma unroll
  for (int c = 0; c < Tr::kOutCols / 8; ++c) {
    const int i = 4 * c + 2 * h;
    *reinterpret_cast<float2*>(dst + frag_col(i, ql)) = make_float2(acc[i] * inv_l, acc[i + 1] * inv_l);
  }
  if (ql == 0 && wg == 0) *lse_at() = lse;
}

// The same in fragment order (balanced_piece_elem): dst is the row's column 0 there (its 8-row group's first element
// plus 8 (row % 8)); a warp's 32 float2 of one 8-column block are 256 contiguous bytes.
template <class Tr, class LseAt>
__device__ __forceinline__ void put_row_partial_by_fragment(float* dst, const float (&acc)[Tr::kOutCols / 2], int h,
                                                            float inv_l, float lse, int wg, int ql, LseAt lse_at) {
  dst += 8 * wg * Tr::kOutCols + 2 * ql;  // (its first 8-column block: wg kOutCols / 8, 64 floats a block)
#pragma unroll
  for (int c = 0; c < Tr::kOutCols / 8; ++c) {
    const int i = 4 * c + 2 * h;
    *reinterpret_cast<float2*>(dst + 64 * c) = make_float2(acc[i] * inv_l, acc[i + 1] * inv_l);
  }
  if (ql == 0 && wg == 0) *lse_at() = lse;
}

// Row h of this thread's fragment as fp16 partials (DecodeParams::partials_f16): o / l times a power of two that puts
// the largest magnitude of this warpgroup's 256 columns of the row (amax, of acc, over the row's quad) in
// [2^14, 2^15), so that every value keeps fp16's 11 significant bits (3 more than the bf16 output's) whatever its
// range, and that scale's inverse at scales[2 ws_row + wg] (o = value x scale; the half-precision workspace layouts
// of common/params.h). ws_row: the row's index in the workspace's rows of 512 fp16 values; a thread's two 8-column
// blocks 2 j and 2 j + 1 of the row go out as one 8-byte store (half_partial_col's order).
template <class Tr>
__device__ __forceinline__ void put_row_f16(const DecodeParams& p, float* scales, int64_t ws_row,
                                            const float (&acc)[Tr::kOutCols / 2], int h, float amax, float inv_l,
                                            int wg, int ql) {
  // max |o| in [2^e, 2^(e + 1)); the shift is clamped so that both powers of two stay normal fp32 numbers (an
  // empty row, all 0, takes the largest; a NaN or infinite one the smallest, which keeps it NaN or infinite).
  const int e = static_cast<int>((__float_as_uint(amax * inv_l) >> 23) & 0xffu) - 127;
  const int shift = min(126, max(-114, 14 - e));
  const float f = inv_l * __uint_as_float(static_cast<uint32_t>(127 + shift) << 23);  // (exact: a power of 2)
  uint16_t* dst = reinterpret_cast<uint16_t*>(p.o_partial) + ws_row * Tr::kHeadDimV + wg * Tr::kOutCols + 4 * ql;
#pragma unroll
  for (int j = 0; j < Tr::kOutCols / 16; ++j) {
    const int i0 = 8 * j + 2 * h, i1 = i0 + 4;  // blocks 2 j and 2 j + 1 (acc[4 c + 2 h + e])
    uint2 v;
    v.x = pack2<false>(acc[i0] * f, acc[i0 + 1] * f);
    v.y = pack2<false>(acc[i1] * f, acc[i1 + 1] * f);
    *reinterpret_cast<uint2*>(dst + 16 * j) = v;
  }
  if (ql == 0) scales[2 * ws_row + wg] = __uint_as_float(static_cast<uint32_t>(127 - shift) << 23);
}

// max |acc| of row h of this thread's fragment over its quad's four lanes (every lane of the warp takes part).
template <class Tr>
__device__ __forceinline__ float row_abs_max(const float (&acc)[Tr::kOutCols / 2], int h) {
  float amax = 0.f;
#pragma unroll
  for (int c = 0; c < Tr::kOutCols / 8; ++c)
    amax = fmaxf(amax, fmaxf(fabsf(acc[4 * c + 2 * h]), fabsf(acc[4 * c + 2 * h + 1])));
  amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 1));
  return fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 2));
}

// Where store_rows_f16 puts a row: its index in the workspace's rows of 512 fp16 values, and its LSE.
struct HalfRowDst {
  int64_t ws_row;
  float* lse;
};

// This warpgroup's 256 columns of its fragment's rows row0 + ... as fp16 partials for a combine kernel
// (put_row_f16, scales as there); dst(row) says where each row below p.rows goes (split partials or balanced pieces).
template <class Tr, class Dst>
__device__ __forceinline__ void store_rows_f16(const DecodeParams& p, float* scales,
                                               const float (&acc)[Tr::kOutCols / 2], const float (&inv_l)[2],
                                               const float (&lse)[2], int row0, int wg, int tid_wg, Dst dst) {
  const int w = tid_wg / 32, g = (tid_wg % 32) / 4, ql = tid_wg % 4;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const float amax = row_abs_max<Tr>(acc, h);  // (padding rows too: their quads agree)
    const int row = row0 + 16 * w + g + 8 * h;
    if (row >= p.rows) continue;  // padding row
    const HalfRowDst d = dst(row);
    put_row_f16<Tr>(p, scales, d.ws_row, acc, h, amax, inv_l[h], wg, ql);
    if (ql == 0 && wg == 0) *d.lse = lse[h];
  }
}

// Write this warpgroup's output columns (or the split partials) and the LSE.
template <class Tr, bool kBf16, class Ss>
__device__ __forceinline__ void store_output(Ss& ss, const DecodeParams& p,
                                             const float (&acc)[Tr::kOutCols / 2], const float (&inv_l)[2],
                                             const float (&lse)[2], int b, int kvh, int row0, int split, int wg,
                                             int tid_wg) {
  if constexpr (Tr::kPairMerge) {
    if (uses_pair_merge<Tr>(p)) {
      store_output_pair<Tr, kBf16>(ss, p, acc, inv_l, lse, b, kvh, row0, split, tid_wg);
      return;
    }
  }
  if constexpr (kBf16 && Tr::kHalfPartials) {
    if (p.num_splits > 1 && p.partials_f16) {  // (the combine kernel merges: no cluster push)
      float* scales = p.o_partial + half_partial_scales_offset(static_cast<int64_t>(p.B) * p.T * p.Hq, p.num_splits);
      store_rows_f16<Tr>(p, scales, acc, inv_l, lse, row0, wg, tid_wg, [&](int row) {
        const OutRow r(p, b, kvh, row);
        return HalfRowDst{r.split_row(p, b, split), r.partial_lse(p, split)};
      });
      return;
    }
  }
  const int w = tid_wg / 32, lane = tid_wg % 32, g = lane / 4, ql = lane % 4;
  const int col0 = wg * Tr::kOutCols;
  const ClusterMerge<Tr> cm(ss, p, row0);
  const bool in_cluster = begin_cluster_push<Tr>(p);
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int row = row0 + 16 * w + g + 8 * h;
    if (row >= p.rows) continue;  // padding row
    const OutRow r(p, b, kvh, row);
    if (p.num_splits == 1) {
      put_row_out<Tr, kBf16>(p, acc, h, r, b, inv_l[h], lse[h], wg, ql);
    } else if constexpr (!Tr::kClusterMerge) {  // the workspace only (the combine kernel merges)
      put_row_partial<Tr>(r.partial(p, b, split, Tr::kHeadDimV) + col0, acc, h, inv_l[h], lse[h], wg, ql,
                          [&] { return r.partial_lse(p, split); });
    } else {
      const PartialRow<Tr> dst(p, r, b, split, row - row0, cm, in_cluster);
#pragma unroll
      for (int c = 0; c < Tr::kOutCols / 8; ++c) {
        const int i = 4 * c + 2 * h;
        dst.put2(col0 + frag_col(i, ql), acc[i] * inv_l[h], acc[i + 1] * inv_l[h]);
      }
      if (ql == 0 && wg == 0) dst.put_lse(lse[h]);
    }
  }
}

// The end of a 64-row loop: the rows' 1 / l_i and LSE from the final state, then store_output for the row block
// and split the epilogue serves (epilogue_row0, epilogue_split).
template <class Tr, bool kBf16, class Ss>
__device__ __forceinline__ void finish_output(Ss& ss, const DecodeParams& p, const float (&acc)[Tr::kOutCols / 2],
                                              RowState& st, int b, int kvh, int row0, int split, int wg,
                                              int tid_wg) {
  float inv_l[2], lse[2];
  finalize_rows(st, inv_l, lse);
  store_output<Tr, kBf16>(ss, p, acc, inv_l, lse, b, kvh, epilogue_row0<Tr>(p, row0), epilogue_split<Tr>(p, split),
                          wg, tid_wg);
}

}  // namespace fmha
