// fmha sm_100a: the rows-on-M loop, both sides. Packed query rows on the MMA's M (64), keys on N:
//   S(it)  = Q K(it)^T   M = 64, N = kBlockN, K = D   A = Q, B = K: shared memory, K-major
//   O     += P(it) V(it) M = 64, N = D (two MMAs of 256 at D = 512), K = kBlockN
//                        A = P: shared memory, K-major; B = V: shared memory, MN-major
// S and O live in Tensor Memory (TmemPlan, traits.h); P in shared memory, never over S (two buffers
// by tile parity). The MMA warp's one lane issues every tcgen05.mma; completion reaches the other roles
// only through tcgen05.commit on an mbarrier. The pipelines (SharedStorage names the barriers):
//   full_k/full_v  producer -> MMA lane and softmax (the V tail)   the tile landed
//   empty_k        commit after S(it)    -> producer   Q K^T has read the K stage
//   empty_v        commit after PV(it)   -> producer   P V has read the V stage
// One ring (Tr::kSharedKv, K = V): V(it) is the K stage of tile it, so full_k serves both MMAs and
// empty_k is committed after PV(it) instead of S(it); there are no V barriers.
//   q_full         softmax (128) -> MMA lane           Q stored and fenced, once
//   s_full[par]    commit after S(it)    -> softmax    S(it) is in buffer it % 2
//   s_free[par]    softmax (128) -> MMA lane           S(it) read out: S(it + 2) may overwrite it
//   p_full[par]    softmax (128) -> MMA lane           P(it) stored, O corrected, V tail cleared
//   p_free[par]    commit after PV(it)   -> softmax    P buffer it % 2 free; O holds tiles 0..it
// S(it + 1) is issued before PV(it), so the softmax of it + 1 overlaps P V(it). No barrier can get two
// phases ahead of its waiter (docs/sm100-walkthrough.md). The softmax arithmetic is the Hopper loop's
// (common/softmax.cuh on the same m64nN fragments).
#pragma once

#include <cstdint>

#include "../common/epilogue.cuh"
#include "../common/kv_ring.cuh"
#include "../common/q_load.cuh"
#include "../common/softmax.cuh"
#include "descriptors.h"
#include "ptx_sm100.cuh"
#include "traits.h"

