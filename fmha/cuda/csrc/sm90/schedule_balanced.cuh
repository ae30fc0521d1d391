// fmha sm_90a: the balanced schedule of the shared latent's narrow loop and 64-key seesaw (DecodeParams::balanced).
//
// Grid -> work
//   A narrow grid has num_splits CTAs per unit, a unit being one (sequence b, KV head kvh), u = b Hkv + kvh; each
//   takes a fixed fraction of its unit's tiles, so a batch of mixed cache lengths lasts as long as its longest
//   sequence. Here the grid's C CTAs (the plan's grid, capped by the host at one wave; c its linear index) deal
//   the units with tiles laid end to end in unit order, each weighing one position for its visit and one per tile
//   (N positions in all), in contiguous shares of chunk = ceil(N / C) positions: CTA c takes positions
//   [c chunk, (c + 1) chunk), which cover the end of one unit, whole units and the start of another. Each unit
//   whose tiles it holds is a visit: Q of the unit, its tiles of the share, and an epilogue. A unit inside one
//   share is written out directly; a unit whose tiles span the shares of CTAs first..last is pieces = last - first + 1
//   pieces, each written as O / l and its LSE to a workspace slot (common/params.h balanced_slot; fp32, or fp16 with a
//   scale a row where DecodeParams::partials_f16); the CTA of piece 0 writes the unit's descriptor, and
//   combine_balanced_kernel or combine_balanced_half_kernel (common/combine.cuh, launched as a programmatic
//   dependent) merges the pieces in piece order, so the result is the same on every run. A unit without tiles (an
//   empty sequence) weighs nothing: CTA u % C writes its zeros, the LSE of no keys (or the sink's) and its descriptor
//   (balanced_empty_units) while its producer loads its first tiles, so the empty sequences that pad a batch at its
//   end spread over every CTA (weighing a position each, they would all fall to the last few shares, each a visit
//   whose epilogue of scattered stores costs about two tiles).
//
//   The 64-key seesaw (more than 32 packed rows: 64 or 128 heads, or 16 at T >= 2) deals the same way within each
//   64-row block: its grid is (C, row blocks), each row block's C CTAs take the same shares of the units, so the row
//   blocks of a unit read its tiles at about the same time (the later from L2), and a piece of a row block fills that
//   block's rows of the unit's workspace slot.
//
// Every CTA derives the whole schedule from the cache lengths (balanced_prefix): the per-sequence weights
// and their running sums, in the rows of the Q boxes that the narrow loop leaves free (the 64-key seesaw: in its
// ring, before the first load; its producer alone walks, BalancedWalkByLengths). Nothing is read
// from the host, so the launch is graph-capturable and its result deterministic. The schedule costs a
// launch of uniform lengths (whose shares are decode_kernel's) a few percent: the host takes it only where asked
// (fmha/cuda/backend.py balanced_schedule).
//
// Hand-off (producer warp, one thread -> consumer warpgroup), per visit v (both walk the same visits,
// BalancedWalk):
//   q_full         phase v: the Q of the v-th visit landed (load_q_boxes_tma)
//   q_empty        phase v: the consumers' last Q K^T of that visit completed; the producer waits for phase v - 1
//                  before it loads visit v's Q (the narrow loop's first tile of the visit goes into the ring before
//                  that; the 64-key seesaw's tiles after it)
//   ring           the visits' tiles follow one another through the same stages (one cursor on each side)
//   The 64-key seesaw's consumers do not walk: the producer writes each visit to SharedStorage::visit before its Q's
//   load (released by that load's arrive on q_full) and, past the last, a visit of unit -1 with a plain arrive; its
//   q_empty phase completes once every consumer thread has written the visit's rows (each arrives: the visit and
//   the P boxes are read by all of them).
// A visit weighs balanced_visit_weight positions of the shares beside its tiles. The dealing itself (the running
// sums and the walks over them) is sm90/balanced_tiles.cuh.
#pragma once

#include <cstdint>

#include "../common/kv_ring.cuh"
#include "../common/params.h"
#include "../common/q_load.cuh"
#include "balanced_tiles.cuh"
#include "mainloop_narrow.cuh"
#include "mainloop_seesaw64.cuh"
#include "traits.h"

