// fmha: arch-neutral pieces of the online (FA2) softmax and of the output
// epilogue, for accumulators in the m64nN fragment layout that both sm_90
// WGMMA registers and (after tcgen05.ld) sm_100 TMEM loads can present:
// thread t of a 128-thread group, w = t / 32, g = (t % 32) / 4, q = t % 4 owns
//   rows    16 w + g + 8 h           (h = 0, 1)
//   columns 8 c + 2 q + e            (c = 0 .. N/8-1, e = 0, 1)
// as element i = 4 c + 2 h + e of an N/2-float array.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "params.h"

namespace fmha {

// Fragment index helpers (see the header comment).
__device__ __forceinline__ constexpr int frag_row_half(int i) { return (i >> 1) & 1; }
__device__ __forceinline__ constexpr int frag_col(int i, int quad_lane) { return 8 * (i >> 2) + 2 * quad_lane + (i & 1); }

// 2^x with the hardware approximation (ex2.approx.ftz.f32, PTX 9.7.4.x
// "ex2"); ex2(-inf) = +0, which is how masked keys vanish.
__device__ __forceinline__ float exp2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// Reductions over the 4 threads of a quad, which share the two rows.
__device__ __forceinline__ float quad_max(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
  return v;
}
__device__ __forceinline__ float quad_sum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  v += __shfl_xor_sync(0xffffffffu, v, 2);
  return v;
}

// Two floats -> one 32-bit register of two 16-bit values, the lower column in
// the low half (the layout of a 16-bit MMA A fragment).
template <bool kBf16>
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  if constexpr (kBf16) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
  } else {
    __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
  }
}

// One float -> the 16-bit pattern of its bf16 / fp16 rounding (round to nearest even).
template <bool kBf16>
__device__ __forceinline__ uint16_t half_bits(float x) {
  return static_cast<uint16_t>(pack2<kBf16>(x, 0.f) & 0xffffu);
}

// Per-row running state of the online softmax for the two rows a thread owns.
// m_i: running max of the scaled scores (log2 domain; with kLazyMax a reference
// within kLazyMaxSlack of it), -inf while no key was visible; l_i: this thread's
// partial running sum of 2^(s - m_i) (summed over the quad only once, in finalize).
struct RowState {
  float m_i[2];
  float l_i[2];
  __device__ __forceinline__ void init() {
    m_i[0] = m_i[1] = -INFINITY;
    l_i[0] = l_i[1] = 0.f;
  }
};

