// fmha sm_90a: the consumer warpgroups' building blocks: Q K^T and P V as wgmma, Q held as register
// fragments, the score exchange of split Q K^T, the accumulator rescale, and the consumer prologue.
#pragma once

#include <cstdint>

#include "../common/kv_ring.cuh"
#include "../common/q_load.cuh"
#include "../common/rows.cuh"
#include "../common/softmax.cuh"
#include "ptx_sm90.cuh"
#include "traits.h"

namespace fmha {
namespace sm90 {

// Q columns held in registers (Tr::kQRegCols): warpgroup wg's A fragments of Q K^T for its last
// kQRegSteps k16 steps. Fragment layout (wgmma A from registers, as mma.m16n8k16's A): register j of
// step kk holds two 16-bit values of row 16 w + g + 8 (j & 1), columns 16 kk + 8 (j >> 1) + 2 q, +1.
template <class Tr>
struct QRegs {
  uint32_t r[Tr::kQRegSteps > 0 ? Tr::kQRegSteps : 1][4];
};

template <class Tr>
__device__ __forceinline__ void load_q_regs(QRegs<Tr>& qr, const DecodeParams& p, int b, int kvh, int row0, int wg,
                                            int tid_wg) {
  if constexpr (Tr::kQRegSteps > 0) {
    const int w = tid_wg / 32, lane = tid_wg % 32, g = lane / 4, ql = lane % 4;
    // The end of the warpgroup's head-dim range (split Q K^T), or of the head dim (the seesaw).
    const int col_end = Tr::kSeesaw ? Tr::kHeadDim : wg * (Tr::kWg1FirstBox * Tr::kBoxCols) + Tr::kWgBoxes * Tr::kBoxCols;
    const int col_base = col_end - Tr::kQRegCols + 2 * ql;
    // Warpgroup 0's columns from warpgroup 1's first box on are zero (Traits::kOverlapBoxes).
    constexpr int kZeroFromStep = (Tr::kQRegCols - Tr::kOverlapBoxes * Tr::kBoxCols) / 16;
    const bool zero_tail = !Tr::kSeesaw && Tr::kOverlapBoxes > 0 && wg == 0;
    const uint16_t* q = static_cast<const uint16_t*>(p.q);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = row0 + 16 * w + g + 8 * h;
      const bool valid = row < p.rows;  // padding rows are zero
      const uint16_t* src = q;
      if (valid) src = q + b * p.q_b + (row / p.G) * p.q_t + (kvh * p.G + row % p.G) * p.q_h + col_base;
#pragma unroll
      for (int kk = 0; kk < Tr::kQRegSteps; ++kk)
#pragma unroll
        for (int half = 0; half < 2; ++half)
          qr.r[kk][h + 2 * half] = valid && !(zero_tail && kk >= kZeroFromStep)
                                       ? __ldg(reinterpret_cast<const uint32_t*>(src + 16 * kk + 8 * half))
                                       : 0u;
    }
  }
}

// ptx::reg_fence on every register of a fragment: no read or write of it moves across the wgmma fence, commit or
// wait beside the call (their memory clobbers do not cover registers).
template <int N>
__device__ __forceinline__ void fence_regs(float (&r)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) ptx::reg_fence(r[i]);
}
template <int N>
__device__ __forceinline__ void fence_regs(uint32_t (&r)[N][4]) {
#pragma unroll
  for (int i = 0; i < N; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) ptx::reg_fence(r[i][j]);
}

// P (the softmax's output s) packed into the A fragments of the P V wgmma.
template <bool kBf16, int N>
__device__ __forceinline__ void pack_p(uint32_t (&pa)[N / 16][4], const float (&s)[N / 2]) {
#pragma unroll
  for (int kk = 0; kk < N / 16; ++kk)
#pragma unroll
    for (int j = 0; j < 4; ++j) pa[kk][j] = pack2<kBf16>(s[8 * kk + 2 * j], s[8 * kk + 2 * j + 1]);
}