namespace fmha {
namespace sm90 {

// Rows row_begin .. row_begin + n_rows - 1 of unit (b, kvh) as a sequence of no visible key: out zero, the LSE
// of no keys (or the sink's), by the consumer threads in 16-byte stores.
template <class Tr>
__device__ __forceinline__ void write_empty_rows(const DecodeParams& p, int b, int kvh, int row_begin, int n_rows,
                                                 int ctid) {
  constexpr int kChunks = Tr::kHeadDimV / 8;  // 16-byte chunks of an output row
#pragma unroll 1
  for (int e = ctid; e < n_rows * kChunks; e += Tr::kConsumerThreads) {
    const OutRow r(p, b, kvh, row_begin + e / kChunks);
    reinterpret_cast<uint4*>(r.out(p, b))[e % kChunks] = make_uint4(0u, 0u, 0u, 0u);
    if (e % kChunks == 0) p.lse[r.lse_idx] = p.sinks != nullptr ? __ldg(p.sinks + r.hq) : -INFINITY;
  }
}

// The producer (one thread): each visit's Q (its rows from row0) and tiles, the tiles by halves where the ring
// fills by halves (Tr::kRingHalves); the 64-key seesaw's visits published to its consumers (SharedStorage::visit).
// make_walk() constructs the walk (BalancedWalk or BalancedWalkByLengths), here, after the policy is made.
template <class Tr, bool kPaged, class Ss, class MakeWalk>
__device__ void producer_balanced(Ss& ss, const CUtensorMap* tmap_k, const CUtensorMap* tmap_q,
                                  const DecodeParams& p, MakeWalk make_walk, int row0) {
  const uint64_t policy = ptx::create_policy_evict_first();
  auto walk = make_walk();
  BalancedVisit vis;
  int it = 0;  // ring position
  int v = 0;   // visits (each loads its Q)
  // The probe's stamps by ring position, as the seesaw's consumers file theirs (the narrow loop's by visit tile).
  auto stamp = [](int pos, int event) {
    if constexpr (Tr::kSeesaw64) probe_stamp(pos, event);
  };
  while (walk.next(ss, p, vis)) {
    PagedTile<Tr> pages;
    if (kPaged) pages.lookup(p, vis.b, vis.tile_begin * Tr::kBlockN);
    auto issue = [&](int tile) {  // tile `tile` of the unit into ring position it
      const int stage = it % Tr::kStages;
      const uint32_t phase = static_cast<uint32_t>(it / Tr::kStages) & 1u;
      constexpr int kHalf = Tr::kHalfBoxes;  // (kBoxes but with kRingHalves)
      stamp(it, kProbeKEmptyWait);
      ptx::mbarrier_wait_parity(&ss.empty_k[stage], phase ^ 1u);
      ptx::mbarrier_arrive_expect_tx(&ss.full_k[stage], Tr::kKvTileBytes / Tr::kBoxes * kHalf);
      if constexpr (kPaged)
        load_kv_tile_paged<Tr, 0, kHalf>(ss.k[stage], tmap_k, &ss.full_k[stage], p, pages, tile * Tr::kBlockN,
                                         vis.kvh, p.k_head_major, policy);
      else
        load_kv_tile<Tr, 0, kHalf>(ss.k[stage], tmap_k, &ss.full_k[stage], tile * Tr::kBlockN, vis.kvh, vis.b,
                                   p.k_head_major, policy);
      if constexpr (Tr::kRingHalves) {  // the stage's second half, on its own barriers
        ptx::mbarrier_wait_parity(&ss.empty_v[stage], phase ^ 1u);
        ptx::mbarrier_arrive_expect_tx(&ss.full_v[stage], Tr::kKvTileBytes / Tr::kBoxes * (Tr::kBoxes - kHalf));
        if constexpr (kPaged)
          load_kv_tile_paged<Tr, kHalf>(ss.k[stage], tmap_k, &ss.full_v[stage], p, pages, tile * Tr::kBlockN,
                                        vis.kvh, p.k_head_major, policy);
        else
          load_kv_tile<Tr, kHalf>(ss.k[stage], tmap_k, &ss.full_v[stage], tile * Tr::kBlockN, vis.kvh, vis.b,
                                  p.k_head_major, policy);
        if constexpr (Tr::kRopeRing)
          load_rope_box<Tr, kPaged>(ss, tmap_k, &ss.full_v[stage], p, pages, it, tile * Tr::kBlockN, vis.kvh, vis.b,
                                    p.k_head_major, policy);
      }
      stamp(it, kProbeKIssued);  // (both halves, as producer_loop)
      if (kPaged && tile + 1 < vis.tile_end) pages.lookup(p, vis.b, (tile + 1) * Tr::kBlockN);
      ++it;
    };
    // The narrow loop's first tile goes into the ring while the consumers finish the last visit, and the Q boxes
    // wait for them. The 64-key seesaw issues nothing until they have released the visit, so that its epilogue's
    // stores are issued with no ring load in flight (0.6-3% faster at 128 heads).
    int tile = vis.tile_begin;
    const int first_pos = it;
    if constexpr (!Tr::kSeesaw64) issue(tile++);
    if (v > 0) ptx::mbarrier_wait_parity(&ss.q_empty, static_cast<uint32_t>(v - 1) & 1u);
    stamp(first_pos, kProbeVisitQIssued);
    if constexpr (Tr::kSeesaw64) ss.visit = vis;  // (released by the arrive of Q's load)
    load_q_boxes_tma<Tr>(ss, tmap_q, p, vis.b, vis.kvh, row0);
    for (; tile < vis.tile_end; ++tile) issue(tile);
    ++v;
  }
  if constexpr (Tr::kSeesaw64) {  // no visit left: the consumers' next q_full phase says so
    if (v > 0) ptx::mbarrier_wait_parity(&ss.q_empty, static_cast<uint32_t>(v - 1) & 1u);
    ss.visit.unit = -1;
    ptx::mbarrier_arrive(&ss.q_full);
  }
}

// The empty units (sequences of length 0) of CTA c of C: units u = c, c + C, ... whose sequence weighs nothing (the
// running sums: no global load ahead of the walk) get zeros, the LSE of no keys (or the sink's) and a descriptor of
// one piece, by the consumer warpgroup in 16-byte stores.
template <class Tr>
__device__ void balanced_empty_units(SharedStorage<Tr>& ss, const DecodeParams& p, int ctid) {
  using Pf = BalancedPrefix<Tr>;
  const int C = balanced_ctas(), c = balanced_cta();
#pragma unroll 1
  for (int u = c; u < p.B * p.Hkv; u += C) {
    const int b = u / p.Hkv, kvh = u % p.Hkv;
    if (*Pf::at(ss, b + 1) != *Pf::at(ss, b)) continue;  // (uniform: a unit with tiles is some share's)
    write_empty_rows<Tr>(p, b, kvh, 0, p.rows, ctid);
    if (ctid == 0) reinterpret_cast<int4*>(p.balanced_desc)[u] = make_int4(1, c, 0, 0);
  }
}

// The consumer warpgroup: the empty units it writes, then each visit through the narrow loop at the N that holds
// p.rows, continuing one ring cursor.
template <class Tr, bool kBf16>
__device__ void consumer_balanced(SharedStorage<Tr>& ss, const DecodeParams& p, int ctid) {
  balanced_empty_units<Tr>(ss, p, ctid);
  NarrowCursor cursor;
  BalancedWalk<Tr> walk(ss, p);
  BalancedVisit vis;
  int v = 0;  // visits (each loads its Q)
  while (walk.next(ss, p, vis)) {
    ptx::mbarrier_wait_parity(&ss.q_full, static_cast<uint32_t>(v++) & 1u);
    TileRange tr;
    tr.L = balanced_len(p, vis.b);
    tr.begin = vis.tile_begin;
    tr.end = vis.tile_end;
    if (p.rows > 16)
      consumer_loop_narrow<Tr, kBf16, 32, true, true>(ss, p, tr, vis.b, vis.kvh, 0, ctid, &cursor, &vis);
    else
      consumer_loop_narrow<Tr, kBf16, 16, true, true>(ss, p, tr, vis.b, vis.kvh, 0, ctid, &cursor, &vis);
  }
}

// The 64-key seesaw's empty units, as balanced_empty_units: units u = c, c + C, ... of this row block's CTAs whose
// sequence is empty (its length read again: the running sums are gone) get zeros and the LSE of no keys (or the
// sink's) in the block's rows [row0, row0 + 64), and from row block 0 a descriptor of one piece.
template <class Tr>
__device__ void balanced_empty_rows(const DecodeParams& p, int C, int c, int row0, int ctid) {
  const int rows = min(Tr::kBlockM, p.rows - row0);
#pragma unroll 1
  for (int u = c; u < p.B * p.Hkv; u += C) {
    const int b = u / p.Hkv, kvh = u % p.Hkv;
    if (balanced_seq_weight<Tr>(p, b) != 0) continue;  // (uniform: a unit with tiles is some share's)
    write_empty_rows<Tr>(p, b, kvh, row0, rows, ctid);
    if (ctid == 0 && row0 == 0) reinterpret_cast<int4*>(p.balanced_desc)[u] = make_int4(1, c, 0, 0);
  }
}

// The 64-key seesaw's consumers (both warpgroups): the empty units, then each visit the producer publishes with
// its Q (SharedStorage::visit; the walk's state would cost the 576-wide loop registers it does not have) through
// the seesaw, one ring position and one Q phase after another.
template <class Tr, bool kBf16>
__device__ void consumer_balanced_seesaw64(SharedStorage<Tr>& ss, const DecodeParams& p, int row0) {
  balanced_empty_rows<Tr>(p, static_cast<int>(gridDim.x), static_cast<int>(blockIdx.x), row0, threadIdx.x);
  int pos = 0;  // ring position of the visit's first tile
#pragma unroll 1
  for (int v = 0;; ++v) {
    ptx::mbarrier_wait_parity(&ss.q_full, static_cast<uint32_t>(v) & 1u);
    if (threadIdx.x == 0) probe_stamp(pos, kProbeVisitQLanded);
    if (ss.visit.unit < 0) break;
    TileRange tr;
    tr.L = balanced_len(p, ss.visit.b);
    tr.begin = ss.visit.tile_begin;
    tr.end = ss.visit.tile_end;
    // The thread index read again each visit, opaque to the compiler: what the loop derives from it is then not
    // hoisted out of this loop and kept live across the visit (the 576-wide loop spilled so).
    int ctid;
    asm volatile("mov.u32 %0, %%tid.x;" : "=r"(ctid));
    consumer_loop_seesaw64<Tr, kBf16, true>(ss, p, tr, ss.visit.b, ss.visit.kvh, row0, 0, ctid, pos, v, &ss.visit);
    pos += tr.end - tr.begin;
  }
}

// The balanced grid of the narrow loop: one CTA a share, (C) or decode_kernel's grid.
template <int D, bool kBf16, int kConfig>
__device__ __forceinline__ void balanced_narrow(const CUtensorMap* tmap_k, const CUtensorMap* tmap_q,
                                                const DecodeParams& p) {
  using Tr = DecodeTraits<D, kConfig>;
  static_assert(Tr::kNarrowOnly && Tr::kSharedKv && Tr::kQByTma && !Tr::kVBarriers,
                "the balanced schedule's narrow loop: one ring, Q by TMA");
  extern __shared__ uint8_t smem_raw[];
  const uint32_t pad = (1024u - (ptx::smem_addr(smem_raw) & 1023u)) & 1023u;  // (as decode_kernel)
  SharedStorage<Tr>& ss = *reinterpret_cast<SharedStorage<Tr>*>(smem_raw + pad);
  if (threadIdx.x == 0) {
#pragma unroll
    for (int s = 0; s < Tr::kStages; ++s) {
      ptx::mbarrier_init(&ss.full_k[s], kFullArrivals);
      ptx::mbarrier_init(&ss.empty_k[s], Tr::kEmptyKArrivals);  // every consumer warp, after its P V
    }
    ptx::mbarrier_init(&ss.q_full, 1);
    ptx::mbarrier_init(&ss.q_empty, Tr::kConsumerThreads / 32);
    ptx::fence_mbarrier_init();
    ptx::prefetch_tensormap(tmap_k);
    ptx::prefetch_tensormap(tmap_q);
  }
  if constexpr (kPdl) {  // (as decode_kernel: nothing global is read before the previous kernel's results are visible)
    ptx::griddep_wait();
    ptx::griddep_launch_dependents();
  }
  __syncthreads();
  balanced_prefix<Tr>(ss, p);
  if (threadIdx.x == Tr::kProducerWarp * 32) {
    auto walk = [&] { return BalancedWalk<Tr>(ss, p); };
    if (p.block_table != nullptr) producer_balanced<Tr, true>(ss, tmap_k, tmap_q, p, walk, 0);
    else producer_balanced<Tr, false>(ss, tmap_k, tmap_q, p, walk, 0);
  } else if (threadIdx.x < Tr::kConsumerThreads) {
    consumer_balanced<Tr, kBf16>(ss, p, threadIdx.x);
  }
}

// The balanced grid of the 64-key seesaw: (C, row blocks), blockIdx.y the row block. Each row block's C CTAs deal
// the units among themselves as the narrow grid's do, with the same shares in every row block (a unit's tiles
// weigh the same for each), so the row blocks of a unit read its tiles at about the same time, the later from
// L2; a piece's rows of one row block go to its slot's rows of that block.
template <int D, bool kBf16, int kConfig>
__device__ __forceinline__ void balanced_seesaw64(const CUtensorMap* tmap_k, const CUtensorMap* tmap_q,
                                                  const DecodeParams& p) {
  using Tr = DecodeTraits<D, kConfig>;
  extern __shared__ uint8_t smem_raw[];
  const uint32_t pad = (1024u - (ptx::smem_addr(smem_raw) & 1023u)) & 1023u;  // (as decode_kernel)
  SharedStorage<Tr>& ss = *reinterpret_cast<SharedStorage<Tr>*>(smem_raw + pad);
  if (threadIdx.x == 0) {
    probe_timeline(kTimelineEntry);
    probe_timeline(kTimelineSmId);
#pragma unroll
    for (int s = 0; s < Tr::kStages; ++s) {  // halves: each freed by the four warps whose P V reads it
      ptx::mbarrier_init(&ss.full_k[s], kFullArrivals);
      ptx::mbarrier_init(&ss.empty_k[s], Tr::kEmptyKArrivals);
      ptx::mbarrier_init(&ss.full_v[s], kFullArrivals);
      ptx::mbarrier_init(&ss.empty_v[s], Tr::kEmptyVArrivals);
    }
    if constexpr (Tr::kRopeRing)
      for (int s = 0; s < Tr::kRopeStages; ++s) ptx::mbarrier_init(&ss.empty_rope[s], Tr::kEmptyRopeArrivals);
    for (int i = 0; i < 2; ++i) ptx::mbarrier_init(&ss.p_full[i], SharedStorage<Tr>::kPublishArrivals);
    ptx::mbarrier_init(&ss.q_full, 1);
    ptx::mbarrier_init(&ss.q_empty, Tr::kConsumerThreads);  // (every consumer thread: consumer_loop_seesaw64)
    ptx::fence_mbarrier_init();
    ptx::prefetch_tensormap(tmap_k);
    ptx::prefetch_tensormap(tmap_q);
  }
  if constexpr (kPdl) {
    ptx::griddep_wait();
    ptx::griddep_launch_dependents();
  }
  if (threadIdx.x == 0) probe_timeline(kTimelineGridDep);
  __syncthreads();
  balanced_prefix<Tr, BalancedSumsInRing<Tr>>(ss, p);
  // The sums' generic stores before the ring's first TMA writes over them (the producer's, after this barrier).
  ptx::fence_proxy_async_shared();
  __syncthreads();
  const int C = static_cast<int>(gridDim.x), c = static_cast<int>(blockIdx.x);
  const int row0 = static_cast<int>(blockIdx.y) * Tr::kBlockM;
  const int warp = threadIdx.x / 32;
  if (warp >= Tr::kProducerWarp) {
    if constexpr (Tr::kSetMaxNReg) ptx::setmaxnreg_dec<Tr::kProducerRegs>();
    if (threadIdx.x == Tr::kProducerWarp * 32) {  // (the only reader of the sums: its loads may overwrite them)
      auto walk = [&] { return BalancedWalkByLengths<Tr>(ss, p, C, c); };
      if (p.block_table != nullptr) producer_balanced<Tr, true>(ss, tmap_k, tmap_q, p, walk, row0);
      else producer_balanced<Tr, false>(ss, tmap_k, tmap_q, p, walk, row0);
    }
    return;
  }
  if constexpr (Tr::kSetMaxNReg) ptx::setmaxnreg_inc<Tr::kConsumerRegs>();
  consumer_balanced_seesaw64<Tr, kBf16>(ss, p, row0);
  if (threadIdx.x == 0) probe_timeline(kTimelineEnd);
}

// The balanced grid's entry (the host launches it where DecodeParams::balanced holds). The narrow loop:
// decode_kernel's grid (num_splits, Hkv, B), or a 1-D grid of as many CTAs as the SMs hold where the plan's has more;
// the 64-key seesaw: (C, row blocks), C CTAs a row block, at most one wave in all. Never more CTAs a row block than
// the plan's (the workspace has two piece slots for each of those, params.h); every CTA one share (BalancedWalk);
// the same ring, Q and loop as decode_kernel's instantiation (tmap_q: Q's map, in the slot where that kernel takes
// it), in a kernel of its own so that this code leaves that kernel's registers alone.
template <int D, bool kBf16, int kConfig>
__global__ void __launch_bounds__(DecodeTraits<D, kConfig>::kMaxThreads, DecodeTraits<D, kConfig>::kCtasPerSm)
    decode_kernel_balanced(const __grid_constant__ CUtensorMap tmap_k, const __grid_constant__ CUtensorMap tmap_q,
                           const DecodeParams p) {
  if constexpr (DecodeTraits<D, kConfig>::kSeesaw64) balanced_seesaw64<D, kBf16, kConfig>(&tmap_k, &tmap_q, p);
  else balanced_narrow<D, kBf16, kConfig>(&tmap_k, &tmap_q, p);
}

}  // namespace sm90
}  // namespace fmha
