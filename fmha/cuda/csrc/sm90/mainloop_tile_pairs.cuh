// fmha sm_90a: tile pairs over the latent ring, loaded by the consumers themselves (DeepSeek's shared latent
// at D = 512 and 576, FMHA_CONFIG_LATENT_TILE_PAIRS).
#pragma once

#include <cuda.h>  // CUtensorMap (types only)

#include <cstdint>
#include <type_traits>

#include "../common/epilogue.cuh"
#include "mainloop_seesaw.cuh"  // SeesawSmem: the P tiles and the P V that reads one
#include "mma.cuh"

namespace fmha {
namespace sm90 {

// ----------------------------------------------------------------------------
// Tile pairs with no producer (Tr::kTilePairs)
// ----------------------------------------------------------------------------
// The CTA is the two consumer warpgroups alone. The ring has two 64-key stages; tile it lives in stage it % 2,
// and warpgroup w owns the tiles of stage w: it computes their S = Q K^T over the whole head dim and their
// softmax. Both accumulate O += P V of every tile over their own 256 output columns, which are the V
// columns of boxes [0, kLeft) of a stage for warpgroup 0 and [kLeft, 2 kLeft) for warpgroup 1 (the rope box of
// a 576-wide key, box 8, is read by Q K^T only). Tiles go in pairs (t0, t1) = (2k, 2k + 1), whose Q K^T run
// side by side, each warpgroup on its own stage.
//
// Loads: each box of a stage has its own full barrier (SharedStorage::full_box), and whichever warpgroup reads
// a box last refills it, from one thread, as soon as its wgmmas over the box completed: warpgroup 0 the boxes
// [0, kLeft) of both stages (its P V reads them after the owner's Q K^T), warpgroup 1 the rest. No empty
// barriers, no producer warp: a refill leaves as soon as its box is free, and the consumers get every register.
// Q K^T waits box by box, so it starts on the first box while later ones land.
//
// Pair k, warpgroup 0 (W0) and warpgroup 1 (W1), S(t0) and S(t1) landed on entry:
//   W0: softmax(t0) at the pair's incoming reference max; publish (m, alpha) [kPairMax0]; P V(t0) from
//       registers; wait for W1's reference [kPairMax1]; refill stage 0's left boxes with t0 + 2 once P V(t0)
//       completed; P(t0) rescaled to W1's reference into its box [kPairP0]; wait [kPairP1]; P V(t1) from W1's
//       box; Q K^T(t0 + 2) over the left boxes, refill stage 1's left boxes with t1 + 2 once P V(t1)
//       completed, Q K^T(t0 + 2) over the rest.
//   W1: wait [kPairMax0]; softmax(t1) from W0's reference, publish the new one and P(t0)'s factor to it
//       [kPairMax1]; P(t1) into its box; P V(t1) from registers; wait [kPairP0]; P V(t0) from W0's box
//       [kPairP1]; refill stage 1's right boxes with t1 + 2 once P V(t1) completed and stage 0's right boxes
//       with t0 + 2 once P V(t0) did; Q K^T(t1 + 2), its own boxes first.
// So the reference max moves along the chain t0 -> t1 -> t0 + 2 and both warpgroups' accumulators stay at the
// same reference; each keeps its own row sums, added once at the end. The loads of a pair's next tiles leave
// while the tensor pipe works on this pair's P V, and where two row blocks read a sequence's latent the later
// reader finds them in L2, so a refill that the next Q K^T waits for is short.
//
// Buffer reuse: P(t) in box kQSmemBoxes + t % 2 (SeesawSmem::p_box), the row states in s_exchange slots 0
// (W0's) and 1 (W1's). W0 writes P(t0) and slot 0 of pair k + 1 after waiting for kPairMax1 of pair k + 1, which W1
// arrives after its P V(t0) of pair k completed and it read slot 0; W1 writes P(t1) and slot 1 after
// kPairMax0 of pair k + 1, which W0 arrives after its P V(t1) completed and it read slot 1. Each hand-off is an
// mbarrier of 128 arrivals (release / acquire), phase k % 2; a warpgroup arrives on one for pair k + 1 only after
// waiting on the other's for pair k, so no phase runs ahead of its waiter.
// No wgmma group is in flight across a pair's end (ptxas would serialise them).
enum PairBarrier : int {
  kPairMax0 = 0,  // W0 -> W1: the reference after t0 and its alpha, slot 0
  kPairMax1 = 1,  // W1 -> W0: the reference after t1 and P(t0)'s factor to it, slot 1
  kPairP0 = 2,    // W0 -> W1: P(t0) at the pair's reference, in its box; V(t0)'s tail cleared
  kPairP1 = 3,    // W1 -> W0: P(t1) in its box, V(t1)'s tail cleared
};

// Code size: one body a warpgroup for every pair but a lone last tile, the next tiles' existence and the paging
// decided at run time (by the issuer alone, or around whole wgmma groups), so that the loop stays in the
// instruction cache: compile-time variants of each made the kernel 3.4x the 64-key seesaw's code, and a CTA of 16
// tiles lost about a third of its issue cycles to instruction fetch.
template <class Tr, bool kBf16>
__device__ __forceinline__ void consumer_loop_tile_pairs(SharedStorage<Tr>& ss, const CUtensorMap* tmap,
                                                         const DecodeParams& p, const TileRange& tr, int b, int kvh,
                                                         int row0, int split, int ctid) {
  using Sm = SeesawSmem<Tr>;
  using True = std::integral_constant<bool, true>;
  using False = std::integral_constant<bool, false>;
  constexpr int kSteps = Tr::kHeadDim / 16;            // k16 steps of Q K^T
  constexpr int kSmemSteps = kSteps - Tr::kQRegSteps;  // Q from shared memory; the rest from registers
  constexpr int kLeft = Tr::kBoxesV / 2;               // warpgroup 0's V boxes; the rest are warpgroup 1's
  using Left0 = std::integral_constant<int, 0>;
  using LeftEnd = std::integral_constant<int, kLeft>;
  using BoxesEnd = std::integral_constant<int, Tr::kBoxes>;
  static_assert(Tr::kTilePairs && Tr::kBlockN == 64 && kLeft * Tr::kBoxCols == Tr::kOutCols,
                "tile pairs: 64-key tiles");
  const int wg = warpgroup_index<Tr>(ctid);
  const int tid_wg = ctid % 128;
  const int w = tid_wg / 32, lane = tid_wg % 32, g = lane / 4, ql = lane % 4;
  const bool issuer = tid_wg == 0;  // the thread of each warpgroup that issues its loads
  const int n = tr.end - tr.begin;
  const int head_major = p.k_head_major;
  const uint64_t policy = ptx::create_policy_evict_first();  // the latent is streamed once
  const bool paged = p.block_table != nullptr;
  PagedTile<Tr> pages[2];  // paged, the issuers: the pages of the two tiles the pair refills

  // Boxes [kB0, kB1) of tile it into stage it % 2, each completing its own full barrier (the issuer only).
  auto load_boxes = [&](int it, const PagedTile<Tr>& pg, auto b0, auto b1) {
    constexpr int kB0 = decltype(b0)::value, kB1 = decltype(b1)::value;
    auto& stage = ss.k[it & 1];
    const int token0 = (tr.begin + it) * Tr::kBlockN;
#pragma unroll
    for (int bx = kB0; bx < kB1; ++bx) {
      uint64_t* full = &ss.full_box[it & 1][bx];
      ptx::mbarrier_arrive_expect_tx(full, Tr::kKvBoxBytes);
      if (paged) {
#pragma unroll
        for (int i = 0; i < PagedTile<Tr>::kMaxBoxes; ++i) {
          const int r = i * p.page_box_rows;
          if (r >= Tr::kBlockN) break;
          const PagedRow pr = pg.box[i];
          const int c1 = head_major ? kvh : pr.row, c2 = head_major ? pr.row : kvh;
          ptx::tma_load_4d_hint(&stage[bx][r * Tr::kBoxCols], tmap, full, bx * Tr::kBoxCols, c1, c2, pr.block, policy);
        }
      } else {
#pragma unroll
        for (int r = 0; r < Tr::kBlockN; r += Tr::kTmaRows) {
          const int c1 = head_major ? kvh : token0 + r, c2 = head_major ? token0 + r : kvh;
          ptx::tma_load_4d_hint(&stage[bx][r * Tr::kBoxCols], tmap, full, bx * Tr::kBoxCols, c1, c2, b, policy);
        }
      }
    }
  };
  auto lookup = [&](PagedTile<Tr>& pg, int it) {
    if (paged) pg.lookup(p, b, (tr.begin + it) * Tr::kBlockN);
  };

  // The first two tiles, whole, before Q: their loads overlap Q's.
  if (ctid == 0) {
#pragma unroll
    for (int it = 0; it < 2; ++it)
      if (it < n) {
        lookup(pages[it], it);
        load_boxes(it, pages[it], Left0{}, BoxesEnd{});
      }
  }
  int limit_abs[2];
  consumer_prologue<Tr>(ss, p, tr, b, kvh, row0, ctid, limit_abs);
  // The quad lane's column offset folded into the key limits (the softmax masks with constant columns).
  limit_abs[0] -= 2 * ql;
  limit_abs[1] -= 2 * ql;
  QRegs<Tr> qr;
  load_q_regs<Tr>(qr, p, b, kvh, row0, wg, tid_wg);

  RowState st;  // m_i: the reference both warpgroups share after each pair; l_i: this warpgroup's own sums
  st.init();
  float acc[Tr::kOutCols / 2];
#pragma unroll
  for (int i = 0; i < Tr::kOutCols / 2; ++i) acc[i] = 0.f;
  float s[Tr::kBlockN / 2];
  uint32_t pa[Tr::kBlockN / 16][4];  // P of the own tile as the P V wgmma's A fragments
  const int unmasked_until = p.causal ? tr.L - p.T + 1 : tr.L;  // keys below are visible to every row
  float4* const slot = ss.s_exchange;  // [0, 128): slot 0, [128, 256): slot 1, [256, 512): the row sums

  // S = Q K^T of tile it over boxes [kB0, kB1), each once it landed (no commit); kFirst: the chain's first steps.
  auto issue_qk = [&](int it, auto b0, auto b1, auto first) {
    constexpr int kB0 = decltype(b0)::value, kB1 = decltype(b1)::value;
    constexpr bool kFirst = decltype(first)::value;
    constexpr uint32_t kSbo = 8 * Tr::kRowBytes;  // 8-row core-matrix groups: 1024 B
    const ptx::SmemDescSw128 da(ptx::smem_addr(&ss.q[0][0]), 16, kSbo);
    const ptx::SmemDescSw128 db(ptx::smem_addr(&ss.k[it & 1][0][0]), 16, kSbo);
    const uint32_t parity = static_cast<uint32_t>(it >> 1) & 1u;
#pragma unroll
    for (int bx = kB0; bx < kB1; ++bx) {
      ptx::mbarrier_wait_parity(&ss.full_box[it & 1][bx], parity);  // (ptxas fences the chain after it: C7519)
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int kk = 4 * bx + j;
        const int scale_d = kFirst && bx == kB0 && j == 0 ? 0 : 1;
        const uint64_t kdesc = db.at(bx * Tr::kKvBoxBytes + j * 32);
        if (kk < kSmemSteps)
          ptx::wgmma_ss<Tr::kBlockN, kBf16>(s, da.at(bx * Tr::kQBoxBytes + j * 32), kdesc, scale_d);
        else
          ptx::wgmma_rs_kmajor<Tr::kBlockN, kBf16>(s, qr.r[kk >= kSmemSteps ? kk - kSmemSteps : 0], kdesc, scale_d);
      }
    }
  };
  // O[:, own columns] += P(it) V(it) with P from registers (the own tile), one group.
  auto issue_pv_own = [&](int it) {
    pv_gemm<Tr, kBf16>(acc, pa, ss, it & 1, wg);
    ptx::wgmma_commit_group();
  };
  // ... with P from the other warpgroup's box (its tile), one group.
  auto issue_pv_other = [&](int it) {
    Sm::template issue_pv<kBf16>(ss, it, acc, &ss.k[it & 1][wg * kLeft][0]);
  };
  auto pack_p = [&]() {
#pragma unroll
    for (int kk = 0; kk < Tr::kBlockN / 16; ++kk)
#pragma unroll
      for (int j = 0; j < 4; ++j) pa[kk][j] = pack2<kBf16>(s[8 * kk + 2 * j], s[8 * kk + 2 * j + 1]);
  };
  // The own tile it's V rows past the sequence cleared in both halves (see zero_v_tail), after its Q K^T and
  // before any P V reads the stage: the own P V follows, the other's waits for this warpgroup's P hand-off.
  auto clear_v_tail = [&](int it) {
    const int valid = max(tr.L - (tr.begin + it) * Tr::kBlockN, 0);  // uniform: the barrier is safe
    if (valid < Tr::kBlockN) {
      zero_v_tail<Tr, 128>(ss, it & 1, valid, tid_wg);
      ptx::fence_proxy_async_shared();
      ptx::named_barrier_sync(wg == 0 ? kBarVTail : kBarVTailWg1, 128);
    }
  };
  auto arrive = [&](int bar) { ptx::mbarrier_arrive(&ss.pair_bar[bar]); };
  auto wait = [&](int bar, int k) { ptx::mbarrier_wait_parity(&ss.pair_bar[bar], static_cast<uint32_t>(k) & 1u); };