// O *= alpha, row-wise. Once the running maxima settle (after the first tiles of a sequence) alpha
// is exactly 1 for most tiles: a warp in which every row kept its max skips the kOutCols / 2
// multiplies a thread (128 at D = 512). Multiplying by 1 is exact, so skipping changes no bit.
// The vote and branch cost more than they save at small D (kSkipUnitRescale).
template <bool kSkipUnit, int N>
__device__ __forceinline__ void rescale_acc(float (&acc)[N], const float (&alpha)[2]) {
  if constexpr (kSkipUnit)
    if (!__any_sync(0xffffffffu, alpha[0] != 1.f || alpha[1] != 1.f)) return;
#pragma unroll
  for (int i = 0; i < N; ++i) acc[i] *= alpha[frag_row_half(i)];
}

// S = Q K^T over head-dim columns [kCol0, kCol0 + kCols): kCols/16 k16 steps,
// each a 32 B advance inside a 128 B swizzle row, moving to the next box every 4 steps.
// With Tr::kQRegCols (split Q K^T, or the seesaw) the last kQRegSteps steps take A from qr.
template <class Tr, bool kBf16, int kCols = Tr::kHeadDim>
__device__ __forceinline__ void qk_gemm(float (&s)[Tr::kBlockN / 2], const SharedStorage<Tr>& ss, int stage,
                                        int col0 = 0, const QRegs<Tr>* qr = nullptr) {
  constexpr uint32_t kSbo = Tr::kSwizzleSbo, kLboUnused = Tr::kLboUnused;
  constexpr int kSteps = kCols / 16;
  constexpr int kSmemSteps = kSteps - (kCols == Tr::kHeadDim && !Tr::kSeesaw ? 0 : Tr::kQRegSteps);
  static_assert(kCols != Tr::kHeadDim || Tr::kQRegSteps == 0 || Tr::kSeesaw, "Q in registers: split Q K^T or seesaw");
  const int box0 = col0 / Tr::kBoxCols;
  const ptx::SmemDescSw128 da(ptx::smem_addr(&ss.q[Tr::q_smem_box(box0)][0]), kLboUnused, kSbo);
  const ptx::SmemDescSw128 db(ptx::smem_addr(&ss.k[stage][box0][0]), kLboUnused, kSbo);
#pragma unroll
  for (int kk = 0; kk < kSteps; ++kk) {
    const uint32_t in_row = (kk % 4) * 32;
    if (kk < kSmemSteps)
      ptx::wgmma_ss<Tr::kBlockN, kBf16>(s, da.at((kk / 4) * Tr::kQBoxBytes + in_row),
                                        db.at((kk / 4) * Tr::kKvBoxBytes + in_row), kk > 0 ? 1 : 0);
    else if constexpr (kSmemSteps < kSteps)
      ptx::wgmma_rs_kmajor<Tr::kBlockN, kBf16>(s, qr->r[kk - kSmemSteps], db.at((kk / 4) * Tr::kKvBoxBytes + in_row), 1);
  }
}

// kSplitQk: warpgroup wg holds the partial S over its half of the head dim; add
// the other warpgroup's half through shared memory. Thread t of each warpgroup
// owns the same fragment positions, so it exchanges with thread t of the other.
// Both sides compute mine + other, which is the same float sum either way round
// (addition is commutative), so both warpgroups keep identical softmax statistics.
// Two buffers by tile parity: a warpgroup writes buffer (it & 1) again only after
// the next barrier, which the other passes only once it has read that buffer.
template <class Tr>
__device__ __forceinline__ void exchange_scores(float (&s)[Tr::kBlockN / 2], SharedStorage<Tr>& ss, int it, int wg,
                                                int tid_wg) {
  constexpr int kVec = Tr::kBlockN / 8;  // float4 per thread
  float4* base = ss.s_exchange + (it & 1) * 2 * kVec * 128;
  float4* mine = base + wg * kVec * 128;
  const float4* other = base + (wg ^ 1) * kVec * 128;
#pragma unroll
  for (int j = 0; j < kVec; ++j) mine[j * 128 + tid_wg] = make_float4(s[4 * j], s[4 * j + 1], s[4 * j + 2], s[4 * j + 3]);
  ptx::named_barrier_sync(kBarScores, Tr::kConsumerThreads);
#pragma unroll
  for (int j = 0; j < kVec; ++j) {
    const float4 o = other[j * 128 + tid_wg];
    s[4 * j] += o.x;
    s[4 * j + 1] += o.y;
    s[4 * j + 2] += o.z;
    s[4 * j + 3] += o.w;
  }
}

