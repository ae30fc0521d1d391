// fmha sm_90a: the seesaw at D >= 512: two consumer warpgroups take turns over the tiles.
#pragma once

#include <cstdint>
#include <type_traits>

#include "../common/epilogue.cuh"
#include "mma.cuh"
#include "seesaw_handoff.cuh"

namespace fmha {
namespace sm90 {

// ----------------------------------------------------------------------------
// D >= 512: the two consumer warpgroups take turns (FMHA_CONFIG_SEESAW, FMHA_CONFIG_LATENT_SEESAW)
// ----------------------------------------------------------------------------
// Warpgroup w owns the tiles it = w, w + 2, ... (ring positions): it computes their S = Q K^T over the
// whole head dim (separate rings: the tile's K stage is read by it alone, empty_k counts its 4 warps; one
// ring: both warpgroups' P V read it, and each frees it after its P V) and their online
// softmax, and publishes P(it) and the row state after the tile (m_i, l_i, alpha) in shared memory
// (SeesawSmem). Both warpgroups accumulate O += P V of every tile, in tile order, over their own 256
// output columns. The softmax of tile it needs the state after it - 1, so the softmax chain alternates
// between the warpgroups, and each warpgroup's Q K^T of its next tile runs on the tensor core while
// the other one is in its softmax: no score exchange, and no warpgroup waits for its own Q K^T.
//   trip(o), o = w, w + 2, ... (on entry nothing is in flight and S(o) has landed):
//     other step o - 1   wait for the other's P(o-1) (p_full), take its row state,
//                        O *= alpha(o-1), issue P V(o-1)
//     own step o         softmax(o) while P V(o-1) runs; publish P(o) and the state (p_full);
//                        wait for P V(o-1); O *= alpha(o); issue P V(o) and Q K^T(o+2); wait for both
// The hand-off is an mbarrier, not a named barrier's arrive / sync pair: compute-sanitizer's racecheck
// reported the row state's stores and loads as races with bar.arrive, and mbarrier arrive
// (release) / wait (acquire) orders them in the PTX memory model for the tool and the hardware alike.
// A publish never runs a phase ahead of the wait: publishing it + 2 needs the other's P(it + 1), which
// it publishes after taking P(it).
// No wgmma group is in flight across the loop's back edge (ptxas would serialise them).
// Buffer reuse: P(it) lives in buffer it % 4. It overwrites P(it-4), whose last reader, the other
// warpgroup's P V(it-4), completed in that warpgroup's trip before it published P(it-1), which the
// writer waited for (three buffers would do; four make two per box). The row state of tile it is in slot
// it % 2: it overwrites that of it-2, which the other warpgroup took before publishing it-1.
template <class Tr, bool kBf16>
__device__ __forceinline__ void consumer_loop_seesaw(SharedStorage<Tr>& ss, const DecodeParams& p, const TileRange& tr,
                                                     int b, int kvh, int row0, int split, int ctid) {
  using Sm = SeesawSmem<Tr>;
  const int wg = warpgroup_index<Tr>(ctid);
  const int tid_wg = ctid % 128;
  const int w = tid_wg / 32, lane = tid_wg % 32, g = lane / 4, ql = lane % 4;

  int limit_abs[2];
  consumer_prologue<Tr>(ss, p, tr, b, kvh, row0, ctid, limit_abs);
  QRegs<Tr> qr;
  load_q_regs<Tr>(qr, p, b, kvh, row0, wg, tid_wg);

  RowState st;  // the state after the latest tile this warpgroup computed or took
  st.init();
  float acc[Tr::kOutCols / 2];
#pragma unroll
  for (int i = 0; i < Tr::kOutCols / 2; ++i) acc[i] = 0.f;
  float s[Tr::kBlockN / 2];
  const int n = tr.end - tr.begin;
  const int unmasked_until = fmha::unmasked_until(p, tr);

  auto wait_k = [&](int it) { wait_k_tile<Tr>(ss, it, ctid, kv_gather(p)); };
  auto issue_qk = [&](int it) {  // S = Q K^T of ring position it (K landed), one group
    qk_gemm<Tr, kBf16>(s, ss, it % Tr::kStages, 0, &qr);
    ptx::wgmma_commit_group();
  };
  auto issue_pv = [&](int it) {  // O[:, own columns] += P(it) V(it), one group
    Sm::template issue_pv<kBf16>(ss, it, acc, &ss.v_stage(it % Tr::kStagesV)[wg * (Tr::kOutCols / Tr::kBoxCols)][0]);
  };
  // V(it) landed. The owner of tile it also clears V's rows past the sequence (see zero_v_tail) for both
  // warpgroups, before it publishes P(it): the other one's P V(it) follows its p_full wait. (A barrier of
  // both warpgroups there would be reached from two different instructions, which bar.sync forbids.)
  auto wait_v = [&](int it, bool owner) { wait_v_tile<Tr, 128>(ss, tr, it, ctid, kv_gather(p), tid_wg, owner); };
  // Own tile it, S landed: free its K stage, masked online softmax (s becomes P), publish P and the state.
  auto softmax_publish = [&](int it, float (&alpha)[2]) {
    if constexpr (!Tr::kSharedKv) {  // (one ring: the stage is released after both warpgroups' P V)
      fence_regs(s);
      release_stage(&ss.empty_k[it % Tr::kStages], lane);
      fence_regs(s);  // keep the arrive ahead of the softmax
    }
    softmax_ring_tile<Tr>(s, st, p, tr, it, limit_abs, unmasked_until, ql, alpha);
    Sm::template store_p<kBf16>(ss, it, s, w, g, ql);
    wait_v(it, true);
    Sm::publish(ss, it, st, alpha, tid_wg);
  };
  // The other's tile it: wait until it published P(it), take the row state, O *= alpha, issue P V(it).
  auto take_issue_pv = [&](int it) {
    float alpha[2];
    Sm::take(ss, it, st, alpha, tid_wg);
    rescale_acc<Tr::kSkipUnitRescale>(acc, alpha);
    wait_v(it, false);
    fence_regs(acc);
    ptx::wgmma_fence();
    issue_pv(it);
  };
  auto drain_pv = [&](int it) {  // every group landed; P V(it) was the last reader of V(it) here
    ptx::wgmma_wait_group<0>();
    fence_regs(acc);
    fence_regs(s);
    release_v_stage<Tr>(ss, it % Tr::kStagesV, lane);
  };
  // Compile-time shape of a trip: kOther: has the other step (all but warpgroup 0's first); kNextQk: Q K^T(o+2)
  // is issued (o + 2 < n). Each wgmma issue is unconditional between its fence and its wait.
  auto trip = [&](int o, auto other, auto next_qk) {
    constexpr bool kOther = decltype(other)::value, kNextQk = decltype(next_qk)::value;
    if constexpr (kOther) take_issue_pv(o - 1);
    float alpha[2];
    softmax_publish(o, alpha);
    if constexpr (kOther) drain_pv(o - 1);
    rescale_acc<Tr::kSkipUnitRescale>(acc, alpha);  // (V(o) landed in softmax_publish)
    if constexpr (kNextQk) wait_k(o + 2);
    fence_regs(acc);
    fence_regs(s);
    ptx::wgmma_fence();
    issue_pv(o);
    if constexpr (kNextQk) issue_qk(o + 2);
    drain_pv(o);
  };
  using True = std::integral_constant<bool, true>;
  using False = std::integral_constant<bool, false>;

  int o = wg;
  if (o < n) {  // S of this warpgroup's first tile
    wait_k(o);
    fence_regs(s);
    ptx::wgmma_fence();
    issue_qk(o);
    ptx::wgmma_wait_group<0>();
    fence_regs(s);
  }
  if (wg == 0 && n > 0) {  // tile 0: no earlier tile to take
    if (o + 2 < n)
      trip(o, False{}, True{});
    else
      trip(o, False{}, False{});
    o += 2;
  }
  for (; o + 2 < n; o += 2) trip(o, True{}, True{});
  if (o < n) trip(o, True{}, False{});
  if (n > 0 && ((n - 1) & 1) != wg) {  // the last tile is the other's
    take_issue_pv(n - 1);
    drain_pv(n - 1);
  }

  finish_output<Tr, kBf16>(ss, p, acc, st, b, kvh, row0, split, wg, tid_wg);
}

}  // namespace sm90
}  // namespace fmha