namespace fmha {
namespace sm100 {

__device__ __forceinline__ uint32_t parity(int n) { return static_cast<uint32_t>(n) & 1u; }

// Instruction descriptors of the two MMAs (bf16 or fp16 inputs, fp32 accumulators).
template <class Tr, bool kBf16>
struct Idesc {
  static constexpr InputType kIn = kBf16 ? InputType::kBF16 : InputType::kF16;
  static constexpr uint32_t kS = IdescF16<64, Tr::kBlockN, kIn, Major::kK, Major::kK>::value;
  static constexpr uint32_t kO = IdescF16<64, Tr::Tmem::kOColsPerHalf, kIn, Major::kK, Major::kMN>::value;
};

// K16 step kk of a K-major 128B-swizzled operand stored as 64-column boxes of `box_bytes`: box kk / 4,
// +32 bytes per step inside its 128-byte rows.
__device__ __forceinline__ uint64_t k_major_step(const void* boxes, int box_bytes, int kk) {
  return make_smem_desc_k_sw128(ptx::smem_addr(boxes) + (kk / 4) * box_bytes + (kk % 4) * 32);
}

// ---------------------------------------------------------------------------------------------------
// MMA warp (one lane)
// ---------------------------------------------------------------------------------------------------

template <class Tr, bool kBf16, class Ss>
__device__ __forceinline__ void mma_issue_s(Ss& ss, uint32_t tmem, int it, bool gathered) {
  const int stage = it % Tr::kStages;
  ptx::mbarrier_wait_parity(&ss.full_k[stage], parity(it / Tr::kStages));
  if (gathered) ptx::fence_proxy_async_shared();  // the gather's cp.async (generic proxy) -> the MMA's reads
  ptx::tcgen05_fence_after_thread_sync();
#pragma unroll
  for (int kk = 0; kk < Tr::kHeadDim / 16; ++kk) {
    const uint64_t a = k_major_step(&ss.q[0][0], Tr::kQBoxBytes, kk);
    const uint64_t b = k_major_step(&ss.k[stage][0][0], Tr::kKvBoxBytes, kk);
    ptx::tcgen05_mma_f16_ss(tmem + Tr::Tmem::s(it % 2), a, b, Idesc<Tr, kBf16>::kS, kk > 0 ? 1u : 0u);
  }
  if constexpr (!Tr::kSharedKv) ptx::tcgen05_commit(&ss.empty_k[stage]);  // (one ring: after P V)
  ptx::tcgen05_commit(&ss.s_full[it % 2]);
}

template <class Tr, bool kBf16, class Ss>
__device__ __forceinline__ void mma_issue_pv(Ss& ss, uint32_t tmem, int it, bool gathered) {
  using Tm = typename Tr::Tmem;
  const int stage = it % Tr::kStagesV;
  ptx::mbarrier_wait_parity(&ss.p_full[it % 2], parity(it / 2));
  // (One ring: the K stage's phase, which S(it) waited for; the stage is not released before this P V.)
  uint64_t* full;
  if constexpr (Tr::kSharedKv) full = &ss.full_k[stage];
  else full = &ss.full_v[stage];
  ptx::mbarrier_wait_parity(full, parity(it / Tr::kStagesV));
  if (gathered) ptx::fence_proxy_async_shared();
  ptx::tcgen05_fence_after_thread_sync();
  constexpr int kBoxesPerHalf = Tm::kOColsPerHalf / Tr::kBoxCols;
  // V's rows: its own ring's stage, or (one ring) the K stage, whose boxes have V's layout (below).
  const uint16_t* v_boxes;
  if constexpr (Tr::kSharedKv) v_boxes = &ss.k[stage][0][0];
  else v_boxes = &ss.v[stage][0][0];
#pragma unroll
  for (int kk = 0; kk < Tr::kBlockN / 16; ++kk) {
    const uint64_t a = k_major_step(&ss.p[it % 2][0][0], Tr::kQBoxBytes, kk);
#pragma unroll
    for (int h = 0; h < Tm::kOHalves; ++h) {
      // V as the MN-major B operand: LBO = one 64-column box, SBO = 8 keys x 128 B, +16 keys per step.
      const uint32_t v0 = ptx::smem_addr(v_boxes + h * kBoxesPerHalf * (Tr::kKvBoxBytes / 2)) + kk * 16 * Tr::kRowBytes;
      const uint64_t b = make_smem_desc_mn_sw128(v0, Tr::kKvBoxBytes);
      ptx::tcgen05_mma_f16_ss(tmem + Tm::o(h), a, b, Idesc<Tr, kBf16>::kO, (it > 0 || kk > 0) ? 1u : 0u);
    }
  }
  if constexpr (Tr::kSharedKv) ptx::tcgen05_commit(&ss.empty_k[stage]);  // Q K^T(it) and P V(it) both read it
  else ptx::tcgen05_commit(&ss.empty_v[stage]);
  ptx::tcgen05_commit(&ss.p_free[it % 2]);
}

// Every MMA of the CTA's tile range, in the order S(0), then S(it + 1) before PV(it).
template <class Tr, bool kBf16, class Ss>
__device__ __forceinline__ void mma_loop(Ss& ss, const DecodeParams& p, const TileRange& tr, uint32_t tmem) {
  const int n = tr.end - tr.begin;
  if (n <= 0) return;
  const bool gathered = kv_gather(p);
  ptx::mbarrier_wait_parity(&ss.q_full, 0);
  mma_issue_s<Tr, kBf16>(ss, tmem, 0, gathered);
  for (int it = 0; it < n; ++it) {
    if (it + 1 < n) {
      // S(it + 1) overwrites the buffer of S(it - 1): wait until the softmax has read it.
      if (it >= 1) ptx::mbarrier_wait_parity(&ss.s_free[(it + 1) % 2], parity((it - 1) / 2));
      mma_issue_s<Tr, kBf16>(ss, tmem, it + 1, gathered);
    }
    mma_issue_pv<Tr, kBf16>(ss, tmem, it, gathered);
  }
}

// The producer tail (one lane, after the producer's loop): wait for the last release of every ring stage
// the CTA filled, so that no tcgen05.commit still arrives on a barrier of this CTA's shared memory after it
// exits. Position it of the n releases stage it % S in round it / S, completing that phase (parity).
template <class Tr, class Ss>
__device__ __forceinline__ void producer_tail(Ss& ss, int n) {
  for (int it = n > Tr::kStages ? n - Tr::kStages : 0; it < n; ++it)
    ptx::mbarrier_wait_parity(&ss.empty_k[it % Tr::kStages], parity(it / Tr::kStages));
  if constexpr (!Tr::kSharedKv) {
    for (int it = n > Tr::kStagesV ? n - Tr::kStagesV : 0; it < n; ++it)
      ptx::mbarrier_wait_parity(&ss.empty_v[it % Tr::kStagesV], parity(it / Tr::kStagesV));
  }
}

// ---------------------------------------------------------------------------------------------------
// Softmax warpgroup (warps 0-3: warp w reads Tensor Memory lanes 32 w .. 32 w + 31)
// ---------------------------------------------------------------------------------------------------

// O *= alpha for this warp's rows, in Tensor Memory, 32 columns a load (16x256b.x4: the m64nN fragment
// of 32 columns, 16 registers).
template <class Tr>
__device__ __forceinline__ void correct_o(uint32_t o_warp, const float (&alpha)[2]) {
  using Tm = typename Tr::Tmem;
#pragma unroll
  for (int h = 0; h < Tm::kOHalves; ++h) {
#pragma unroll 1
    for (int c = 0; c < Tm::kOColsPerHalf; c += 32) {
      const uint32_t addr = o_warp + Tm::o(h) + c;
      uint32_t r[16];
      ptx::tcgen05_ld_16x256b<4>(addr, r);
      ptx::tcgen05_wait_ld(r);
#pragma unroll
      for (int i = 0; i < 16; ++i) r[i] = __float_as_uint(__uint_as_float(r[i]) * alpha[frag_row_half(i)]);
      ptx::tcgen05_st_16x256b<4>(addr, r);
    }
  }
  ptx::tcgen05_wait_st();
}

// P (the fragment s, already exponentiated) into P buffer `buf`, K-major and 128B-swizzled like Q: the
// pair of columns 8 c + 2 q, + 1 of row r as one 32-bit store in chunk (c % 8) ^ (r % 8) of box c / 8.
template <class Tr, bool kBf16, class Ss>
__device__ __forceinline__ void store_p(Ss& ss, int buf, const float (&s)[Tr::kBlockN / 2], int w, int g, int ql) {
#pragma unroll
  for (int c = 0; c < Tr::kBlockN / 8; ++c) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = 16 * w + g + 8 * h, i = 4 * c + 2 * h;
      char* row = reinterpret_cast<char*>(&ss.p[buf][c / 8][0]) + r * Tr::kRowBytes;
      *reinterpret_cast<uint32_t*>(row + (((c % 8) ^ (r % 8)) * 16) + 4 * ql) = pack2<kBf16>(s[i], s[i + 1]);
    }
  }
}