// O[:, wg cols] += P V: kBlockN/16 k16 steps of 16 tokens (16 swizzle rows =
// 2048 B) each; the N = kOutCols columns span kOutCols/64 boxes (LBO apart).
template <class Tr, bool kBf16>
__device__ __forceinline__ void pv_gemm(float (&acc)[Tr::kOutCols / 2], const uint32_t (&pa)[Tr::kBlockN / 16][4],
                                        const SharedStorage<Tr>& ss, int stage, int wg) {
  constexpr uint32_t kSbo = Tr::kSwizzleSbo;  // 8-token groups along K
  constexpr uint32_t kLbo = Tr::kKvBoxBytes;  // next 64 output columns: next box
  const ptx::SmemDescSw128 db(ptx::smem_addr(&ss.v_stage(stage)[wg * (Tr::kOutCols / Tr::kBoxCols)][0]), kLbo, kSbo);
#pragma unroll
  for (int kk = 0; kk < Tr::kBlockN / 16; ++kk) ptx::wgmma_rs<Tr::kOutCols, kBf16>(acc, pa[kk], db.at(kk * 16 * Tr::kRowBytes), 1);
}


// Consumer start: Q into shared memory (fenced for the wgmma, all consumer threads synced) and
// the per-row key limits.
template <class Tr>
__device__ __forceinline__ void consumer_prologue(SharedStorage<Tr>& ss, const DecodeParams& p, const TileRange& tr,
                                                  int b, int kvh, int row0, int ctid, int (&limit_abs)[2]) {
  const int tid_wg = ctid % 128;
  load_q_tile<Tr>(ss, p, b, kvh, row0, ctid);
  ptx::fence_proxy_async_shared();  // generic st.shared -> async-proxy (wgmma) reads
  ptx::named_barrier_sync(kBarQReady, Tr::kConsumerThreads);
  row_key_limits<Tr>(p, tr, row0, tid_wg / 32, (tid_wg % 32) / 4, limit_abs);
}

