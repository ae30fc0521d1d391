// fmha sm_90a: the narrow loop for at most 16 (the shared latent: 32) packed query rows: keys and head-dim
// columns in the MMA's M, the query rows in N.
#pragma once

#include <cstdint>

#include "../common/epilogue.cuh"
#include "mma.cuh"

namespace fmha {
namespace sm90 {

// ----------------------------------------------------------------------------
// Narrow problems (at most Tr::kNarrowRows packed query rows: T = 1 with G <= 16, or T x G <= 16; 32 for
// the shared latent, whose loop runs with N = 32 where more than 16 rows are packed)
// ----------------------------------------------------------------------------
// The 64-row loops put the packed rows in wgmma's M = 64, so at T = 1 with 4 query heads per KV
// head 60 of 64 rows are padding the tensor core multiplies anyway: 64 multiply-adds per cache
// byte, which keeps the GPU at its power cap (docs/design-sm90.md). Here the operands swap: keys and
// head-dim columns fill M, the N = 16 (or 32) query rows are N.
//   S^T = K Q^T     per 64-key M block: wgmma m64nNk16, A = K tile (K-major), B = Q rows 0 .. N - 1
//   softmax over the keys of each column (query row): within a thread (2 per M block), across the 8
//                   lanes of a column (shuffles), across the 4 warps (shared memory, kBarNarrowMax)
//   P^T -> shared  bf16/fp16, K-major rows of 64 keys, one stmatrix.trans per M block, warp and 16 columns
//                   (the accumulator's 16 x 16 is four m8n8 fragments); kBarNarrowP once every warp wrote its part
//   O^T += V^T P^T  per 64 head-dim columns: wgmma m64nNk16, A = V tile read transposed (MN-major)
// Accumulator fragments (see softmax.cuh): element i of a thread holds M row 16 w + g + 8 h and
// column n = 8 c + 2 q + e, h = (i >> 1) & 1, c = i >> 2, e = i & 1; column slot j = 2 c + e.
// Shared memory (NarrowSmem), so no buffer is added: rows 0 .. kNarrowRows - 1 of the Q boxes hold the query
// rows; the rows below them in box 0 hold P^T (one N-row, 1024 B aligned block per 64-key M block), and the
// per-warp column reductions (4 N floats) lie below P^T (kNarrowRows = 16: rows 48-49 of box 0) or below Q in
// box 1 (32: rows 32-35). Both are single-buffered. The reductions
// are read before kBarNarrowP and written again after it. P^T is read by the P V wgmma, which each
// warp waits for before the next tile; a warp writes P^T again only after the next tile's
// kBarNarrowMax, which no warp passes before all have finished that wait. (A pipelined version
// that leaves P V in flight across that barrier would need two P^T buffers.)
template <class Tr>
struct NarrowSmem {
  static constexpr int kMBlocks = Tr::kBlockN / 64;
  static constexpr int kRows = Tr::kNarrowRows;  // the widest N the kernel runs
  static constexpr int kPRow0 = kRows;           // first Q-box row used for P^T
  // The cross-warp reductions (4 x kRows floats): rows 48-49 of box 0 at 16 rows, rows 32-35 of box 1 at 32.
  static constexpr int kRedBox = kRows == 16 ? 0 : 1;
  static constexpr int kRedRow = kRows == 16 ? 48 : kRows;
  static_assert(kRows == 16 || kRows == 32, "narrow: N = 16 or 32");
  static_assert(kPRow0 + kRows * kMBlocks <= (kRedBox == 0 ? kRedRow : 64), "narrow: P^T blocks must fit in box 0");
  static_assert(kRedRow + kRows / 8 <= 64, "narrow: the reductions must fit in their box");
  static_assert(Tr::kBlockM == 64, "narrow: spare rows of the 64-row Q box");
  // P^T of M block mb for a loop of kN rows (its blocks kN rows apart)
  template <int kN>
  __device__ static uint16_t* p_block(SharedStorage<Tr>& ss, int mb) { return &ss.q[0][(kPRow0 + kN * mb) * Tr::kBoxCols]; }
  __device__ static float* red(SharedStorage<Tr>& ss) { return reinterpret_cast<float*>(&ss.q[kRedBox][kRedRow * Tr::kBoxCols]); }
};

// Column reduction across the 4 warps: lanes 0-3 (g = 0) of each warp hold the warp's values for
// columns 8 c + 2 q + e; every thread gets the combined value of its kN / 4 columns.
template <class Tr, bool kMax, int kN>
__device__ __forceinline__ void narrow_cross_warp(SharedStorage<Tr>& ss, float (&v)[kN / 4], int w, int lane) {
  float* red = NarrowSmem<Tr>::red(ss);
  const int ql = lane % 4;
  // columns 8 c + 2 q, 8 c + 2 q + 1 (slots j = 2 c, 2 c + 1): one 8-byte pair per column group c of a warp row
  float2* mine = reinterpret_cast<float2*>(red + w * kN + 2 * ql);
  if (lane < 4) {
#pragma unroll
    for (int c = 0; c < kN / 8; ++c) mine[4 * c] = make_float2(v[2 * c], v[2 * c + 1]);
  }
  ptx::named_barrier_sync(kBarNarrowMax, Tr::kConsumerThreads);
  const float2* cols = reinterpret_cast<const float2*>(red + 2 * ql);
#pragma unroll
  for (int c = 0; c < kN / 8; ++c) {
    float2 r = cols[4 * c];
#pragma unroll
    for (int ww = 1; ww < 4; ++ww) {
      const float2 o = cols[(kN / 2) * ww + 4 * c];
      r = kMax ? make_float2(fmaxf(r.x, o.x), fmaxf(r.y, o.y)) : make_float2(r.x + o.x, r.y + o.y);
    }
    v[2 * c] = r.x;
    v[2 * c + 1] = r.y;
  }
}

// Reduce over the 8 lanes g = 0..7 that share a column (lane bits 2-4).
template <bool kMax>
__device__ __forceinline__ float narrow_lanes_reduce(float v) {
#pragma unroll
  for (int m = 4; m <= 16; m <<= 1) {
    const float o = __shfl_xor_sync(0xffffffffu, v, m);
    v = kMax ? fmaxf(v, o) : v + o;
  }
  return v;
}

// Q in shared memory for the narrow loop of a kernel that runs it at two N (kNarrowRows = 32): waited for once,
// ahead of the choice, so that the two loops do not each hold the consumers' Q load.
template <class Tr>
__device__ __forceinline__ void narrow_wait_q(SharedStorage<Tr>& ss, const DecodeParams& p, int b, int kvh, int ctid) {
  static_assert(Tr::kQByTma && !Tr::kHeadPairs, "narrow_wait_q: the shared latent's narrow loop");
  if (p.q_tma) {
    ptx::mbarrier_wait_parity(&ss.q_full, 0);  // the producer's TMA: rows 0 .. kQTmaRows - 1 of every Q box
  } else {  // (only the rows the loops read: all 64 would hold 144 registers of loads in flight)
    load_q_tile<Tr, Tr::kNarrowRows>(ss, p, b, kvh, 0, ctid);
    ptx::fence_proxy_async_shared();
    ptx::named_barrier_sync(kBarQReady, Tr::kConsumerThreads);
  }
}

// The ring position a run of narrow loops continues from (the balanced schedule's visits share one ring).
struct NarrowCursor {
  int stage = 0;
  uint32_t phase = 0;
};

// kN: the MMA's N, 16 or (kNarrowRows = 32) 32 columns of packed query rows; the kernel takes the narrowest
// that holds p.rows. kQLoaded: Q is in shared memory already (narrow_wait_q, or the balanced schedule's visit).
// kBalanced: one visit of the balanced schedule (cursor: the ring position, continued; vis: the visit; a unit of
// several pieces goes to the workspace instead of out); tr is then the visit's tiles of the unit.
template <class Tr, bool kBf16, int kN = 16, bool kQLoaded = false, bool kBalanced = false>
__device__ __forceinline__ void consumer_loop_narrow(SharedStorage<Tr>& ss, const DecodeParams& p,
                                                     const TileRange& tr, int b, int kvh, int split, int ctid,
                                                     NarrowCursor* cursor = nullptr,
                                                     const BalancedVisit* vis = nullptr) {
  using Ns = NarrowSmem<Tr>;
  static_assert(Tr::kConsumerThreads == 128, "narrow: one consumer warpgroup");
  static_assert(kN <= Tr::kNarrowRows, "narrow: N beyond the Q rows loaded");
  constexpr int kMB = Ns::kMBlocks;
  constexpr int kSlots = kN / 4;  // column slots j of a thread (kN / 8 column groups c, two columns each)
  constexpr int kFrag = kN / 2;   // accumulator floats of a thread per 64-row M block
  constexpr int kDB = Tr::kHeadDimV / 64;  // 64-column blocks of O^T
  constexpr uint32_t kSbo = 8 * Tr::kRowBytes;
  const int w = ctid / 32, lane = ctid % 32, g = lane / 4, ql = lane % 4;

  // KV-head pairs (p.head_pairs): only the D = 128 stream instantiation serves them (capi.cu).
  // (No local variables for them: a dead one changed the register allocation of the other instantiations.)
  if constexpr (kQLoaded) {
    // (the caller waited for Q: narrow_wait_q)
  } else if constexpr (Tr::kHeadPairs) {
    if (p.head_pairs) load_q_tile_pairs<Tr>(ss, p, b, kvh, ctid);
    else load_q_tile<Tr>(ss, p, b, kvh, 0, ctid);
    ptx::fence_proxy_async_shared();
    ptx::named_barrier_sync(kBarQReady, Tr::kConsumerThreads);
  } else {
    static_assert(!Tr::kQByTma, "narrow: a loop whose producer may load Q takes it from narrow_wait_q (kQLoaded)");
    load_q_tile<Tr>(ss, p, b, kvh, 0, ctid);
    ptx::fence_proxy_async_shared();
    ptx::named_barrier_sync(kBarQReady, Tr::kConsumerThreads);
  }

  // Per column slot j (query row n = 8 (j >> 1) + 2 q + (j & 1)): visible-key limit and state.
  int limit_abs[kSlots];
  float m_i[kSlots], l_i[kSlots];
#pragma unroll
  for (int j = 0; j < kSlots; ++j) {
    if constexpr (Tr::kHeadPairs)
      limit_abs[j] = row_key_limit(p, tr, pair_row(p, p.head_pairs != 0, kvh, 8 * (j >> 1) + 2 * ql + (j & 1)).row);
    else
      limit_abs[j] = row_key_limit(p, tr, 8 * (j >> 1) + 2 * ql + (j & 1));
    m_i[j] = -INFINITY;
    l_i[j] = 0.f;
  }
  float acc[kDB][kFrag];
#pragma unroll
  for (int db = 0; db < kDB; ++db)
#pragma unroll
    for (int i = 0; i < kFrag; ++i) acc[db][i] = 0.f;

  const ptx::SmemDescSw128 dq(ptx::smem_addr(&ss.q[0][0]), 16, kSbo);                  // Q rows 0 .. kN - 1 (B of S^T)
  const ptx::SmemDescSw128 dp(ptx::smem_addr(Ns::template p_block<kN>(ss, 0)), 16, kSbo);  // P^T blocks (B of O^T)
  // stmatrix: lane 8 (2 c + h) + r stores column r of matrix (h, c), i.e. query row n = 8 c + r, keys
  // 16 w + 8 h .. + 7: the 16-byte chunk 2 w + h of row n, swizzled (chunk ^ n % 8); + kN rows per M block and
  // 16 rows per further pair of column groups (rows 16 apart keep the swizzle).
  const int st_h = (lane >> 3) & 1, st_n = 8 * (lane >> 4) + (lane & 7);
  const uint32_t p_store = ptx::smem_addr(Ns::template p_block<kN>(ss, 0)) + st_n * Tr::kRowBytes +
                           16 * ((2 * w + st_h) ^ (st_n % 8));
  // Keys below this are visible to every row (causal rows start at L - T + 1): no mask needed.
  // (fmha::unmasked_until written out: the call reorders this loop's code)
  const int unmasked_until = p.causal ? tr.L - p.T + 1 : tr.L;
  static_assert(Tr::kStagesV == Tr::kStages, "narrow: one ring position for K and V");
  int stage = 0;        // it % kStages, kept as a counter: the deep rings have 3 or 6 stages (no shift)
  uint32_t phase = 0;   // (it / kStages) & 1
  if constexpr (kBalanced) {
    stage = cursor->stage;
    phase = cursor->phase;
  }
  for (int tile = tr.begin, it = 0; tile < tr.end; ++tile, ++it) {
    // S^T = K Q^T
    float s[kMB][kFrag];
    wait_full_stage(&ss.full_k[stage], phase, it, kProbeKFullWait, ctid, kv_gather(p));
    ptx::wgmma_fence();
    const ptx::SmemDescSw128 dk(ptx::smem_addr(&ss.k[stage][0][0]), 16, kSbo);
#pragma unroll
    for (int mb = 0; mb < kMB; ++mb)
#pragma unroll
      for (int kk = 0; kk < Tr::kHeadDim / 16; ++kk) {
        const uint32_t in_row = (kk % 4) * 32;
        ptx::wgmma_ss_narrow<kN, kBf16, false>(
            s[mb], dk.at((kk / 4) * Tr::kKvBoxBytes + mb * 64 * Tr::kRowBytes + in_row),
            dq.at((kk / 4) * Tr::kQBoxBytes + in_row), kk > 0 ? 1 : 0);
      }
    ptx::wgmma_commit_group();
    ptx::wgmma_wait_group<0>();
    if constexpr (kBalanced)
      if (tile + 1 == tr.end) release_stage(&ss.q_empty, lane);  // the visit's last read of Q: the next Q may land
    if constexpr (!Tr::kSharedKv) {  // (one ring: the stage is released after P V)
#pragma unroll
      for (int mb = 0; mb < kMB; ++mb) fence_regs(s[mb]);
      release_stage(&ss.empty_k[stage], lane);
#pragma unroll
      for (int mb = 0; mb < kMB; ++mb) fence_regs(s[mb]);  // keep the arrive ahead of the softmax (as in the overlapped loop)
    }

    // Online softmax down the columns. The column maxima are taken on the raw scores (qk_scale > 0,
    // so scaling after the max is the same), and P = 2^(s qk_scale - ref) is one FFMA and an ex2. Keys
    // past a row's limit are masked only in tiles that reach the first limit (uniform over the CTA).
    const int key0 = tile * Tr::kBlockN;
    float mx[kSlots];
#pragma unroll
    for (int j = 0; j < kSlots; ++j) mx[j] = -INFINITY;
    if (key0 + Tr::kBlockN <= unmasked_until) {
#pragma unroll
      for (int mb = 0; mb < kMB; ++mb)
#pragma unroll
        for (int i = 0; i < kFrag; ++i) mx[2 * (i >> 2) + (i & 1)] = fmaxf(mx[2 * (i >> 2) + (i & 1)], s[mb][i]);
    } else {
#pragma unroll
      for (int mb = 0; mb < kMB; ++mb)
#pragma unroll
        for (int i = 0; i < kFrag; ++i) {
          const int j = 2 * (i >> 2) + (i & 1);
          const int key = key0 + mb * 64 + 16 * w + g + 8 * frag_row_half(i);
          s[mb][i] = key < limit_abs[j] ? s[mb][i] : -INFINITY;
          mx[j] = fmaxf(mx[j], s[mb][i]);
        }
    }
#pragma unroll
    for (int j = 0; j < kSlots; ++j) mx[j] = narrow_lanes_reduce<true>(mx[j]);
    narrow_cross_warp<Tr, true, kN>(ss, mx, w, lane);
    float alpha[kSlots], neg_ref[kSlots], sum[kSlots];
#pragma unroll
    for (int j = 0; j < kSlots; ++j) {
      const float m_new = fmaxf(m_i[j], mx[j] * p.qk_scale);
      const float ref = m_new == -INFINITY ? 0.f : m_new;
      alpha[j] = exp2_approx(m_i[j] - ref);  // m_i = -inf -> 0
      neg_ref[j] = -ref;
      m_i[j] = m_new;
      sum[j] = 0.f;
    }
    // P^T into shared memory (row n = query row, 64 keys per M block, 128B-swizzled): per M block the
    // warp's 16 keys x 16 columns (of each pair of column groups cc) are four 8x8 matrices in the m8n8 fragment
    // layout, stored transposed.
#pragma unroll
    for (int mb = 0; mb < kMB; ++mb)
#pragma unroll
      for (int cc = 0; cc < kN / 16; ++cc) {
        uint32_t pk[4];
#pragma unroll
        for (int r = 0; r < 4; ++r) {  // matrix r = 2 c + h, c = 2 cc + (r >> 1): elements 2 r, 2 r + 1 of the pair
          const int i = 8 * cc + 2 * r, j = 2 * (i >> 2);  // (slots j, j + 1)
          const float p0 = exp2_approx(fmaf(s[mb][i], p.qk_scale, neg_ref[j]));
          const float p1 = exp2_approx(fmaf(s[mb][i + 1], p.qk_scale, neg_ref[j + 1]));
          sum[j] += p0;
          sum[j + 1] += p1;
          pk[r] = pack2<kBf16>(p0, p1);
        }
        ptx::stmatrix_x4_trans(p_store + (mb * kN + 16 * cc) * Tr::kRowBytes, pk[0], pk[1], pk[2], pk[3]);
      }
#pragma unroll
    for (int j = 0; j < kSlots; ++j) l_i[j] = l_i[j] * alpha[j] + sum[j];
    ptx::fence_proxy_async_shared();  // generic P^T stores -> the PV wgmma's async-proxy reads
#pragma unroll
    for (int db = 0; db < kDB; ++db)
#pragma unroll
      for (int i = 0; i < kFrag; ++i) acc[db][i] *= alpha[2 * (i >> 2) + (i & 1)];
    ptx::named_barrier_sync(kBarNarrowP, Tr::kConsumerThreads);

    // O^T += V^T P^T
    wait_v_stage<Tr>(ss, tr, it, stage, phase, ctid, kv_gather(p));
#pragma unroll
    for (int db = 0; db < kDB; ++db) fence_regs(acc[db]);
    ptx::wgmma_fence();
    const ptx::SmemDescSw128 dv(ptx::smem_addr(&ss.v_stage(stage)[0][0]), Tr::kKvBoxBytes, kSbo);
#pragma unroll
    for (int db = 0; db < kDB; ++db)
#pragma unroll
      for (int kk = 0; kk < Tr::kBlockN / 16; ++kk)
        ptx::wgmma_ss_narrow<kN, kBf16, true>(acc[db], dv.at(db * Tr::kKvBoxBytes + kk * 16 * Tr::kRowBytes),
                                              dp.at((kk / 4) * kN * Tr::kRowBytes + (kk % 4) * 32), 1);
    ptx::wgmma_commit_group();
    ptx::wgmma_wait_group<0>();
#pragma unroll
    for (int db = 0; db < kDB; ++db) fence_regs(acc[db]);
    release_v_stage<Tr>(ss, stage, lane);
    if (++stage == Tr::kStages) {
      stage = 0;
      phase ^= 1u;
    }
  }

  if constexpr (kBalanced) {
    cursor->stage = stage;
    cursor->phase = phase;
  }

  // Row sums over all keys: this thread's, its column's 8 lanes, the 4 warps. The reduction row
  // is free: every warp passed the last kBarNarrowP (or none ran) after its last read of it.
  float l_tot[kSlots];
#pragma unroll
  for (int j = 0; j < kSlots; ++j) l_tot[j] = narrow_lanes_reduce<false>(l_i[j]);
  narrow_cross_warp<Tr, false, kN>(ss, l_tot, w, lane);
  float inv_l[kSlots], lse[kSlots];
#pragma unroll
  for (int j = 0; j < kSlots; ++j) {
    const bool empty = !(l_tot[j] > 0.f);
    inv_l[j] = empty ? 0.f : 1.f / l_tot[j];
    lse[j] = empty ? -INFINITY : (m_i[j] + __log2f(l_tot[j])) * kLn2;
  }

  // Epilogue: O^T element (d, n) -> out[b, t, hq, d] (or the split partials); the LSE once per column.
  const ClusterMerge<Tr> cm(ss, p, 0);
  const bool in_cluster = begin_cluster_push<Tr>(p);
#pragma unroll
  for (int j = 0; j < kSlots; ++j) {
    const int n = 8 * (j >> 1) + 2 * ql + (j & 1);
    if (n >= p.rows) continue;  // padding column
    if constexpr (Tr::kHeadPairs) {
      if (p.head_pairs) {  // column n: its own head's 64 of the 128 O^T rows (head pairs are never split: capi.cu)
        const PairRow pr = pair_row(p, true, kvh, n);
        const OutRow r(p, b, pr.kvh, pr.row);
        uint16_t* dst = r.out(p, b);
        float row_inv_l = inv_l[j], row_lse = lse[j];
        if (p.sinks != nullptr) add_sink(__ldg(p.sinks + r.hq), row_inv_l, row_lse);
#pragma unroll
        for (int db = 0; db < kDB; ++db)
#pragma unroll
          for (int h = 0; h < 2; ++h)
            if (db == pr.half) dst[16 * w + g + 8 * h] = half_bits<kBf16>(acc[db][4 * (j >> 1) + 2 * h + (j & 1)] * row_inv_l);
        if (w == 0 && g == 0) p.lse[r.lse_idx] = row_lse;
        continue;
      }
    }
    const OutRow r(p, b, kvh, n);
    if (kBalanced && vis->pieces > 1) {  // a piece of a shared unit: its workspace slot (balanced_slot)
      const int slot = balanced_slot(vis->first_cta, vis->first_mid, vis->piece);
      const int64_t row = static_cast<int64_t>(slot) * p.rows + n;
      float* dst = p.o_partial + row * Tr::kHeadDimV;
#pragma unroll
      for (int db = 0; db < kDB; ++db)
#pragma unroll
        for (int h = 0; h < 2; ++h)
          dst[db * 64 + 16 * w + g + 8 * h] = acc[db][4 * (j >> 1) + 2 * h + (j & 1)] * inv_l[j];
      if (w == 0 && g == 0) p.lse_partial[row] = lse[j];
    } else if (kBalanced || p.num_splits == 1) {  // (a balanced unit of one piece is whole, whatever the grid)
      uint16_t* dst = r.out(p, b);
      float row_inv_l = inv_l[j], row_lse = lse[j];
      if (p.sinks != nullptr) add_sink(__ldg(p.sinks + r.hq), row_inv_l, row_lse);
#pragma unroll
      for (int db = 0; db < kDB; ++db)
#pragma unroll
        for (int h = 0; h < 2; ++h)
          dst[db * 64 + 16 * w + g + 8 * h] = half_bits<kBf16>(acc[db][4 * (j >> 1) + 2 * h + (j & 1)] * row_inv_l);
      if (w == 0 && g == 0) p.lse[r.lse_idx] = row_lse;
    } else {
      const PartialRow<Tr> dst(p, r, b, split, n, cm, in_cluster);
#pragma unroll
      for (int db = 0; db < kDB; ++db)
#pragma unroll
        for (int h = 0; h < 2; ++h) dst.put(db * 64 + 16 * w + g + 8 * h, acc[db][4 * (j >> 1) + 2 * h + (j & 1)] * inv_l[j]);
      if (w == 0 && g == 0) dst.put_lse(lse[j]);
    }
  }
  if constexpr (kBalanced) {  // the unit's descriptor, once (combine_balanced_kernel merges where pieces > 1)
    if (vis->piece == 0 && ctid == 0) {
      int4* desc = reinterpret_cast<int4*>(p.balanced_desc) + vis->unit;
      *desc = make_int4(vis->pieces, vis->first_cta, vis->first_mid, 0);
    }
    // The next visit's first column reduction writes the rows this epilogue's reduction read.
    ptx::named_barrier_sync(kBarNarrowP, Tr::kConsumerThreads);
  }
}

}  // namespace sm90
}  // namespace fmha