// One 64-row block: Q into shared memory, then per tile S from Tensor Memory, the online softmax, P into
// shared memory and the O correction; finally O / l and the LSE (or the split partials).
template <class Tr, bool kBf16, class Ss>
__device__ __forceinline__ void softmax_loop(Ss& ss, const DecodeParams& p, const TileRange& tr, uint32_t tmem,
                                             int b, int kvh, int row0, int split, int ctid) {
  using Tm = typename Tr::Tmem;
  const int w = ctid / 32, lane = ctid % 32, g = lane / 4, ql = lane % 4;
  const uint32_t lanes = static_cast<uint32_t>(32 * w) << 16;  // this warp's lane quarter
  const bool gathered = kv_gather(p);

  load_q_tile<Tr>(ss, p, b, kvh, row0, ctid);
  ptx::fence_proxy_async_shared();  // generic st.shared -> the MMA's async-proxy reads
  ptx::mbarrier_arrive(&ss.q_full);
  int limit_abs[2];
  row_key_limits<Tr>(p, tr, row0, w, g, limit_abs);

  RowState st;
  st.init();
  const int n = tr.end - tr.begin;
  for (int it = 0; it < n; ++it) {
    // S(it) out of Tensor Memory; its buffer is free for S(it + 2) once every thread has read it.
    ptx::mbarrier_wait_parity(&ss.s_full[it % 2], parity(it / 2));
    ptx::tcgen05_fence_after_thread_sync();
    uint32_t sr[Tr::kBlockN / 2];
    ptx::tcgen05_ld_16x256b<Tr::kBlockN / 8>(tmem + lanes + Tm::s(it % 2), sr);
    ptx::tcgen05_wait_ld(sr);
    ptx::tcgen05_fence_before_thread_sync();
    ptx::mbarrier_arrive(&ss.s_free[it % 2]);
    float s[Tr::kBlockN / 2];
#pragma unroll
    for (int i = 0; i < Tr::kBlockN / 2; ++i) s[i] = __uint_as_float(sr[i]);

    const int key0 = (tr.begin + it) * Tr::kBlockN;
    const int key_limit[2] = {limit_abs[0] - key0, limit_abs[1] - key0};
    float alpha[2];
    const float m_prev[2] = {st.m_i[0], st.m_i[1]};
    online_softmax_tile<Tr::kBlockN>(s, st, key_limit, p.qk_scale, ql, alpha);

    // O *= alpha once P V(it - 1), the last MMA that wrote O, has completed; skipped at it = 0 (the
    // first P V overwrites O) and where no row of the warp changed a finite max (a row with no visible
    // key so far has alpha = 0 but an O row of zeros).
    const bool grew = (alpha[0] != 1.f && m_prev[0] != -INFINITY) || (alpha[1] != 1.f && m_prev[1] != -INFINITY);
    const bool rescale = it > 0 && __any_sync(0xffffffffu, grew);
    if (rescale) {
      ptx::mbarrier_wait_parity(&ss.p_free[(it - 1) % 2], parity((it - 1) / 2));
      ptx::tcgen05_fence_after_thread_sync();
      correct_o<Tr>(tmem + lanes, alpha);
    }
    // P(it) into buffer it % 2 once P V(it - 2) has read it.
    if (it >= 2) ptx::mbarrier_wait_parity(&ss.p_free[it % 2], parity((it - 2) / 2));
    store_p<Tr, kBf16>(ss, it % 2, s, w, g, ql);
    // V rows past the sequence cleared (common/kv_ring.cuh; the 128 softmax threads sync on kBarVTail).
    wait_v_stage<Tr, 128>(ss, tr, it, it % Tr::kStagesV, parity(it / Tr::kStagesV), ctid, gathered);
    ptx::fence_proxy_async_shared();  // P's generic stores -> the MMA's async-proxy reads
    ptx::tcgen05_fence_before_thread_sync();
    ptx::mbarrier_arrive(&ss.p_full[it % 2]);
  }

  // Epilogue: every MMA has completed once P V(n - 1) has (a commit covers all earlier MMAs). P V(n - 2)'s commit
  // is waited for too: a later commit's arrival does not say that an earlier one's has landed, and none may land
  // after the CTA exits (P V(n - 4)'s was waited for before P(n - 2), so the phase is the next one).
  if (n > 0) {
    if (n >= 2) ptx::mbarrier_wait_parity(&ss.p_free[(n - 2) % 2], parity((n - 2) / 2));
    ptx::mbarrier_wait_parity(&ss.p_free[(n - 1) % 2], parity((n - 1) / 2));
    ptx::tcgen05_fence_after_thread_sync();
  }
  float inv_l[2], lse[2];
  finalize_rows(st, inv_l, lse);
#pragma unroll 1
  for (int pass = 0; pass < Tr::kOutPasses; ++pass) {
    float acc[Tr::kOutCols / 2];
    if (n > 0) {
      constexpr int kChunk = Tr::kOutCols >= 128 ? 128 : Tr::kOutCols;  // columns a load (at most .x16)
#pragma unroll
      for (int c = 0; c < Tr::kOutCols; c += kChunk) {
        uint32_t r[kChunk / 2];
        ptx::tcgen05_ld_16x256b<kChunk / 8>(tmem + lanes + Tm::o(pass) + c, r);
        ptx::tcgen05_wait_ld(r);
#pragma unroll
        for (int i = 0; i < kChunk / 2; ++i) acc[c / 2 + i] = __uint_as_float(r[i]);
      }
    } else {
#pragma unroll
      for (int i = 0; i < Tr::kOutCols / 2; ++i) acc[i] = 0.f;
    }
    store_output<Tr, kBf16>(ss, p, acc, inv_l, lse, b, kvh, row0, split, pass, ctid);
  }
}

}  // namespace sm100
}  // namespace fmha