// consumer_prologue and load_q_regs of the 64-key seesaw: all of Q in shared-memory boxes 0 .. kBoxes - 1 (with the
// rope ring all but the last, Tr::kQLandedBoxes), the columns held in registers (QRegs) in the P boxes, which nothing
// writes before the first softmax, read out from there. The producer loads the boxes by TMA (DecodeParams::q_tma),
// or the consumers with 16-byte loads.
template <class Tr>
__device__ __forceinline__ void consumer_prologue_q_boxes(SharedStorage<Tr>& ss, const DecodeParams& p,
                                                          const TileRange& tr, int b, int kvh, int row0, int ctid,
                                                          int (&limit_abs)[2], QRegs<Tr>& qr, uint32_t q_phase = 0) {
  constexpr int kSmemSteps = Tr::kHeadDim / 16 - Tr::kQRegSteps;
  static_assert(Tr::kSeesaw && Tr::kQSmemBoxes * Tr::kBoxCols == kSmemSteps * 16, "Q in boxes: whole boxes");
  const int tid_wg = ctid % 128;
  const int w = tid_wg / 32, g = (tid_wg % 32) / 4, ql = tid_wg % 4;
  // Tr::kRopeRing: Q's last box is not landed; its register columns come from global memory, loaded first so that
  // their latency overlaps the landing of the others.
  constexpr int kLandedSteps = Tr::kQLandedBoxes * 4 - kSmemSteps;  // register steps read from landed boxes
  if constexpr (kLandedSteps < Tr::kQRegSteps) {
    const uint16_t* q = static_cast<const uint16_t*>(p.q) + b * p.q_b + kvh * p.G * p.q_h;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = row0 + 16 * w + g + 8 * h;
      const uint16_t* q_row = q + (row / p.G) * p.q_t + (row % p.G) * p.q_h + 2 * ql;
#pragma unroll
      for (int kk = kLandedSteps; kk < Tr::kQRegSteps; ++kk)
#pragma unroll
        for (int jc = 0; jc < 2; ++jc)  // register j = h + 2 jc: columns 16 (kSmemSteps + kk) + 8 jc + 2 ql and + 1
          qr.r[kk][h + 2 * jc] =
              row < p.rows ? __ldg(reinterpret_cast<const uint32_t*>(q_row + 16 * (kSmemSteps + kk) + 8 * jc)) : 0u;
    }
  }
  if (p.q_tma) {
    ptx::mbarrier_wait_parity(&ss.q_full, q_phase);  // (0 but for the balanced schedule's later visits)
  } else {
    load_q_all_boxes<Tr>(ss, p, b, kvh, row0, ctid);
    ptx::fence_proxy_async_shared();  // generic st.shared -> async-proxy (wgmma) reads
    ptx::named_barrier_sync(kBarQReady, Tr::kConsumerThreads);
  }
  // Register j of step kk: row 16 w + g + 8 (j & 1), columns 16 (kSmemSteps + kk) + 8 (j >> 1) + 2 ql and + 1,
  // as load_q_regs reads them; the row's 16 B chunks are swizzled by row % 8 = g.
#pragma unroll
  for (int kk = 0; kk < kLandedSteps; ++kk)
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int row = 16 * w + g + 8 * (j & 1);
      const int col = 16 * (kSmemSteps + kk) + 8 * (j >> 1) + 2 * ql;
      const int c = col % Tr::kBoxCols;
      qr.r[kk][j] = *reinterpret_cast<const uint32_t*>(
          &ss.q[col / Tr::kBoxCols][row * Tr::kBoxCols + (((c / 8) ^ g) * 8) + c % 8]);
    }
  ptx::named_barrier_sync(kBarQReady, Tr::kConsumerThreads);  // every read done before the first P overwrites them
  row_key_limits<Tr>(p, tr, row0, w, g, limit_abs);
}

// The online softmax of ring position `it` (s becomes P), masked only where a key of the tile is past some
// row's limit (unmasked_until: keys below it are visible to every row); Tr::kLazyMax: a lazy reference max;
// Tr::kShortChains: the row reductions in short chains.
template <class Tr>
__device__ __forceinline__ void softmax_ring_tile(float (&s)[Tr::kBlockN / 2], RowState& st, const DecodeParams& p,
                                                  const TileRange& tr, int it, const int (&limit_abs)[2],
                                                  int unmasked_until, int ql, float (&alpha)[2]) {
  const int key0 = (tr.begin + it) * Tr::kBlockN;
  const int key_limit[2] = {limit_abs[0] - key0, limit_abs[1] - key0};
  constexpr bool kLazy = Tr::kLazyMax, kShort = Tr::kShortChains;
  if (key0 + Tr::kBlockN <= unmasked_until)  // uniform over the CTA
    online_softmax_tile<Tr::kBlockN, false, kLazy, kShort>(s, st, key_limit, p.qk_scale, ql, alpha);
  else
    online_softmax_tile<Tr::kBlockN, true, kLazy, kShort>(s, st, key_limit, p.qk_scale, ql, alpha);
}

// The consumer warpgroup of thread ctid, read from lane 0 so that the compiler knows it is warp-uniform:
// shared-memory descriptors built from it then stay in uniform registers (else ptxas moves nearly every
// wgmma's descriptor into one with an R2UR).
template <class Tr>
__device__ __forceinline__ int warpgroup_index(int ctid) {
  return Tr::kConsumerWGs == 1 ? 0 : __shfl_sync(0xffffffffu, ctid / 128, 0);
}

}  // namespace sm90
}  // namespace fmha
