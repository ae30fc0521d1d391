// fmha sm_90a: the overlapped consumer loop: Q K^T of the next tile in flight while P V of this one and
// the softmax of the next run.
#pragma once

#include <cstdint>

#include "../common/epilogue.cuh"
#include "mma.cuh"

namespace fmha {
namespace sm90 {

// The consumer loop with the tensor core kept busy across tiles:
//   iteration it:  issue S(it+1) = Q K(it+1)^T  and  O += P(it) V(it)   (two wgmma groups)
//                  wait for S(it+1) only; softmax(it+1) runs while P V(it) is in flight
//                  wait for P V(it); rescale O by alpha(it+1); P(it+1) becomes P
// Groups complete in order, so wait_group<1> after committing [QK, PV] means QK is done.
template <class Tr, bool kBf16>
__device__ __forceinline__ void consumer_loop_overlapped(SharedStorage<Tr>& ss, const DecodeParams& p,
                                                         const TileRange& tr, int b, int kvh, int row0, int split,
                                                         int ctid) {
  const int wg = warpgroup_index<Tr>(ctid);
  const int tid_wg = ctid % 128;
  const int lane = tid_wg % 32, ql = lane % 4;  // quad lane: owns columns 2 ql, 2 ql + 1 of each 8

  int limit_abs[2];
  consumer_prologue<Tr>(ss, p, tr, b, kvh, row0, ctid, limit_abs);
  QRegs<Tr> qr;
  load_q_regs<Tr>(qr, p, b, kvh, row0, wg, tid_wg);

  RowState st;
  st.init();
  float acc[Tr::kOutCols / 2];
#pragma unroll
  for (int i = 0; i < Tr::kOutCols / 2; ++i) acc[i] = 0.f;
  uint32_t pa[Tr::kBlockN / 16][4];  // P of the tile whose P V is next, as the PV wgmma's A fragment
  float s[Tr::kBlockN / 2];

  const int unmasked_until = fmha::unmasked_until(p, tr);
  // Every wgmma issue below is unconditional between its fence and its wait (the last tile is
  // peeled off the loop), so ptxas can follow the two groups without serialising them.
  auto wait_k = [&](int it) { wait_k_tile<Tr>(ss, it, ctid, kv_gather(p)); };
  auto issue_qk = [&](int it) {  // S = Q K^T of ring position `it`, committed as one group
    const int stage = it % Tr::kStages;
    if constexpr (Tr::kSplitQk)
      qk_gemm<Tr, kBf16, Tr::kWgBoxes * Tr::kBoxCols>(s, ss, stage, wg * (Tr::kWg1FirstBox * Tr::kBoxCols), &qr);
    else
      qk_gemm<Tr, kBf16>(s, ss, stage);
    ptx::wgmma_commit_group();
  };
  auto issue_pv = [&](int it) {  // O += P V of ring position `it`, committed as one group
    pv_gemm<Tr, kBf16>(acc, pa, ss, it % Tr::kStagesV, wg);
    ptx::wgmma_commit_group();
  };
  // After S of ring position `it` landed: free its K tile, masked online softmax (s becomes P).
  auto softmax_scores = [&](int it, float (&alpha)[2]) {
    if constexpr (!Tr::kSharedKv) {  // (one ring: the stage is released after P V)
      fence_regs(s);
      release_stage(&ss.empty_k[it % Tr::kStages], lane);
      fence_regs(s);  // the softmax reads s after the arrive: ptxas would otherwise sink the arrive below it
    }
    if constexpr (Tr::kSplitQk) exchange_scores<Tr>(s, ss, it, wg, tid_wg);
    if (ctid == 0 && it > 0) probe_stamp(it - 1, kProbeExchanged);  // (filed under the loop iteration)
    softmax_ring_tile<Tr>(s, st, p, tr, it, limit_abs, unmasked_until, ql, alpha);
  };
  const int n = tr.end - tr.begin;
  // With two consumer warpgroups P V(it) is issued once Q K^T(it+1) landed, not with it: their wgmmas
  // share the tensor cores, and one warpgroup's P V beside its Q K^T can run ahead of the other's Q K^T,
  // which the score exchange then waits for.
  constexpr bool kPvAfterQk = Tr::kConsumerWGs == 2;
  // Before P V(it) and Q K^T(it + 1) are issued: V(it) and, unless it is the last, K(it + 1) landed.
  auto wait_operands = [&](int it) {
    wait_v_tile<Tr>(ss, tr, it, ctid, kv_gather(p));
    if (it + 1 < n) wait_k(it + 1);
  };
  auto release_after_pv = [&](int it) {
    release_v_stage<Tr>(ss, it % Tr::kStagesV, lane);
  };
  if (n == 0) {
    float inv_l[2], lse[2];
    finalize_rows(st, inv_l, lse);
    store_output<Tr, kBf16>(ss, p, acc, inv_l, lse, b, kvh, epilogue_row0<Tr>(p, row0),
                          epilogue_split<Tr>(p, split), wg, tid_wg);
    return;
  }
  {
    float alpha[2];
    wait_k(0);
    fence_regs(s);
    ptx::wgmma_fence();
    issue_qk(0);
    ptx::wgmma_wait_group<0>();
    softmax_scores(0, alpha);  // acc is zero: nothing to rescale
    pack_p<kBf16, Tr::kBlockN>(pa, s);
    if constexpr (Tr::kEarlyOperandWait) wait_operands(0);
  }
  for (int it = 0; it + 1 < n; ++it) {
    if constexpr (!Tr::kEarlyOperandWait) wait_operands(it);
    if (ctid == 0) probe_stamp(it, kProbeOperandsReady);
    fence_regs(acc);
    fence_regs(pa);
    fence_regs(s);
    ptx::wgmma_fence();
    issue_qk(it + 1);
    if constexpr (!kPvAfterQk) issue_pv(it);
    if (ctid == 0) probe_stamp(it, kProbeLoopIssued);
    float alpha[2];
    if constexpr (kPvAfterQk) {
      ptx::wgmma_wait_group<0>();  // S(it+1) landed
      ptx::wgmma_fence();
      issue_pv(it);                // runs during the exchange and the softmax
    } else {
      ptx::wgmma_wait_group<1>();  // S(it+1) landed; P V(it) may still run (pa is repacked only after it)
    }
    if (ctid == 0) probe_stamp(it, kProbeQkLanded);
    if (ctid == 128) probe_stamp(it, kProbeQkLandedWg1);
    softmax_scores(it + 1, alpha);
    if (ctid == 0) probe_stamp(it, kProbeSoftmaxDone);
    // Tr::kEarlyOperandWait: the next iteration's operands are waited for here, before P V(it) is.
    // ptxas places the wgmma wait below as early as its dependencies allow, ahead of the softmax's
    // exponentials (out of the overlap with P V); the mbarrier wait loops are a boundary it keeps. But
    // V(it) is then released later, which costs D = 512 8%.
    if constexpr (Tr::kEarlyOperandWait) wait_operands(it + 1);
    ptx::wgmma_wait_group<0>();  // P V(it) done: acc and pa are ours again
    if (ctid == 0) probe_stamp(it, kProbePvLanded);
    fence_regs(acc);
    fence_regs(pa);
    release_after_pv(it);
    rescale_acc<Tr::kSkipUnitRescale>(acc, alpha);
    pack_p<kBf16, Tr::kBlockN>(pa, s);
  }
  if constexpr (!Tr::kEarlyOperandWait) wait_operands(n - 1);
  fence_regs(acc);
  fence_regs(pa);
  ptx::wgmma_fence();
  issue_pv(n - 1);
  ptx::wgmma_wait_group<0>();
  fence_regs(acc);
  release_after_pv(n - 1);

  float inv_l[2], lse[2];
  finalize_rows(st, inv_l, lse);
  store_output<Tr, kBf16>(ss, p, acc, inv_l, lse, b, kvh, epilogue_row0<Tr>(p, row0),
                          epilogue_split<Tr>(p, split), wg, tid_wg);
}

}  // namespace sm90
}  // namespace fmha
