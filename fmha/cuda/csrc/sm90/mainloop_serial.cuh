// fmha sm_90a: the serial consumer loop: per tile Q K^T, the online softmax, then P V.
#pragma once

#include <cstdint>

#include "../common/epilogue.cuh"
#include "mma.cuh"

namespace fmha {
namespace sm90 {

template <class Tr, bool kBf16>
__device__ __forceinline__ void consumer_loop(SharedStorage<Tr>& ss, const DecodeParams& p, const TileRange& tr,
                                              int b, int kvh, int row0, int split, int ctid) {
  static_assert(!Tr::kSplitQk && Tr::kQRegCols == 0 && !Tr::kSharedKv, "serial loop: the D = 64 configurations");
  const int wg = warpgroup_index<Tr>(ctid);
  const int tid_wg = ctid % 128;
  const int lane = tid_wg % 32, ql = lane % 4;  // quad lane: owns columns 2 ql, 2 ql + 1 of each 8

  int limit_abs[2];
  consumer_prologue<Tr>(ss, p, tr, b, kvh, row0, ctid, limit_abs);

  RowState st;
  st.init();
  float acc[Tr::kOutCols / 2];
#pragma unroll
  for (int i = 0; i < Tr::kOutCols / 2; ++i) acc[i] = 0.f;

  for (int tile = tr.begin, it = 0; tile < tr.end; ++tile, ++it) {
    const int stage = it % Tr::kStages;
    const uint32_t phase = static_cast<uint32_t>(it / Tr::kStages) & 1u;

    // S = Q K^T
    float s[Tr::kBlockN / 2];
    wait_full_stage(&ss.full_k[stage], phase, it, kProbeKFullWait, ctid, kv_gather(p));
    ptx::wgmma_fence();
    qk_gemm<Tr, kBf16>(s, ss, stage);
    ptx::wgmma_commit_group();
    ptx::wgmma_wait_group<0>();
    fence_regs(s);
    // The K tile is free: the producer may refill it during softmax and P V.
    release_stage(&ss.empty_k[stage], lane);

    // Online softmax; P packed into the A fragment of the PV wgmma.
    const int key0 = tile * Tr::kBlockN;
    const int key_limit[2] = {limit_abs[0] - key0, limit_abs[1] - key0};
    float alpha[2];
    online_softmax_tile<Tr::kBlockN>(s, st, key_limit, p.qk_scale, ql, alpha);
    rescale_acc<Tr::kSkipUnitRescale>(acc, alpha);
    uint32_t pa[Tr::kBlockN / 16][4];
    pack_p<kBf16, Tr::kBlockN>(pa, s);

    // O += P V
    fence_regs(acc);
    fence_regs(pa);
    wait_v_tile<Tr>(ss, tr, it, ctid, kv_gather(p));
    ptx::wgmma_fence();
    pv_gemm<Tr, kBf16>(acc, pa, ss, it % Tr::kStagesV, wg);
    ptx::wgmma_commit_group();
    ptx::wgmma_wait_group<0>();
    fence_regs(acc);
    fence_regs(pa);

    // V free: this warp's wgmmas that read it have completed.
    release_v_stage<Tr>(ss, it % Tr::kStagesV, lane);
  }

  float inv_l[2], lse[2];
  finalize_rows(st, inv_l, lse);
  store_output<Tr, kBf16>(ss, p, acc, inv_l, lse, b, kvh, row0, split, wg, tid_wg);
}

}  // namespace sm90
}  // namespace fmha