  // Warpgroup 0's share of the pair at t0 (its S landed). kHas1: t0 + 1 exists; has2, has3: t0 + 2, t0 + 3 do.
  auto pair_wg0 = [&](int t0, auto has1, bool has2, bool has3) {
    constexpr bool kHas1 = decltype(has1)::value;
    const int k = t0 >> 1;
    if (has2 && issuer) lookup(pages[0], t0 + 2);
    if (has3 && issuer) lookup(pages[1], t0 + 3);
    float alpha[2];
    softmax_ring_tile<Tr>(s, st, p, tr, t0, limit_abs, unmasked_until, 0, alpha);
    slot[tid_wg] = make_float4(st.m_i[0], st.m_i[1], alpha[0], alpha[1]);
    arrive(kPairMax0);
    rescale_acc<Tr::kSkipUnitRescale>(acc, alpha);
    clear_v_tail(t0);
    pack_p();
    fence_regs(acc);
    ptx::wgmma_fence();
    issue_pv_own(t0);
    float scale[2] = {1.f, 1.f};  // P(t0)'s factor to the pair's reference
    if constexpr (kHas1) {
      wait(kPairMax1, k);
      const float4 m1 = slot[128 + tid_wg];
      st.m_i[0] = m1.x;
      st.m_i[1] = m1.y;
      scale[0] = m1.z;
      scale[1] = m1.w;
    }
    ptx::wgmma_wait_group<0>();
    fence_regs(acc);
    if (has2 && issuer) load_boxes(t0 + 2, pages[0], Left0{}, LeftEnd{});  // this warpgroup read them last
    if constexpr (kHas1) {
#pragma unroll
      for (int i = 0; i < Tr::kBlockN / 2; ++i) s[i] *= scale[frag_row_half(i)];
      st.l_i[0] *= scale[0];
      st.l_i[1] *= scale[1];
    }
    Sm::template store_p<kBf16>(ss, t0, s, w, g, ql);
    ptx::fence_proxy_async_shared();  // P: generic stores -> the other warpgroup's wgmma reads
    arrive(kPairP0);
    if constexpr (kHas1) {
      rescale_acc<Tr::kSkipUnitRescale>(acc, scale);
      wait(kPairP1, k);
      fence_regs(acc);
      fence_regs(s);
      ptx::wgmma_fence();
      issue_pv_other(t0 + 1);
      if (has2) {
        issue_qk(t0 + 2, Left0{}, LeftEnd{}, True{});
        ptx::wgmma_commit_group();
        ptx::wgmma_wait_group<1>();  // P V(t1) completed: stage 1's left boxes are free
        fence_regs(acc);
        if (has3 && issuer) load_boxes(t0 + 3, pages[1], Left0{}, LeftEnd{});
        issue_qk(t0 + 2, LeftEnd{}, BoxesEnd{}, False{});
        ptx::wgmma_commit_group();
        ptx::wgmma_wait_group<0>();
        fence_regs(s);
      } else {
        ptx::wgmma_wait_group<0>();
        fence_regs(acc);
      }
    }
  };

