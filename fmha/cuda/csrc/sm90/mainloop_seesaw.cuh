// fmha sm_90a: the seesaw at D >= 512: two consumer warpgroups take turns over the tiles.
#pragma once

#include <cstdint>
#include <type_traits>

#include "../common/epilogue.cuh"
#include "mma.cuh"

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
// The hand-off, shared with consumer_loop_seesaw64 (mainloop_seesaw64.cuh).
template <class Tr>
struct SeesawSmem {
  static_assert(Tr::kSeesaw, "seesaw only");
  // P(it): box kQSmemBoxes + (it / 2) % 2 of the Q array, columns 32 (it % 2) .. + 31 (bytes 64 (it % 2)
  // of each 128 B row), as the A operand of the P V wgmma (K-major, 128B-swizzled like Q); the 64-key seesaw's
  // P(it) fills box kQSmemBoxes + it % 2.
  __device__ static uint16_t* p_box(SharedStorage<Tr>& ss, int it) {
    return ss.q[Tr::kQSmemBoxes + (Tr::kSeesaw64 ? it & 1 : (it >> 1) & 1)];
  }
  __device__ static int p_chunk0(int it) { return Tr::kSeesaw64 ? 0 : 4 * (it & 1); }  // its first 16 B chunk
  __device__ static uint32_t p_in_row(int it) { return static_cast<uint32_t>(p_chunk0(it)) * 16u; }
  // Row state after tile it, thread tid_wg's: (m_i[0], m_i[1], l_i[0], l_i[1]) and (alpha[0], alpha[1], -, -).
  __device__ static float4* state(SharedStorage<Tr>& ss, int it) { return ss.s_exchange + (it & 1) * 256; }

  // P(it) from the softmax's output s of the thread (w, g, ql). Element i = 4 c + 2 h + e: row 16 w + g + 8 h,
  // column 8 c + 2 ql + e, i.e. 16 B chunk p_chunk0 + c of the row, swizzled by the row's (16 w + g + 8 h) % 8
  // = g; conflict-free per store.
  template <bool kBf16>
  __device__ static void store_p(SharedStorage<Tr>& ss, int it, const float (&s)[Tr::kBlockN / 2], int w, int g,
                                 int ql) {
    uint8_t* box = reinterpret_cast<uint8_t*>(p_box(ss, it));
    const int chunk0 = p_chunk0(it);
#pragma unroll
    for (int c = 0; c < Tr::kBlockN / 8; ++c)
#pragma unroll
      for (int h = 0; h < 2; ++h)
        *reinterpret_cast<uint32_t*>(box + (16 * w + g + 8 * h) * Tr::kRowBytes + ((chunk0 + c) ^ g) * 16 + 4 * ql) =
            pack2<kBf16>(s[4 * c + 2 * h], s[4 * c + 2 * h + 1]);
  }
  // The owner, after store_p: the row state after tile it, then P(it) and the state published (p_full).
  __device__ static void publish(SharedStorage<Tr>& ss, int it, const RowState& st, const float (&alpha)[2],
                                 int tid_wg) {
    float4* st4 = state(ss, it);
    st4[tid_wg] = make_float4(st.m_i[0], st.m_i[1], st.l_i[0], st.l_i[1]);
    st4[128 + tid_wg] = make_float4(alpha[0], alpha[1], 0.f, 0.f);
    ptx::fence_proxy_async_shared();  // P: generic stores -> the other warpgroup's (and our) wgmma reads
    ptx::mbarrier_arrive(&ss.p_full[it & 1]);
  }
  // O[:, this warpgroup's 256 columns] += P(it) V, one group; v_box: the warpgroup's first V box of the tile's
  // stage (kBlockN rows).
  template <bool kBf16>
  __device__ __forceinline__ static void issue_pv(SharedStorage<Tr>& ss, int it, float (&acc)[Tr::kOutCols / 2],
                                                  const uint16_t* v_box) {
    constexpr uint32_t kSbo = 8 * Tr::kRowBytes;
    const ptx::SmemDescSw128 dp(ptx::smem_addr(p_box(ss, it)), 16, kSbo);
    const ptx::SmemDescSw128 dv(ptx::smem_addr(v_box), Tr::kKvBoxBytes, kSbo);
#pragma unroll
    for (int kk = 0; kk < Tr::kBlockN / 16; ++kk)
      ptx::wgmma_ss_m64n256k16_mn_b<kBf16>(acc, dp.at(p_in_row(it) + kk * 32), dv.at(kk * 16 * Tr::kRowBytes), 1);
    ptx::wgmma_commit_group();
  }
  // The other warpgroup: wait until P(it) is published; take the row state after tile it and its alpha.
  __device__ static void take(SharedStorage<Tr>& ss, int it, RowState& st, float (&alpha)[2], int tid_wg) {
    ptx::mbarrier_wait_parity(&ss.p_full[it & 1], static_cast<uint32_t>(it >> 1) & 1u);
    const float4* st4 = state(ss, it);
    const float4 ml = st4[tid_wg], a = st4[128 + tid_wg];
    st.m_i[0] = ml.x;
    st.m_i[1] = ml.y;
    st.l_i[0] = ml.z;
    st.l_i[1] = ml.w;
    alpha[0] = a.x;
    alpha[1] = a.y;
  }
};

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
