// fmha: Q into shared memory, arch-neutral: the packed query rows of a row block gathered into the
// 128B-swizzled K-major boxes the MMA reads (Ss::q[box][row * 64 + col]), and the rows of KV-head pairs.
#pragma once

#include <cuda.h>  // CUtensorMap (types only)

#include <cstdint>

#include "params.h"
#include "ptx.cuh"

namespace fmha {

// Gather the 64 (kRows) packed Q rows of this block into the swizzled K-major tile (the boxes kept in shared
// memory). All consumer threads take part; pad rows are zero-filled.
template <class Tr, int kRows = Tr::kBlockM, class Ss>
__device__ __forceinline__ void load_q_tile_rows(Ss& ss, const DecodeParams& p, int b, int kvh,
                                                 int row0, int ctid) {
  constexpr int kChunksPerRow = Tr::kQSmemBoxes * 8;  // 16 B chunks kept in shared memory
  constexpr int kTotal = kRows * kChunksPerRow;
  static_assert(kTotal % Tr::kConsumerThreads == 0, "Q load split");
  constexpr int kPerThread = kTotal / Tr::kConsumerThreads;
  // A thread loads one chunk column c of the rows r_first + i kRowStep: (t, query head) of its first
  // row takes one division by G, the others follow by carries (a division per chunk costs dozens of SASS
  // instructions ahead of the last load).
  static_assert(Tr::kConsumerThreads % kChunksPerRow == 0, "Q load: whole rows per pass");
  constexpr int kRowStep = Tr::kConsumerThreads / kChunksPerRow;
  const int c = ctid % kChunksPerRow;  // shared-memory chunk: box c / 8, chunk c % 8 of it
  const int r_first = ctid / kChunksPerRow;
  const int col = Tr::kQRegCols == 0 ? c * 8 : Tr::q_global_box(c / 8) * Tr::kBoxCols + (c % 8) * 8;
  const uint16_t* q = static_cast<const uint16_t*>(p.q) + b * p.q_b + kvh * p.G * p.q_h + col;
  int t = (row0 + r_first) / p.G, g = (row0 + r_first) % p.G;
  const int step_t = kRowStep / p.G, step_g = kRowStep % p.G;
  // All loads are issued before the first store, so that their latencies overlap.
  uint4 val[kPerThread];
#pragma unroll
  for (int i = 0; i < kPerThread; ++i) {
    val[i] = make_uint4(0u, 0u, 0u, 0u);
    if (row0 + r_first + i * kRowStep < p.rows)
      val[i] = __ldg(reinterpret_cast<const uint4*>(q + t * p.q_t + g * p.q_h));
    t += step_t;
    g += step_g;
    if (g >= p.G) {
      g -= p.G;
      ++t;
    }
  }
#pragma unroll
  for (int i = 0; i < kPerThread; ++i) {
    const int r = r_first + i * kRowStep;
    const int chunk = (c % 8) ^ (r % 8);  // 128B swizzle
    *reinterpret_cast<uint4*>(&ss.q[c / 8][r * Tr::kBoxCols + chunk * 8]) = val[i];
  }
}

// load_q_tile where a pass of the consumer threads does not cover whole rows (the seesaw's 5 boxes: 40
// chunks a row): a division per chunk, once per CTA; all loads before the first store.
template <class Tr, int kRows = Tr::kBlockM, class Ss>
__device__ __forceinline__ void load_q_tile_chunks(Ss& ss, const DecodeParams& p, int b, int kvh,
                                                   int row0, int ctid) {
  constexpr int kChunksPerRow = Tr::kQSmemBoxes * 8;
  constexpr int kTotal = kRows * kChunksPerRow;
  static_assert(kTotal % Tr::kConsumerThreads == 0, "Q load split");
  constexpr int kPerThread = kTotal / Tr::kConsumerThreads;
  const uint16_t* q = static_cast<const uint16_t*>(p.q) + b * p.q_b + kvh * p.G * p.q_h;
  uint4 val[kPerThread];
#pragma unroll
  for (int i = 0; i < kPerThread; ++i) {
    const int e = ctid + i * Tr::kConsumerThreads, r = e / kChunksPerRow, c = e % kChunksPerRow;
    const int row = row0 + r, col = Tr::q_global_box(c / 8) * Tr::kBoxCols + (c % 8) * 8;
    val[i] = make_uint4(0u, 0u, 0u, 0u);
    if (row < p.rows) val[i] = __ldg(reinterpret_cast<const uint4*>(q + (row / p.G) * p.q_t + (row % p.G) * p.q_h + col));
  }
#pragma unroll
  for (int i = 0; i < kPerThread; ++i) {
    const int e = ctid + i * Tr::kConsumerThreads, r = e / kChunksPerRow, c = e % kChunksPerRow;
    *reinterpret_cast<uint4*>(&ss.q[c / 8][r * Tr::kBoxCols + ((c % 8) ^ (r % 8)) * 8]) = val[i];  // 128B swizzle
  }
}

// Q's first Tr::kQLandedBoxes boxes (all but the rope ring's last), in order, into shared-memory boxes of a seesaw
// (its Q boxes and then its P boxes: consumer_prologue_q_boxes), where the producer does not load them by TMA. A
// thread's chunks e = ctid + i kConsumerThreads lie on rows that grow by at most kConsumerThreads / kChunksPerRow + 1
// from one to the next, so its row's (token, head) follows by carries from one division per thread instead of one
// per chunk.
template <class Tr, class Ss>
__device__ __forceinline__ void load_q_all_boxes(Ss& ss, const DecodeParams& p, int b, int kvh, int row0,
                                                 int ctid) {
  static_assert(Tr::kSeesaw && Tr::kQLandedBoxes <= Tr::kQSmemBoxes + Tr::kPBoxes, "Q in boxes: the seesaw's P boxes");
  constexpr int kChunksPerRow = Tr::kQLandedBoxes * 8;
  constexpr int kTotal = Tr::kBlockM * kChunksPerRow;
  static_assert(kTotal % Tr::kConsumerThreads == 0, "Q load split");
  constexpr int kPerThread = kTotal / Tr::kConsumerThreads;
  const uint16_t* q = static_cast<const uint16_t*>(p.q) + b * p.q_b + kvh * p.G * p.q_h;
  int r_at = 0, t = row0 / p.G, g = row0 % p.G;  // (token, head in the group) of row row0 + r_at
  uint4 val[kPerThread];
#pragma unroll
  for (int i = 0; i < kPerThread; ++i) {
    const int e = ctid + i * Tr::kConsumerThreads, r = e / kChunksPerRow, c = e % kChunksPerRow;
    for (g += r - r_at, r_at = r; g >= p.G; g -= p.G) ++t;
    val[i] = make_uint4(0u, 0u, 0u, 0u);
    if (row0 + r < p.rows) val[i] = __ldg(reinterpret_cast<const uint4*>(q + t * p.q_t + g * p.q_h + c * 8));
  }
#pragma unroll
  for (int i = 0; i < kPerThread; ++i) {
    const int e = ctid + i * Tr::kConsumerThreads, r = e / kChunksPerRow, c = e % kChunksPerRow;
    *reinterpret_cast<uint4*>(&ss.q[c / 8][r * Tr::kBoxCols + ((c % 8) ^ (r % 8)) * 8]) = val[i];  // 128B swizzle
  }
}

// kRows: the rows the loop reads (the narrow loop: its N; the rows past them are left as they are).
template <class Tr, int kRows = Tr::kBlockM, class Ss>
__device__ __forceinline__ void load_q_tile(Ss& ss, const DecodeParams& p, int b, int kvh, int row0,
                                            int ctid) {
  if constexpr (Tr::kConsumerThreads % (Tr::kQSmemBoxes * 8) == 0)
    load_q_tile_rows<Tr, kRows>(ss, p, b, kvh, row0, ctid);
  else
    load_q_tile_chunks<Tr, kRows>(ss, p, b, kvh, row0, ctid);
}

// Q by TMA (DecodeParams::q_tma): the row block's first Tr::kQLandedBoxes 64-column boxes (all but the rope ring's
// last), in head-dim order, into rows 0 .. kQTmaRows - 1 of shared-memory boxes 0, 1, ... of Ss::q, on ss.q_full; one
// thread. The map
// (encode_q_map) runs over (D, Hq, T, B) with a box of R = kQTmaRows packed rows: R heads of one token where
// G % R == 0, else all G heads of R / G tokens, whose tokens past T come back as zeros (the pad rows). Either way
// the row block starts at head kvh G + row0 % G of token row0 / G, and the box's rows are the packed rows in order.
template <class Tr, class Ss>
__device__ __forceinline__ void load_q_boxes_tma(Ss& ss, const CUtensorMap* tmap_q, const DecodeParams& p, int b,
                                                 int kvh, int row0) {
  static_assert(Tr::kQLandedBoxes <= sizeof(ss.q) / sizeof(ss.q[0]), "Q by TMA: a shared-memory box for every Q box");
  const int head = kvh * p.G + row0 % p.G, token = row0 / p.G;
  ptx::mbarrier_arrive_expect_tx(&ss.q_full, Tr::kQLandedBoxes * Tr::kQTmaRows * Tr::kRowBytes);
#pragma unroll
  for (int bx = 0; bx < Tr::kQLandedBoxes; ++bx)
    ptx::tma_load_4d(&ss.q[bx][0], tmap_q, &ss.q_full, bx * Tr::kBoxCols, head, token, b);
}

// KV-head pairs (p.head_pairs, see DecodeParams): which D = 64 KV head packed row n of CTA kvh belongs to,
// its row within that head's T G rows, and which 64-column half of the pair's Q and O it uses. With Q's
// other half zero, S = K Q^T over the 128 columns is the row's own head's scores, and of O^T = V^T P^T
// only the rows (head-dim columns) of its half are its output.
struct PairRow {
  int kvh, row, half;
};
__device__ __forceinline__ PairRow pair_row(const DecodeParams& p, bool pairs, int kvh, int n) {
  if (!pairs) return PairRow{kvh, n, 0};
  const int per_head = p.rows >> 1;
  const int half = n >= per_head ? 1 : 0;
  return PairRow{2 * kvh + half, n - half * per_head, half};
}

// Q of a KV-head pair (p.head_pairs; the narrow loop reads rows 0 .. kNarrowRows - 1): row n of head 2 kvh
// + half fills box `half` with its 64 columns and the other box with zeros (see pair_row).
template <class Tr, class Ss>
__device__ __forceinline__ void load_q_tile_pairs(Ss& ss, const DecodeParams& p, int b, int kvh,
                                                  int ctid) {
  static_assert(Tr::kHeadPairs && Tr::kQSmemBoxes == 2, "head pairs: Q as two 64-column boxes");
  constexpr int kChunksPerRow = 16;  // 16 B chunks of a 128-column row
  constexpr int kTotal = Tr::kNarrowRows * kChunksPerRow;
  static_assert(kTotal % Tr::kConsumerThreads == 0, "Q load split");
  constexpr int kPerThread = kTotal / Tr::kConsumerThreads;
  const uint16_t* q = static_cast<const uint16_t*>(p.q) + b * p.q_b;
  uint4 val[kPerThread];
#pragma unroll
  for (int i = 0; i < kPerThread; ++i) {
    const int e = ctid + i * Tr::kConsumerThreads, r = e / kChunksPerRow, c = e % kChunksPerRow;
    const PairRow pr = pair_row(p, true, kvh, r);
    val[i] = make_uint4(0u, 0u, 0u, 0u);
    if (r < p.rows && c / 8 == pr.half) {
      const int t = pr.row / p.G, hq = pr.kvh * p.G + pr.row % p.G;
      val[i] = __ldg(reinterpret_cast<const uint4*>(q + t * p.q_t + hq * p.q_h + (c % 8) * 8));
    }
  }
#pragma unroll
  for (int i = 0; i < kPerThread; ++i) {
    const int e = ctid + i * Tr::kConsumerThreads, r = e / kChunksPerRow, c = e % kChunksPerRow;
    *reinterpret_cast<uint4*>(&ss.q[c / 8][r * Tr::kBoxCols + ((c % 8) ^ (r % 8)) * 8]) = val[i];  // 128B swizzle
  }
}

}  // namespace fmha
