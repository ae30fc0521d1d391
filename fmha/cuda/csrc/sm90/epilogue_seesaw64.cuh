// fmha sm_90a: the 64-key seesaw's epilogues (consumer_loop_seesaw64): the unsplit tile staged in the ring, a
// balanced visit's rows or pieces, and whether two splits merge from registers.
#pragma once

#include <cstdint>

#include "../common/epilogue.cuh"
#include "../common/merge.cuh"
#include "mma.cuh"
#include "traits.h"

namespace fmha {
namespace sm90 {

// Two splits of this loop merge from registers (store_output_cluster_pair, common/merge.cuh); the kernel
// body then skips its own second cluster barrier and merge_cluster_splits.
template <class Tr>
__device__ __forceinline__ bool merges_pair_in_registers(const DecodeParams& p) {
  if constexpr (!Tr::kSeesaw64) {
    return false;
  } else {
    return uses_cluster_merge<Tr>(p) && p.num_splits == 2;
  }
}

// Where store_output_staged stages row r of this warpgroup's output box j: row r of the warpgroup's box j of ring
// stage 0, or where a ring box has fewer rows than the block (48-key tiles), the rows past it in the same box of
// stage 1 (the warpgroup's half of every stage is free by then).
template <class Tr>
__device__ __forceinline__ int staged_row_offset(int j, int r) {
  static_assert(Tr::kBlockN == Tr::kBlockM || (Tr::kStages >= 2 && 2 * Tr::kBlockN >= Tr::kBlockM),
                "the block's kBlockM output rows in one or two ring boxes");
  constexpr int kStageBytes = Tr::kStageBoxes * Tr::kKvBoxBytes;
  return j * Tr::kKvBoxBytes + (r < Tr::kBlockN ? r * Tr::kRowBytes : kStageBytes + (r - Tr::kBlockN) * Tr::kRowBytes);
}

// The unsplit epilogue: this warpgroup's 64 x 256 output tile, normalised (and the sink joined), into its half of
// ring stage 0 (and of stage 1 on 48-key tiles: staged_row_offset) as four 128B-swizzled boxes, then copied out a row
// at a time by 16-byte loads and stores (a warp writes 512 contiguous bytes, where the fragments' own stores write 16
// bytes in each of 8 rows). The half is free: the warpgroup's last P V has completed, and before it every Q K^T (the
// last one precedes the last publish); no load is in flight past the range's last tile. The LSE as store_output.
template <class Tr, bool kBf16>
__device__ __forceinline__ void store_output_staged(SharedStorage<Tr>& ss, const DecodeParams& p,
                                                    const float (&acc)[Tr::kOutCols / 2], RowState& st, int b,
                                                    int kvh, int row0, int wg, int tid_wg) {
  constexpr int kBoxesOut = Tr::kOutCols / Tr::kBoxCols;
  const int w = tid_wg / 32, lane = tid_wg % 32, g = lane / 4, ql = lane % 4;
  float inv_l[2], lse[2];
  finalize_rows(st, inv_l, lse);
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int row = row0 + 16 * w + g + 8 * h;
    if (row >= p.rows) continue;  // padding row
    const OutRow r(p, b, kvh, row);
    if (p.sinks != nullptr) add_sink(__ldg(p.sinks + r.hq), inv_l[h], lse[h]);
    if (ql == 0 && wg == 0) p.lse[r.lse_idx] = lse[h];
  }
  uint8_t* staged = reinterpret_cast<uint8_t*>(&ss.k[0][wg * kBoxesOut][0]);
#pragma unroll
  for (int c = 0; c < Tr::kOutCols / 8; ++c)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      if constexpr (Tr::kBlockN == Tr::kBlockM)
        *reinterpret_cast<uint32_t*>(staged + (c / 8) * Tr::kKvBoxBytes + (16 * w + g + 8 * h) * Tr::kRowBytes +
                                     ((c % 8) ^ g) * 16 + 4 * ql) =
            pack2<kBf16>(acc[4 * c + 2 * h] * inv_l[h], acc[4 * c + 2 * h + 1] * inv_l[h]);
      else
        *reinterpret_cast<uint32_t*>(staged + staged_row_offset<Tr>(c / 8, 16 * w + g + 8 * h) + ((c % 8) ^ g) * 16 +
                                     4 * ql) =
            pack2<kBf16>(acc[4 * c + 2 * h] * inv_l[h], acc[4 * c + 2 * h + 1] * inv_l[h]);
    }
  if (wg == 0)  // (constant ids: a computed one makes ptxas reserve all 16 barriers)
    ptx::named_barrier_sync(kBarOutStaged, 128);
  else
    ptx::named_barrier_sync(kBarOutStaged + 1, 128);
  static_assert(kBoxesOut * 8 == 32, "a warp copies one row's kOutCols columns, 16 bytes a lane");
  const int box = lane / 8, chunk = lane % 8;
#pragma unroll 4
  for (int r = w; r < Tr::kBlockM; r += 4) {
    if (row0 + r >= p.rows) break;  // padding rows (the last rows of the block)
    const uint4 v = Tr::kBlockN == Tr::kBlockM
                        ? *reinterpret_cast<const uint4*>(staged + box * Tr::kKvBoxBytes + r * Tr::kRowBytes +
                                                          (chunk ^ (r % 8)) * 16)
                        : *reinterpret_cast<const uint4*>(staged + staged_row_offset<Tr>(box, r) +
                                                          (chunk ^ (r % 8)) * 16);
    *reinterpret_cast<uint4*>(OutRow(p, b, kvh, row0 + r).out(p, b) + wg * Tr::kOutCols + 8 * lane) = v;
  }
}

