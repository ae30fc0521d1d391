// fmha: which KV tiles a CTA reads and which keys each packed query row sees (TileRange), and where
// a packed row's output, split partial and LSE live (OutRow). Arch-neutral: used by every kernel.
//
// Packed query row r of KV head kvh is query token t = r / G of query head hq = kvh * G + r % G.
#pragma once

#include <cstdint>

#include "params.h"

namespace fmha {


// The KV tiles one CTA processes, and its rows' key limits.
struct TileRange {
  int L;      // clamped sequence length
  int begin;  // first tile index (tile = kBlockN tokens)
  int end;    // one past the last
};

template <class Tr>
__device__ __forceinline__ TileRange tile_range(const DecodeParams& p, int b, int row_block, int split) {
  int L = p.seqlens != nullptr ? p.seqlens[b] : p.S;
  L = min(max(L, 0), p.S);
  // Keys any row of this block can see: causal rows stop at L - T + t + 1 (<= L).
  int n_keys = L;
  if (p.causal) {
    const int t_last = min(p.T - 1, (row_block * Tr::kBlockM + Tr::kBlockM - 1) / p.G);
    n_keys = max(0, L - p.T + t_last + 1);
  }
  const int n_tiles = (n_keys + Tr::kBlockN - 1) / Tr::kBlockN;
  const int per_split = (n_tiles + p.num_splits - 1) / p.num_splits;
  TileRange r;
  r.L = L;
  r.begin = min(n_tiles, split * per_split);
  r.end = min(n_tiles, r.begin + per_split);
  return r;
}

// Where packed query row `row` of KV head kvh lives: token t, query head hq, and its output row,
// split partial row and LSE slot (the LSE is [B, Hq, T]; partials are [split][B][T][Hq][D]).
struct OutRow {
  int t, hq;
  int64_t lse_idx;
  __device__ __forceinline__ OutRow(const DecodeParams& p, int b, int kvh, int row)
      : t(row / p.G), hq(kvh * p.G + row % p.G), lse_idx((static_cast<int64_t>(b) * p.Hq + hq) * p.T + t) {}
  __device__ __forceinline__ uint16_t* out(const DecodeParams& p, int b) const {
    return static_cast<uint16_t*>(p.out) + b * p.o_b + t * p.o_t + hq * p.o_h;
  }
  __device__ __forceinline__ float* partial(const DecodeParams& p, int b, int split, int head_dim) const {
    return p.o_partial + (((static_cast<int64_t>(split) * p.B + b) * p.T + t) * p.Hq + hq) * head_dim;
  }
  // The row's index in the workspace's [split][B][T][Hq] rows.
  __device__ __forceinline__ int64_t split_row(const DecodeParams& p, int b, int split) const {
    return ((static_cast<int64_t>(split) * p.B + b) * p.T + t) * p.Hq + hq;
  }
  __device__ __forceinline__ float* partial_lse(const DecodeParams& p, int split) const {
    return p.lse_partial + static_cast<int64_t>(split) * p.B * p.Hq * p.T + lse_idx;
  }
};

// The split and first packed row an epilogue writes: with two consumer warpgroups (D = 512) recomputed
// from blockIdx (the grid of sm90/kernel.cuh) rather than kept in a register across the loop, where they
// spilled; the values the loop was given otherwise.
template <class Tr>
__device__ __forceinline__ int epilogue_split(const DecodeParams& p, int split) {
  if constexpr (Tr::kConsumerWGs == 2) return static_cast<int>(blockIdx.x) % p.num_splits;
  return split;
}
template <class Tr>
__device__ __forceinline__ int epilogue_row0(const DecodeParams& p, int row0) {
  if constexpr (Tr::kConsumerWGs == 2) return static_cast<int>(blockIdx.x) / p.num_splits * Tr::kBlockM;
  return row0;
}

// Visible-key limit (absolute token index, exclusive) of packed row `row`: causal rows stop at
// L - T + t + 1; padding rows (row >= p.rows) borrow the last token's limit.
__device__ __forceinline__ int row_key_limit(const DecodeParams& p, const TileRange& tr, int row) {
  const int t = min(row / p.G, p.T - 1);
  return p.causal ? min(tr.L, tr.L - p.T + t + 1) : tr.L;
}

// Keys below this are visible to every row of the block (causal rows start at L - T + 1).
__device__ __forceinline__ int unmasked_until(const DecodeParams& p, const TileRange& tr) {
  return p.causal ? tr.L - p.T + 1 : tr.L;
}

// Per-row visible-key limit (absolute token index, exclusive) of the two rows a thread owns.
template <class Tr>
__device__ __forceinline__ void row_key_limits(const DecodeParams& p, const TileRange& tr, int row0, int w, int g,
                                               int (&limit_abs)[2]) {
#pragma unroll
  for (int h = 0; h < 2; ++h) limit_abs[h] = row_key_limit(p, tr, row0 + 16 * w + g + 8 * h);
}

}  // namespace fmha
