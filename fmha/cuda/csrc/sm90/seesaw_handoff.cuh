// fmha sm_90a: the seesaws' hand-off of P and the row state between the two consumer warpgroups (SeesawSmem), for
// consumer_loop_seesaw (mainloop_seesaw.cuh) and consumer_loop_seesaw64 (mainloop_seesaw64.cuh).
#pragma once

#include <cstdint>

#include "../common/epilogue.cuh"
#include "mma.cuh"

namespace fmha {
namespace sm90 {

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
  // Tr::kCompactState: m_i[64], alpha[64] by row (a quad's four threads hold the same), then l_i[128][2] by thread.
  __device__ static float4* state(SharedStorage<Tr>& ss, int it) {
    return ss.s_exchange + (it & 1) * (Tr::kExchangeFloat4s / 2);
  }

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
    if constexpr (Tr::kCompactState) {
      float* f = reinterpret_cast<float*>(st4);
      const int row = tid_wg / 32 * 16 + tid_wg % 32 / 4;  // 16 w + g, and + 8
      if (tid_wg % 4 == 0) {
        f[row] = st.m_i[0];
        f[row + 8] = st.m_i[1];
        f[Tr::kBlockM + row] = alpha[0];
        f[Tr::kBlockM + row + 8] = alpha[1];
      }
      reinterpret_cast<float2*>(f + 2 * Tr::kBlockM)[tid_wg] = make_float2(st.l_i[0], st.l_i[1]);
    } else {
      st4[tid_wg] = make_float4(st.m_i[0], st.m_i[1], st.l_i[0], st.l_i[1]);
      st4[128 + tid_wg] = make_float4(alpha[0], alpha[1], 0.f, 0.f);
    }
    ptx::fence_proxy_async_shared();  // P: generic stores -> the other warpgroup's (and our) wgmma reads
    ptx::mbarrier_arrive(&ss.p_full[it & 1]);
  }
  // O[:, this warpgroup's 256 columns] += P(it) V, one group; v_box: the warpgroup's first V box of the tile's
  // stage (kBlockN rows).
  template <bool kBf16>
  __device__ __forceinline__ static void issue_pv(SharedStorage<Tr>& ss, int it, float (&acc)[Tr::kOutCols / 2],
                                                  const uint16_t* v_box) {
    constexpr uint32_t kSbo = Tr::kSwizzleSbo;
    const ptx::SmemDescSw128 dp(ptx::smem_addr(p_box(ss, it)), Tr::kLboUnused, kSbo);
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
    if constexpr (Tr::kCompactState) {
      const float* f = reinterpret_cast<const float*>(st4);
      const int row = tid_wg / 32 * 16 + tid_wg % 32 / 4;
      const float2 l = reinterpret_cast<const float2*>(f + 2 * Tr::kBlockM)[tid_wg];
      st.m_i[0] = f[row];
      st.m_i[1] = f[row + 8];
      st.l_i[0] = l.x;
      st.l_i[1] = l.y;
      alpha[0] = f[Tr::kBlockM + row];
      alpha[1] = f[Tr::kBlockM + row + 8];
      return;
    }
    const float4 ml = st4[tid_wg], a = st4[128 + tid_wg];
    st.m_i[0] = ml.x;
    st.m_i[1] = ml.y;
    st.l_i[0] = ml.z;
    st.l_i[1] = ml.w;
    alpha[0] = a.x;
    alpha[1] = a.y;
  }
};

}  // namespace sm90
}  // namespace fmha