// One visit's epilogue (the balanced schedule): this warpgroup's 256 columns of the row block's rows, whole (out,
// with the sink) where the unit is one piece, else as O / l and the LSE in the piece's workspace slot (common/params.h
// balanced_slot: fp32, in fragment order where pieces_by_fragment, or fp16 with a scale a row where partials_f16),
// which combine_balanced_kernel (combine_balanced_half_kernel) merges.
// From the fragments: pieces staged and written by bulk copies measured no faster (docs/deepseek.md).
template <class Tr, bool kBf16>
__device__ __forceinline__ void store_output_visit(const DecodeParams& p, const float (&acc)[Tr::kOutCols / 2],
                                                   RowState& st, const BalancedVisit& vis, int row0, int wg,
                                                   int tid_wg) {
  const int w = tid_wg / 32, g = (tid_wg % 32) / 4, ql = tid_wg % 4;
  float inv_l[2], lse[2];
  finalize_rows(st, inv_l, lse);
  const int64_t slot = balanced_slot(vis.first_cta, vis.first_mid, vis.piece);
  if constexpr (kBf16 && Tr::kHalfPartials) {
    if (vis.pieces > 1 && p.partials_f16) {  // fp16 pieces (put_row_f16; common/params.h half_pieces_scales_offset)
      float* scales = p.o_partial + half_pieces_scales_offset(static_cast<int64_t>(p.B) * p.T * p.Hq, p.num_splits);
      store_rows_f16<Tr>(p, scales, acc, inv_l, lse, row0, wg, tid_wg, [&](int row) {
        const int64_t slot_row = slot * p.rows + row;
        return HalfRowDst{slot_row, p.lse_partial + slot_row};
      });
      return;
    }
  }
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int row = row0 + 16 * w + g + 8 * h;
    if (row >= p.rows) continue;  // padding row
    if (vis.pieces > 1) {
      const int64_t slot_row = slot * p.rows + row;
      if (p.pieces_by_fragment) {  // (a warp's store: 256 contiguous bytes)
        float* row_col0 = p.o_partial + balanced_piece_elem(true, slot * p.rows, row, 0, Tr::kHeadDimV);
        put_row_partial_by_fragment<Tr>(row_col0, acc, h, inv_l[h], lse[h], wg, ql,
                                        [&] { return p.lse_partial + slot_row; });
      } else {
        put_row_partial<Tr>(p.o_partial + slot_row * Tr::kHeadDimV + wg * Tr::kOutCols, acc, h, inv_l[h], lse[h], wg,
                            ql, [&] { return p.lse_partial + slot_row; });
      }
    } else {
      put_row_out<Tr, kBf16>(p, acc, h, OutRow(p, vis.b, vis.kvh, row), vis.b, inv_l[h], lse[h], wg, ql);
    }
  }
}

}  // namespace sm90
}  // namespace fmha
