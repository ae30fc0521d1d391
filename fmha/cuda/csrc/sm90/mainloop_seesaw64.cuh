// fmha sm_90a: the 64-key seesaw over one K/V ring whose stages fill and free by halves (DeepSeek's
// shared latent at D = 512 and 576, FMHA_CONFIG_LATENT_SEESAW64; on 48-key tiles FMHA_CONFIG_LATENT_SEESAW48).
#pragma once

#include <cstdint>
#include <type_traits>

#include "../common/epilogue.cuh"
#include "epilogue_seesaw64.cuh"
#include "mma.cuh"
#include "seesaw_handoff.cuh"

namespace fmha {
namespace sm90 {

// ----------------------------------------------------------------------------
// The seesaw over 64-key tiles (Tr::kSeesaw64)
// ----------------------------------------------------------------------------
// Warpgroup w owns the tiles it = w, w + 2, ... and ring stage w: the ring has two stages and tile it lives in stage
// it % 2 (LATENT_SEESAW48's three stages of 48-key tiles: stage it % 3, trip3 below). As in
// consumer_loop_seesaw, the owner computes S = Q K^T of its tile over the whole head dim (an m64n64k16 chain,
// m64n48k16 on 48-key tiles: its shared-memory operands are as many bytes as its math takes cycles to consume, where
// N = 32 read 1.5x that) and the tile's online softmax, and publishes P(it) and the row state after it; both
// warpgroups accumulate O += P V of every tile, in tile order, over their own 256 output columns, which are the V
// columns of their half of the stage (Tr::kRingHalves: warpgroup 0's P V reads boxes [0, kHalfBoxes), warpgroup 1's
// the rest, which also holds the rope columns of a 576-wide key that only Q K^T reads; on 48-key tiles those are in
// a ring of their own, Tr::kRopeRing, which the owner frees once its Q K^T completed). The owner's Q K^T completes
// before it publishes, so each half has one reader left, which frees it as soon as its P V completed; the producer
// refills it then.
//   trip(o), o = w, w + 2, ... (on entry S(o) has landed and nothing is in flight):
//     softmax(o); publish P(o) and the state (p_full)
//     O *= alpha(o); P V(o); free this warpgroup's half of stage o
//     take the other's P(o+1) and the state after it (p_full wait)
//     O *= alpha(o+1); P V(o+1), and queued behind it Q K^T(o+2) over its first half's boxes once that
//     half landed; free this warpgroup's half of stage o+1 once P V(o+1) completed; Q K^T(o+2) over the
//     second half's boxes once they landed
// A stage is free about one P V after its tile's publish, so its refill overlaps the other tile's softmax
// and P V; a half freed only after the next p_full wait would put a load latency into every tile's chain.
// Buffer reuse (SeesawSmem): P(it) lives in box kQSmemBoxes + it % 2 and the row state in slot it % 2. The owner
// writes them again for it + 2 after taking P(it + 1), which the other warpgroup publishes only after its
// P V(it) completed and it took the state after it.
// No wgmma group is in flight across the loop's back edge (ptxas would serialise them).
// kBalanced: one visit of the balanced schedule (sm90/schedule_balanced.cuh), tiles tr of the unit (b, kvh), whose
// ring positions and hand-off slots continue from pos0 (the visits before it in this CTA) and whose Q is the
// visit-th to land; vis says where its rows go (store_output_visit). Tile it's stage is then
// (pos0 + it) % Tr::kStages and its slot (pos0 + it) % 2, and its owner still warpgroup it % 2.
template <class Tr, bool kBf16, bool kBalanced = false>
__device__ __forceinline__ void consumer_loop_seesaw64(SharedStorage<Tr>& ss, const DecodeParams& p, const TileRange& tr,
                                                       int b, int kvh, int row0, int split, int ctid, int pos0 = 0,
                                                       int visit = 0, const BalancedVisit* vis = nullptr) {
  using Sm = SeesawSmem<Tr>;
  constexpr int kSteps = Tr::kHeadDim / 16;                 // k16 steps of Q K^T
  constexpr int kSmemSteps = kSteps - Tr::kQRegSteps;       // Q from shared memory; the rest from registers
  constexpr int kHalfSteps = Tr::kHalfBoxes * 4;            // the steps over the stage's first half
  static_assert(Tr::kRingHalves && kHalfSteps < kSmemSteps, "the second half's first box: Q from shared memory");
  const int wg = warpgroup_index<Tr>(ctid);
  const int tid_wg = ctid % 128;
  const int w = tid_wg / 32, lane = tid_wg % 32, g = lane / 4, ql = lane % 4;
  const bool gathered = kv_gather(p);

  int limit_abs[2];
  QRegs<Tr> qr;
  consumer_prologue_q_boxes<Tr>(ss, p, tr, b, kvh, row0, ctid, limit_abs, qr, static_cast<uint32_t>(visit) & 1u);
  // The quad lane's column offset folded into the key limits (the softmax then masks with constant
  // columns, ql = 0): per-element columns need a register the 576-wide kernel does not have.
  limit_abs[0] -= 2 * ql;
  limit_abs[1] -= 2 * ql;

  RowState st;  // the state after the latest tile this warpgroup computed or took
  st.init();
  float acc[Tr::kOutCols / 2];
#pragma unroll
  for (int i = 0; i < Tr::kOutCols / 2; ++i) acc[i] = 0.f;
  float s[Tr::kBlockN / 2];
  const int n = tr.end - tr.begin;
  const int unmasked_until = fmha::unmasked_until(p, tr);

  constexpr int kStages = Tr::kStages;
  // Ring position r = pos0 + it: its stage and its barriers' phase.
  auto stage_of = [&](int it) { return kStages == 2 ? (pos0 + it) & 1 : (pos0 + it) % kStages; };
  auto phase_of = [&](int r) {
    return static_cast<uint32_t>(kStages == 2 ? r >> 1 : r / kStages) & 1u;
  };
  // Half h of tile it's stage landed (h = 0: full_k, 1: full_v).
  auto wait_half = [&](int it, int h) {
    const int r = pos0 + it;  // its ring position
    if (h == 0)
      wait_full_stage(&ss.full_k[stage_of(it)], phase_of(r), r, kProbeKFullWait, ctid, gathered);
    else
      wait_full_stage(&ss.full_v[stage_of(it)], phase_of(r), r, kProbeVFullWait, ctid, gathered);
  };
  // S = Q K^T of tile it over the stage's first half (kSecond = false: steps [0, kHalfSteps), once that half
  // landed) or its second half (the rest, once it landed; the last steps take Q from registers). No commit.
  auto issue_qk_half = [&](int it, auto second) {
    constexpr bool kSecond = decltype(second)::value;
    constexpr uint32_t kSbo = Tr::kSwizzleSbo, kLbo = Tr::kLboUnused;
    const ptx::SmemDescSw128 da(ptx::smem_addr(&ss.q[0][0]), kLbo, kSbo);
    const ptx::SmemDescSw128 db(ptx::smem_addr(&ss.k[stage_of(it)][0][0]), kLbo, kSbo);
    wait_half(it, kSecond ? 1 : 0);  // (ptxas fences the chain after the wait's loop: C7519)
#pragma unroll
    for (int kk = kSecond ? kHalfSteps : 0; kk < (kSecond ? kSmemSteps : kHalfSteps); ++kk) {
      const uint32_t in_row = (kk % 4) * 32;
      ptx::wgmma_ss<Tr::kBlockN, kBf16>(s, da.at((kk / 4) * Tr::kQBoxBytes + in_row),
                                        db.at((kk / 4) * Tr::kKvBoxBytes + in_row), kk > 0 ? 1 : 0);
    }
    if constexpr (kSecond) {
#pragma unroll
      for (int kk = kSmemSteps; kk < kSteps; ++kk) {
        if (kk / 4 < Tr::kStageBoxes) {
          ptx::wgmma_rs_kmajor<Tr::kBlockN, kBf16>(s, qr.r[kk - kSmemSteps],
                                                   db.at((kk / 4) * Tr::kKvBoxBytes + (kk % 4) * 32), 1);
        } else if constexpr (Tr::kRopeRing) {  // the rope box, in its own ring
          const ptx::SmemDescSw128 dr(ptx::smem_addr(&ss.rope[(pos0 + it) & (Tr::kRopeStages - 1)][0][0]), kLbo, kSbo);
          ptx::wgmma_rs_kmajor<Tr::kBlockN, kBf16>(s, qr.r[kk - kSmemSteps], dr.at((kk % 4) * 32), 1);
        }
      }
    }
  };
  // Tr::kRopeRing: the owner's Q K^T of tile it completed, so its rope stage is free. (Its stage is
  // Tr::rope_stage(pos0 + it), written out here and above: the call changes this loop's SASS.)
  auto free_rope = [&](int it) {
    if constexpr (Tr::kRopeRing) release_stage(&ss.empty_rope[(pos0 + it) & (Tr::kRopeStages - 1)], lane);
  };
  using True = std::integral_constant<bool, true>;
  using False = std::integral_constant<bool, false>;
  // S = Q K^T of tile it, one group: the first half's boxes as soon as it landed, then the second's.
  auto issue_qk = [&](int it) {
    issue_qk_half(it, False{});
    issue_qk_half(it, True{});
    ptx::wgmma_commit_group();
  };
  // O[:, own columns] += P(it) V(it), one group; V is this warpgroup's half of the stage.
  auto issue_pv = [&](int it) {
    Sm::template issue_pv<kBf16>(ss, pos0 + it, acc, &ss.k[stage_of(it)][wg * (Tr::kOutCols / Tr::kBoxCols)][0]);
  };
  // This warpgroup's P V of tile it completed: its half of the stage has no reader left.
  auto free_half = [&](int it) {
    const int stage = stage_of(it);
    release_stage(wg == 0 ? &ss.empty_k[stage] : &ss.empty_v[stage], lane);
  };
  // Own tile it, S landed: masked online softmax (s becomes P); P into its box; the V rows past the
  // sequence cleared in both halves (see zero_v_tail: every Q K^T of the stage has completed, and both
  // P V follow the publish); then the state, published.
  auto softmax_publish = [&](int it, float (&alpha)[2]) {
    softmax_ring_tile<Tr>(s, st, p, tr, it, limit_abs, unmasked_until, 0, alpha);
    Sm::template store_p<kBf16>(ss, pos0 + it, s, w, g, ql);
    clear_v_tail<Tr, 128>(ss, tr, it, stage_of(it), tid_wg);
    Sm::publish(ss, pos0 + it, st, alpha, tid_wg);
  };
  auto take = [&](int it, float (&alpha)[2]) { Sm::take(ss, pos0 + it, st, alpha, tid_wg); };  // the other's tile it
  // Own tile o, S landed: its softmax and publish, then O *= alpha(o) and P V(o), waited for, and this warpgroup's
  // half of its stage freed.
  auto own_tile = [&](int o) {
    float alpha[2];
    softmax_publish(o, alpha);
    rescale_acc<Tr::kSkipUnitRescale>(acc, alpha);
    fence_regs(acc);
    fence_regs(s);
    ptx::wgmma_fence();
    issue_pv(o);
    ptx::wgmma_wait_group<0>();
    fence_regs(acc);
    fence_regs(s);
    free_half(o);
  };
  // Compile-time shape of a trip: kNext: the other's tile o + 1 exists; kNextQk: so does o + 2, whose
  // Q K^T is issued. Each P V is waited for and its half freed before the next p_full wait and before a wait
  // for a second half, so that no refill waits behind a load; only the wait for the first half of o + 2's
  // stage, which was refilled about a tile period earlier, lies between P V(o+1) and its release.
  auto trip = [&](int o, auto next, auto next_qk) {
    constexpr bool kNext = decltype(next)::value, kNextQk = decltype(next_qk)::value;
    own_tile(o);
    if constexpr (kNext) {
      float alpha_next[2];
      take(o + 1, alpha_next);
      rescale_acc<Tr::kSkipUnitRescale>(acc, alpha_next);
      wait_half(o + 1, wg);  // (landed before the owner's Q K^T; the proxy fence of a gathered stage)
      fence_regs(acc);
      fence_regs(s);
      ptx::wgmma_fence();
      issue_pv(o + 1);
      if constexpr (kNextQk) {
        // Q K^T(o+2)'s first half queued behind P V(o+1), so that the tensor pipe does not drain between
        // them; the half of o+1 is freed as soon as its P V completed, before the second half is issued.
        issue_qk_half(o + 2, False{});
        ptx::wgmma_commit_group();
        ptx::wgmma_wait_group<1>();
        fence_regs(acc);
        free_half(o + 1);
        issue_qk_half(o + 2, True{});
        ptx::wgmma_commit_group();
        ptx::wgmma_wait_group<0>();
        fence_regs(s);
      } else {
        ptx::wgmma_wait_group<0>();
        fence_regs(acc);
        fence_regs(s);
        free_half(o + 1);
      }
    }
  };

  // Three stages (48-key tiles): tile o + 2 reuses the stage of o - 1, whose halves were freed after both
  // P V(o - 1), so Q K^T(o+2) is issued before the p_full wait for o + 1 and runs during the other
  // warpgroup's softmax.
  //   trip(o): softmax(o), publish; P V(o); free; Q K^T(o+2); take P(o+1); P V(o+1); free
  auto trip3 = [&](int o, auto next, auto next_qk) {
    constexpr bool kNext = decltype(next)::value, kNextQk = decltype(next_qk)::value;
    own_tile(o);
    if constexpr (kNextQk) {
      ptx::wgmma_fence();
      issue_qk(o + 2);
    }
    if constexpr (kNext) {
      float alpha_next[2];
      take(o + 1, alpha_next);
      rescale_acc<Tr::kSkipUnitRescale>(acc, alpha_next);
      wait_half(o + 1, wg);
      fence_regs(acc);
      ptx::wgmma_fence();
      issue_pv(o + 1);
      ptx::wgmma_wait_group<0>();
      fence_regs(acc);
      fence_regs(s);
      free_half(o + 1);
      if constexpr (kNextQk) free_rope(o + 2);
    }
  };

  int o = wg;
  if (o < n) {  // S of this warpgroup's first tile
    fence_regs(s);
    ptx::wgmma_fence();
    issue_qk(o);
    ptx::wgmma_wait_group<0>();
    fence_regs(s);
    free_rope(o);
  }
  if (wg == 1 && n > 0) {  // tile 0 is warpgroup 0's: its P V over this warpgroup's columns (O is zero)
    float alpha[2];
    take(0, alpha);
    wait_half(0, 1);
    fence_regs(acc);
    fence_regs(s);
    ptx::wgmma_fence();
    issue_pv(0);
    ptx::wgmma_wait_group<0>();
    fence_regs(acc);
    fence_regs(s);
    free_half(0);
  }
  if constexpr (kStages == 3) {
    for (; o + 2 < n; o += 2) trip3(o, True{}, True{});
    if (o + 1 < n)
      trip3(o, True{}, False{});
    else if (o < n)
      trip3(o, False{}, False{});
  } else {
    for (; o + 2 < n; o += 2) trip(o, True{}, True{});
    if (o + 1 < n)
      trip(o, True{}, False{});
    else if (o < n)
      trip(o, False{}, False{});
  }

  if (ctid == 0) probe_timeline(kTimelineLoopDone);  // (each warpgroup's loop end: what its epilogue takes)
  if (ctid == 128) probe_timeline(kTimelineLoopDoneWg1);
  if constexpr (kBalanced) {
    if (ctid == 0) probe_stamp(pos0, kProbeVisitEpilogue);
    store_output_visit<Tr, kBf16>(p, acc, st, *vis, row0, wg, tid_wg);
    if (ctid == 0) probe_stamp(pos0, kProbeVisitEnd);
    if (vis->piece == 0 && row0 == 0 && ctid == 0) {  // the unit's descriptor (combine_balanced_kernel), once
      int4* desc = reinterpret_cast<int4*>(p.balanced_desc) + vis->unit;
      *desc = make_int4(vis->pieces, vis->first_cta, vis->first_mid, 0);
    }
    // This thread is done with the visit's Q and P boxes (its last wgmma completed) and with SharedStorage::visit:
    // the next visit may be written and its Q land. Every thread arrives, each releasing its own reads.
    ptx::fence_proxy_async_shared();  // (P's generic stores before the TMA's writes)
    ptx::mbarrier_arrive(&ss.q_empty);
  } else if (p.num_splits == 1) {
    store_output_staged<Tr, kBf16>(ss, p, acc, st, b, kvh, epilogue_row0<Tr>(p, row0), wg, tid_wg);
  } else if (merges_pair_in_registers<Tr>(p)) {
    float inv_l[2], lse[2];
    finalize_rows(st, inv_l, lse);
    store_output_cluster_pair<Tr, kBf16>(ss, p, acc, inv_l, lse, b, kvh, epilogue_row0<Tr>(p, row0),
                                         epilogue_split<Tr>(p, split), wg, tid_wg);
  } else {
    finish_output<Tr, kBf16>(ss, p, acc, st, b, kvh, row0, split, wg, tid_wg);
  }
  if (ctid == 128) probe_timeline(kTimelineEpilogueDoneWg1);
}

}  // namespace sm90
}  // namespace fmha