// One KV tile of online softmax on an N-column score fragment `s` (raw Q K^T).
// key_limit[h]: keys with tile-relative column >= key_limit[h] are masked
// (the caller folds the tile start, the sequence length and causality into it).
// On return `s` holds P = 2^(s*qk_scale - m_new) (unnormalised) and alpha[h]
// the factor the output accumulator must be rescaled by. Never produces NaN:
// a row with no visible key so far keeps m_i = -inf and uses 0 as reference.
// kMask = false: the caller knows every key of the tile is visible to every row (key_limit unused).
// qk_scale > 0 (the host checks the softmax scale), so the row max is taken on the raw scores and
// scaled once, and each P is one FFMA and an ex2.
// kLazyMax: a row's reference m_i moves only when the tile's max exceeds it by more than kLazyMaxSlack
// (log2 units), so that most tiles leave alpha = 1 and the accumulator unscaled; P is at most
// 2^kLazyMaxSlack, and out = acc / l_i and the LSE are unchanged in exact arithmetic (l_i and acc share the
// reference; P is rounded to 16 bits for P V, at values up to 2^kLazyMaxSlack).
// kShortChains: the row max and row sum in interleaved chains (row_half_reduce), for a softmax that lies on a
// hand-off chain between warpgroups; the sum rounds differently from one chain, the max is exact in any order.
constexpr float kLazyMaxSlack = 8.f;
constexpr int kMaxChains = 4;  // the max chain precedes every ex2 of the tile
constexpr int kSumChains = 2;  // the sum chain runs beside the ex2s, which bound it
// The N / 4 elements of row half h of a score fragment reduced in kChains interleaved chains, then
// pairwise: N / (4 kChains) - 1 + log2(kChains) dependent operations instead of N / 4 - 1, for kChains
// registers a row half.
template <int N, int kChains, class Op>
__device__ __forceinline__ float row_half_reduce(const float (&s)[N / 2], int h, Op op) {
  static_assert((N / 4) % kChains == 0 && (kChains & (kChains - 1)) == 0, "kChains: a power of 2 dividing N / 4");
  float v[kChains];
#pragma unroll
  for (int j = 0; j < N / 4; ++j) {
    const float x = s[4 * (j / 2) + 2 * h + (j % 2)];  // element 4 c + 2 h + e
    v[j % kChains] = j < kChains ? x : op(v[j % kChains], x);
  }
#pragma unroll
  for (int w = kChains / 2; w >= 1; w /= 2)
#pragma unroll
    for (int j = 0; j < w; ++j) v[j] = op(v[j], v[j + w]);
  return v[0];
}
template <int N, bool kMask = true, bool kLazyMax = false, bool kShortChains = false>
__device__ __forceinline__ void online_softmax_tile(float (&s)[N / 2], RowState& st, const int (&key_limit)[2],
                                                    float qk_scale, int quad_lane, float (&alpha)[2]) {
  float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
  for (int i = 0; i < N / 2; ++i) {
    const int h = frag_row_half(i);
    if (kMask && frag_col(i, quad_lane) >= key_limit[h]) s[i] = -INFINITY;
    if constexpr (!kShortChains) mx[h] = fmaxf(mx[h], s[i]);
  }
  if constexpr (kShortChains) {
#pragma unroll
    for (int h = 0; h < 2; ++h) mx[h] = row_half_reduce<N, kMaxChains>(s, h, [](float a, float b) { return fmaxf(a, b); });
  }
  float neg_ref[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float m_new = fmaxf(st.m_i[h], quad_max(mx[h]) * qk_scale);
    if (kLazyMax && !(m_new - st.m_i[h] > kLazyMaxSlack)) m_new = st.m_i[h];  // (-inf - -inf: NaN, kept)
    const float ref = (m_new == -INFINITY) ? 0.f : m_new;
    alpha[h] = exp2_approx(st.m_i[h] - ref);  // m_i = -inf -> 0
    neg_ref[h] = -ref;
    st.m_i[h] = m_new;
  }
  float sum[2] = {0.f, 0.f};
#pragma unroll
  for (int i = 0; i < N / 2; ++i) {
    const int h = frag_row_half(i);
    s[i] = exp2_approx(fmaf(s[i], qk_scale, neg_ref[h]));
    if constexpr (!kShortChains) sum[h] += s[i];
  }
  if constexpr (kShortChains) {
#pragma unroll
    for (int h = 0; h < 2; ++h) sum[h] = row_half_reduce<N, kSumChains>(s, h, [](float a, float b) { return a + b; });
  }
#pragma unroll
  for (int h = 0; h < 2; ++h) st.l_i[h] = st.l_i[h] * alpha[h] + sum[h];
}

// After the last tile: full row sums, 1/l (0 for a row with no visible key),
// and the natural-log LSE (-inf for such a row).
__device__ __forceinline__ void finalize_rows(RowState& st, float (&inv_l)[2], float (&lse)[2]) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const float l = quad_sum(st.l_i[h]);
    const bool empty = !(l > 0.f);
    inv_l[h] = empty ? 0.f : 1.f / l;
    lse[h] = empty ? -INFINITY : (st.m_i[h] + __log2f(l)) * kLn2;
  }
}

// Joins a sink logit (natural log) into a finished row: the row's (out = acc * inv_l, lse) merged with
// an empty partial whose LSE is `sink`, so lse' = log(e^lse + e^sink) and out' = out e^(lse - lse'). A row
// with no visible key (lse = -inf) keeps out = 0 and gets lse' = sink; a sink of -inf changes nothing.
__device__ __forceinline__ void add_sink(float sink, float& inv_l, float& lse) {
  const float m = fmaxf(lse, sink);
  if (m == -INFINITY) return;
  const float lse_new = m + __log2f(exp2_approx((lse - m) * kLog2e) + exp2_approx((sink - m) * kLog2e)) * kLn2;
  inv_l *= exp2_approx((lse - lse_new) * kLog2e);
  lse = lse_new;
}

}  // namespace fmha