  // Warpgroup 1's share of the pair at t0 (S(t0 + 1) landed where kHas1).
  auto pair_wg1 = [&](int t0, auto has1, bool has2, bool has3) {
    constexpr bool kHas1 = decltype(has1)::value;
    const int k = t0 >> 1;
    if (has2 && issuer) lookup(pages[0], t0 + 2);
    if (has3 && issuer) lookup(pages[1], t0 + 3);
    wait(kPairMax0, k);
    const float4 m0 = slot[tid_wg];
    const float alpha0[2] = {m0.z, m0.w};
    st.m_i[0] = m0.x;
    st.m_i[1] = m0.y;
    st.l_i[0] *= alpha0[0];
    st.l_i[1] *= alpha0[1];
    if constexpr (kHas1) {
      float scale[2];
      softmax_ring_tile<Tr>(s, st, p, tr, t0 + 1, limit_abs, unmasked_until, 0, scale);
      slot[128 + tid_wg] = make_float4(st.m_i[0], st.m_i[1], scale[0], scale[1]);
      arrive(kPairMax1);
      const float f[2] = {alpha0[0] * scale[0], alpha0[1] * scale[1]};
      rescale_acc<Tr::kSkipUnitRescale>(acc, f);
      clear_v_tail(t0 + 1);
      pack_p();
      Sm::template store_p<kBf16>(ss, t0 + 1, s, w, g, ql);
      ptx::fence_proxy_async_shared();  // P: generic stores -> the other warpgroup's wgmma reads
      fence_regs(acc);
      ptx::wgmma_fence();
      issue_pv_own(t0 + 1);
      wait(kPairP0, k);
      issue_pv_other(t0);
      arrive(kPairP1);
      ptx::wgmma_wait_group<1>();  // P V(t1) completed: stage 1's right boxes are free
      if (has3 && issuer) load_boxes(t0 + 3, pages[1], LeftEnd{}, BoxesEnd{});
      ptx::wgmma_wait_group<0>();  // P V(t0) completed: stage 0's right boxes are free
      fence_regs(acc);
      if (has2 && issuer) load_boxes(t0 + 2, pages[0], LeftEnd{}, BoxesEnd{});
      if (has3) {
        fence_regs(s);
        ptx::wgmma_fence();
        issue_qk(t0 + 3, LeftEnd{}, BoxesEnd{}, True{});  // its own refills first
        issue_qk(t0 + 3, Left0{}, LeftEnd{}, False{});
        ptx::wgmma_commit_group();
        ptx::wgmma_wait_group<0>();
        fence_regs(s);
      }
    } else {  // the last tile is warpgroup 0's: its P V over this warpgroup's columns
      rescale_acc<Tr::kSkipUnitRescale>(acc, alpha0);
      wait(kPairP0, k);
      fence_regs(acc);
      ptx::wgmma_fence();
      issue_pv_other(t0);
      ptx::wgmma_wait_group<0>();
      fence_regs(acc);
    }
  };

  if (wg < n) {  // S of this warpgroup's first tile
    fence_regs(s);
    ptx::wgmma_fence();
    issue_qk(wg, Left0{}, BoxesEnd{}, True{});
    ptx::wgmma_commit_group();
    ptx::wgmma_wait_group<0>();
    fence_regs(s);
  }
  auto run = [&](auto pair) {
    int t0 = 0;
    for (; t0 + 1 < n; t0 += 2) pair(t0, True{}, t0 + 2 < n, t0 + 3 < n);
    if (t0 < n) pair(t0, False{}, false, false);
  };
  if (wg == 0) run(pair_wg0);
  else run(pair_wg1);

  // Both warpgroups' row sums at the shared reference.
  slot[256 + 128 * wg + tid_wg] = make_float4(st.l_i[0], st.l_i[1], 0.f, 0.f);
  ptx::named_barrier_sync(kBarPairSums, 256);
  const float4 other = slot[256 + 128 * (wg ^ 1) + tid_wg];
  st.l_i[0] += other.x;
  st.l_i[1] += other.y;
  finish_output<Tr, kBf16>(ss, p, acc, st, b, kvh, row0, split, wg, tid_wg);
}

}  // namespace sm90
}  // namespace fmha
