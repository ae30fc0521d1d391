// fmha sm_90a: the balanced schedule's dealing of tiles (sm90/schedule_balanced.cuh has the grid-to-work overview):
// the units' weights and their running sums, and the walks of a CTA's share over them.
#pragma once

#include <cstdint>

#include "../common/params.h"
#include "traits.h"

namespace fmha {
namespace sm90 {

// Sequences a balanced launch may hold: their running weight sums live in the free rows of the Q boxes.
constexpr int kBalancedMaxB = 4096;
// Packed query rows (T x G) a balanced launch may hold: its combine kernel's grid has a row (or a few) a CTA in y.
constexpr int kBalancedMaxRows = 65535;

// The running sums: entry i (0 <= i <= B) = weight of sequences 0 .. i - 1 (a unit's weight:
// balanced_seq_weight), in rows kNarrowRows .. 63 of Q boxes
// 2 .. kBoxes - 1 (box 0 holds P^T there, box 1 the cross-warp reductions and the scan's warp totals).
template <class Tr>
struct BalancedPrefix {
  static constexpr int kFirstBox = 2;
  static constexpr int kPerBox = (Tr::kBlockM - Tr::kNarrowRows) * Tr::kRowBytes / 4;
  static constexpr int kCapacity = (Tr::kBoxes - kFirstBox) * kPerBox;
  static_assert(kCapacity >= kBalancedMaxB + 1, "balanced: the running sums must fit in the free Q rows");
  __device__ static int* at(SharedStorage<Tr>& ss, int i) {
    return reinterpret_cast<int*>(&ss.q[kFirstBox + i / kPerBox][Tr::kNarrowRows * Tr::kBoxCols]) + i % kPerBox;
  }
  // The block scan's warp totals: 8 ints from row 40 of box 1 (below the reductions of rows 32 - 35).
  static constexpr int kMaxWarps = 8;
  __device__ static int* warp_totals(SharedStorage<Tr>& ss) {
    return reinterpret_cast<int*>(&ss.q[1][40 * Tr::kBoxCols]);
  }
};

// Positions a visit weighs in the shares: its Q load and epilogue cost the narrow loop about a tile; the 64-key
// seesaw's (64 rows of Q and out, its two-stage pipeline drained and refilled) about four of its tiles
// (docs/deepseek.md, "The 64-key seesaw's balanced schedule").
template <class Tr>
__host__ __device__ constexpr int balanced_visit_weight() {
  return Tr::kSeesaw64 ? 4 : 1;
}

// Sequence b's length clamped to [0, S] (a balanced launch has the lengths).
__device__ __forceinline__ int balanced_len(const DecodeParams& p, int b) {
  return min(max(__ldg(p.seqlens + b), 0), p.S);
}

// The weight of each unit of sequence b in the shares: its tiles (of its clamped length; every packed row of the
// one row block sees up to L, causal or not) and its visit's (balanced_visit_weight); 0 for an empty sequence
// (balanced_empty_units writes it).
template <class Tr>
__device__ __forceinline__ int balanced_seq_weight(const DecodeParams& p, int b) {
  const int L = balanced_len(p, b);
  return L > 0 ? (L + Tr::kBlockN - 1) / Tr::kBlockN + balanced_visit_weight<Tr>() : 0;
}

// The 64-key seesaw's running sums, in ring stage 0 before its first load: every Q box row is Q's. The walk reads
// them once (BalancedWalkByLengths) and then steps by the lengths.
template <class Tr>
struct BalancedSumsInRing {
  static constexpr int kMaxWarps = 16;
  static_assert(sizeof(SharedStorage<Tr>::k) >= (kBalancedMaxB + 1 + kMaxWarps) * sizeof(int),
                "balanced: the running sums fit in the ring");
  __device__ static int* at(SharedStorage<Tr>& ss, int i) { return reinterpret_cast<int*>(&ss.k[0][0][0]) + i; }
  __device__ static int* warp_totals(SharedStorage<Tr>& ss) { return at(ss, kBalancedMaxB + 1); }
};

// The running sums of the sequences' weights, by every thread of the CTA (a TMA launch: Tr::kThreads), into Pf.
template <class Tr, class Pf = BalancedPrefix<Tr>>
__device__ void balanced_prefix(SharedStorage<Tr>& ss, const DecodeParams& p) {
  constexpr int kThreads = Tr::kThreads;
  static_assert(kThreads <= Pf::kMaxWarps * 32, "balanced: a warp total for every warp");
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  for (int b = tid; b < p.B; b += kThreads) *Pf::at(ss, b + 1) = balanced_seq_weight<Tr>(p, b);
  if (tid == 0) *Pf::at(ss, 0) = 0;
  __syncthreads();
  // Thread t sums entries [lo, hi), then the block's exclusive scan of those sums offsets its rewrite.
  const int seg = (p.B + kThreads - 1) / kThreads;
  const int lo = 1 + min(p.B, tid * seg), hi = 1 + min(p.B, (tid + 1) * seg);
  int sum = 0;
  for (int i = lo; i < hi; ++i) sum += *Pf::at(ss, i);
  int incl = sum;
#pragma unroll
  for (int d = 1; d < 32; d <<= 1) {
    const int o = __shfl_up_sync(0xffffffffu, incl, d);
    if (lane >= d) incl += o;
  }
  int* totals = Pf::warp_totals(ss);
  if (lane == 31) totals[warp] = incl;
  __syncthreads();
  int run = incl - sum;
  for (int w = 0; w < warp; ++w) run += totals[w];
  for (int i = lo; i < hi; ++i) {
    run += *Pf::at(ss, i);
    *Pf::at(ss, i) = run;
  }
  __syncthreads();
}

// The balanced grid: its CTAs C and this CTA's linear index c.
__device__ __forceinline__ int balanced_ctas() { return static_cast<int>(gridDim.x * gridDim.y * gridDim.z); }
__device__ __forceinline__ int balanced_cta() {
  return static_cast<int>((blockIdx.z * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x);
}

// The walk over the units of this CTA's share, in unit order: the producer and every consumer thread run it alike
// (it reads only the running sums), so no visit needs handing over.
// Pf: where the running sums are (the 64-key seesaw's walk finds its start in its own); C CTAs deal, c is this one.
template <class Tr, class Pf = BalancedPrefix<Tr>>
struct BalancedWalk {
  int C, c, chunk, r0, r1, b, kvh;

  __device__ __forceinline__ BalancedWalk(SharedStorage<Tr>& ss, const DecodeParams& p, int C_ = balanced_ctas(),
                                          int c_ = balanced_cta()) {
    C = C_;
    c = c_;
    const int total = p.Hkv * *Pf::at(ss, p.B);  // N (the host keeps it below 2^31)
    chunk = max(1, (total + C - 1) / C);
    r0 = c * chunk;  // this CTA's share [r0, r1) (the last one's may end past N)
    r1 = r0 + chunk;
    // The unit at position r0: of the first sequence whose units end past r0 (one of some weight).
    int lo = 0, hi = p.B;
    while (lo < hi) {
      const int mid = (lo + hi) / 2;
      if (p.Hkv * *Pf::at(ss, mid + 1) > r0) hi = mid;
      else lo = mid + 1;
    }
    b = lo;
    kvh = 0;
    if (b < p.B) {
      const int wt = *Pf::at(ss, b + 1) - *Pf::at(ss, b), base = p.Hkv * *Pf::at(ss, b);
      kvh = min(p.Hkv - 1, (r0 - base) / wt);
    }
  }

  // The next visit, false past the share's last unit. A unit at position start has its visit at start .. start +
  // kVisit - 1 and its n tiles at ts = start + kVisit .. ts + n - 1; the CTAs holding its tiles visit it. Empty units
  // (weight 0) are passed over.
  __device__ __forceinline__ bool next(SharedStorage<Tr>& ss, const DecodeParams& p, BalancedVisit& vis) {
    if (b >= p.B || p.Hkv * *Pf::at(ss, b) >= r1) return false;  // (the rest start past this share)
    if (*Pf::at(ss, b + 1) == *Pf::at(ss, b)) {  // an empty sequence (kvh is 0): the next one of some weight
      const int at = *Pf::at(ss, b);
      int lo = b + 1, hi = p.B;
      while (lo < hi) {
        const int mid = (lo + hi) / 2;
        if (*Pf::at(ss, mid + 1) > at) hi = mid;
        else lo = mid + 1;
      }
      b = lo;
      if (b >= p.B) return false;
    }
    const int wt = *Pf::at(ss, b + 1) - *Pf::at(ss, b);
    if (!fill(p, p.Hkv * *Pf::at(ss, b) + kvh * wt, wt, vis)) return false;
    if (++kvh == p.Hkv) {
      kvh = 0;
      ++b;
    }
    return true;
  }

  // The visit to unit (b, kvh) at position start, of weight wt, into vis; false where its tiles start past this
  // share (units come in order of position: the rest lie past it too).
  __device__ __forceinline__ bool fill(const DecodeParams& p, int start, int wt, BalancedVisit& vis) const {
    constexpr int kVisit = balanced_visit_weight<Tr>();
    const int n = wt - kVisit, ts = start + kVisit;
    const int first = ts / chunk;
    if (first > c) return false;
    const int last = (start + (kVisit - 1) + n) / chunk;  // (the CTA of its last tile, ts + n - 1)
    vis.unit = b * p.Hkv + kvh;
    vis.b = b;
    vis.kvh = kvh;
    vis.tile_begin = max(ts, r0) - ts;
    vis.tile_end = max(min(ts + n, r1) - ts, vis.tile_begin);
    vis.piece = c - first;
    vis.pieces = last - first + 1;
    vis.first_cta = first;
    vis.first_mid = ts > first * chunk ? 1 : 0;
    return true;
  }
};

// BalancedWalk for the 64-key seesaw, whose running sums live in the ring only until the first load: the start of
// the share is found in them, and from there the walk steps sequence by sequence, each weight read again from the
// lengths (balanced_seq_weight, the function the sums were made of). The same visits, in the same order.
template <class Tr>
struct BalancedWalkByLengths {
  BalancedWalk<Tr, BalancedSumsInRing<Tr>> w;  // the share and the unit the walk is at (w.b, w.kvh)
  int at, wt;  // the weight of the sequences before w.b, and w.b's

  // C: the CTAs that deal the units (one row block's), c: this CTA's index among them.
  __device__ __forceinline__ BalancedWalkByLengths(SharedStorage<Tr>& ss, const DecodeParams& p, int C, int c)
      : w(ss, p, C, c) {  // (where the share starts, found in the sums)
    using Pf = BalancedSumsInRing<Tr>;
    at = *Pf::at(ss, min(w.b, p.B));
    wt = w.b < p.B ? *Pf::at(ss, w.b + 1) - at : 0;
  }

  // As BalancedWalk::next; ss is not read.
  __device__ __forceinline__ bool next(SharedStorage<Tr>&, const DecodeParams& p, BalancedVisit& vis) {
    if (w.b >= p.B || p.Hkv * at >= w.r1) return false;
    while (wt == 0) {  // an empty sequence (kvh is 0): the next one of some weight
      if (++w.b >= p.B) return false;
      wt = balanced_seq_weight<Tr>(p, w.b);
    }
    if (!w.fill(p, p.Hkv * at + w.kvh * wt, wt, vis)) return false;
    if (++w.kvh == p.Hkv) {
      w.kvh = 0;
      at += wt;
      wt = ++w.b < p.B ? balanced_seq_weight<Tr>(p, w.b) : 0;
    }
    return true;
  }
};

}  // namespace sm90
}  // namespace fmha
