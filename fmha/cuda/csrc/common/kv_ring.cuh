// fmha: the K/V ring, arch-neutral: the producer (one thread streams K and V tiles by TMA into rings
// of stages completing on mbarriers; gathered pages: several warps' cp.async) and the consumer side's waits,
// releases and the V-tail clear.
//
// A kernel's shared-memory plan Ss provides the ring:
//   uint16_t k[Tr::kStages][Tr::kStageBoxes][Tr::kBlockN * Tr::kBoxCols], v[Tr::kStagesV][...]  (swizzled boxes)
//   uint64_t full_k[kStages], full_v[kStagesV]    TMA bytes of the stage's tile landed
//   uint64_t empty_k[kStages], empty_v[kStagesV]  the stage's readers are done with its tile
// and its traits Tr the tile shape (kBlockN, kBoxes, kBoxCols, kRowBytes, kTmaRows, kKvTileBytes,
// kStages, kStagesV, kConsumerThreads, kHeadDimV, kStageBoxes). Tr::kSharedKv (one ring, DeepSeek's shared latent): V
// is the first kHeadDimV columns of the K stage; the V ring, its barriers and its loads go unused, and
// the consumers release a K stage once P V read it. Tr::kRingHalves (with kSharedKv): a stage fills and
// frees in two halves, boxes [0, Tr::kHalfBoxes) on full_k / empty_k and the rest on full_v / empty_v.
// Tr::kRopeRing (with halves): a stage holds Tr::kStageBoxes boxes, and the key's last box (the rope) lands with the
// second half in Ss::rope[Tr::rope_stage(position)], freed on Ss::empty_rope.
#pragma once

#include <cuda.h>  // CUtensorMap (types only)

#include <cstdint>

#include "probe.cuh"
#include "ptx.cuh"
#include "rows.cuh"

namespace fmha {

// Named barrier of the consumers that clear a V tail (wait_v_stage); the arch kernels number theirs
// around it (0 is __syncthreads).
constexpr uint32_t kBarVTail = 2;

// mbarrier arrival counts.
constexpr uint32_t kFullArrivals = 1;  // the producer's arrive.expect_tx

// A consumer's wait for a full stage (ring position `it`), stamped by thread 0 under the probe. gathered
// (kv_gather): the stage was written by cp.async, generic-proxy writes that this thread's wgmmas (async
// proxy) then read, so a proxy fence follows the wait; TMA-filled stages need none.
__device__ __forceinline__ void wait_full_stage(uint64_t* full, uint32_t phase, int it, int wait_event, int ctid,
                                                bool gathered) {
  if (ctid == 0) probe_stamp(it, wait_event);
  ptx::mbarrier_wait_parity(full, phase);
  if (gathered) ptx::fence_proxy_async_shared();
  if (ctid == 0) {
    probe_stamp(it, wait_event + 1);
    if (it == 0 && wait_event == kProbeKFullWait) probe_timeline(kTimelineFirstK);
    if (wait_event == kProbeVFullWait) probe_timeline(kTimelineLastV);  // the last one stays
  }
}

// ----------------------------------------------------------------------------
// Producer: one thread streams K and V tiles into the ring by TMA (the gather: producer_loop_gather).
// ----------------------------------------------------------------------------
// One K or V tile (kBlockN tokens from token0, all boxes) into one ring stage, completing on `full`,
// with an L2 evict-first policy (the cache is streamed once).
// Pieces of kTmaRows tokens, box after box within a piece, so the halves of a D = 128 cache row
// are requested close together when kTmaRows < kBlockN. Boxes [kBox0, kBox1) only: half a stage (kRingHalves), into
// dst's boxes from kDst0 on (the rope ring's: kDst0 = kBox0).
template <class Tr, int kBox0 = 0, int kBox1 = Tr::kStageBoxes, int kDst0 = 0, int kN>
__device__ __forceinline__ void load_kv_tile(uint16_t (&dst)[kN][Tr::kBlockN * Tr::kBoxCols],
                                             const CUtensorMap* tmap, uint64_t* full, int token0, int kvh, int b,
                                             int head_major, uint64_t policy) {
#pragma unroll
  for (int r = 0; r < Tr::kBlockN; r += Tr::kTmaRows) {
    // Coordinates of dims 1 and 2: (token, head) or (head, token), see DecodeParams.
    const int c1 = head_major ? kvh : token0 + r, c2 = head_major ? token0 + r : kvh;
#pragma unroll
    for (int bx = kBox0; bx < kBox1; ++bx) {
      ptx::tma_load_4d_hint(&dst[bx - kDst0][r * Tr::kBoxCols], tmap, full, bx * Tr::kBoxCols, c1, c2, b, policy);
    }
  }
}

// Paged caches (DecodeParams::block_table): the pool page holding logical token `token` of sequence b, its
// id clamped into the pool, and the token's row in it (>= page_size past the table's last page: TMA
// then reads zeros).
struct PagedRow {
  int block, row;
};
__device__ __forceinline__ PagedRow paged_row(const DecodeParams& p, int b, int token) {
  const int page = min(token / p.page_size, p.max_blocks_per_seq - 1);
  const int id = __ldg(p.block_table + b * p.block_table_stride + page);
  return PagedRow{min(max(id, 0), p.num_blocks - 1), token - page * p.page_size};
}

// Arrivals that complete a full barrier: the TMA producer's one arrive.expect_tx, or every lane of the
// Tr::kGatherWarps gathering producer warps.
template <class Tr>
__device__ __forceinline__ uint32_t ring_full_arrivals(const DecodeParams& p) {
  return kv_gather(p) ? 32u * Tr::kGatherWarps : kFullArrivals;
}

// The ring's barriers, initialised by one thread: a full barrier expects full_arrivals (ring_full_arrivals),
// an empty barrier the arrivals of whatever releases a stage (one tcgen05.commit on sm_100a). One ring
// (kSharedKv, whole stages) has no V barriers.
template <class Tr, class Ss>
__device__ __forceinline__ void init_kv_ring(Ss& ss, uint32_t full_arrivals, uint32_t empty_k_arrivals,
                                             uint32_t empty_v_arrivals) {
#pragma unroll
  for (int s = 0; s < Tr::kStages; ++s) {
    ptx::mbarrier_init(&ss.full_k[s], full_arrivals);
    ptx::mbarrier_init(&ss.empty_k[s], empty_k_arrivals);
  }
  if constexpr (!Tr::kSharedKv || Tr::kRingHalves) {
#pragma unroll
    for (int s = 0; s < Tr::kStagesV; ++s) {
      ptx::mbarrier_init(&ss.full_v[s], full_arrivals);
      ptx::mbarrier_init(&ss.empty_v[s], empty_v_arrivals);
    }
  }
}

// The pages of one tile's TMA boxes (paged caches), looked up a tile ahead so that the latency of the
// table loads overlaps the ring wait instead of delaying the refill: box i covers tokens token0 + i
// p.page_box_rows onwards (page_box_rows >= Tr::kPagedMinBoxRows, 8 or more). Tr::kLeanProducer
// (a producer on setmaxnreg's few registers, Tr::kProducerRegs): only the page ids are kept, and a box's row in its page is
// recomputed when it is issued.
template <class Tr>
struct PagedTile {
  static constexpr int kMaxBoxes = Tr::kBlockN / Tr::kPagedMinBoxRows;
  PagedRow box[kMaxBoxes];
  __device__ __forceinline__ void lookup(const DecodeParams& p, int b, int token0) {
#pragma unroll
    for (int i = 0; i < kMaxBoxes; ++i)
      if (i * p.page_box_rows < Tr::kBlockN) {
        if constexpr (Tr::kLeanProducer) box[i] = PagedRow{paged_row(p, b, token0 + i * p.page_box_rows).block, 0};
        else box[i] = paged_row(p, b, token0 + i * p.page_box_rows);
      }
  }
};

// load_kv_tile through the block table: boxes of p.page_box_rows tokens from token0 on, each inside one page
// (the tensor map's dims 1-3 are then (page row, head) or (head, page row), and the page); boxes [kBox0, kBox1), into
// dst's boxes from kDst0 on.
template <class Tr, int kBox0 = 0, int kBox1 = Tr::kStageBoxes, int kDst0 = 0, int kN>
__device__ __forceinline__ void load_kv_tile_paged(uint16_t (&dst)[kN][Tr::kBlockN * Tr::kBoxCols],
                                                   const CUtensorMap* tmap, uint64_t* full, const DecodeParams& p,
                                                   const PagedTile<Tr>& pages, int token0, int kvh,
                                                   int head_major, uint64_t policy) {
#pragma unroll
  for (int i = 0; i < PagedTile<Tr>::kMaxBoxes; ++i) {
    const int r = i * p.page_box_rows;
    if (r >= Tr::kBlockN) break;
    PagedRow pr = pages.box[i];
    if constexpr (Tr::kLeanProducer) {  // the row as paged_row computes it
      const int token = token0 + r;
      pr.row = token - min(token / p.page_size, p.max_blocks_per_seq - 1) * p.page_size;
    }
    const int c1 = head_major ? kvh : pr.row, c2 = head_major ? pr.row : kvh;
#pragma unroll
    for (int bx = kBox0; bx < kBox1; ++bx)
      ptx::tma_load_4d_hint(&dst[bx - kDst0][r * Tr::kBoxCols], tmap, full, bx * Tr::kBoxCols, c1, c2, pr.block,
                            policy);
  }
}

// The gather path: Tr::kGatherWarps producer warps share a tile, warp w its rows [w kRows, (w + 1) kRows).
// A warp's rows, looked up by its lanes in turn (lane l: rows l, l + 32, ... of the warp's share;
// consecutive lanes read consecutive table entries): each row's page and its row in the page, -1 for rows
// at or past the sequence capacity S. Looked up a tile ahead, like PagedTile, so that the table loads
// overlap the ring waits; K and V share the lookup.
template <class Tr>
struct GatherRows {
  static constexpr int kRows = Tr::kBlockN / Tr::kGatherWarps;
  static constexpr int kPerLane = (kRows + 31) / 32;
  static_assert(kRows % 4 == 0, "gather: whole 4-row groups per warp");
  int block[kPerLane], row[kPerLane];
  // token0: the first token of this warp's share.
  __device__ __forceinline__ void lookup(const DecodeParams& p, int b, int token0, int lane) {
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      const int token = token0 + lane + 32 * i;
      const bool valid = lane + 32 * i < kRows && token < p.S;
      const PagedRow pr = paged_row(p, b, valid ? token : 0);
      block[i] = pr.block;
      row[i] = valid ? pr.row : -1;
    }
  }
};

// One warp's share of a tile (rows r0 .. r0 + kRows - 1) into one ring stage (the gather path), four rows
// per cp.async instruction: lane l copies 16-byte chunk l % 8 of row 4 g + l / 8, so that each instruction
// reads four whole 128-byte lines. Chunks go where TMA's 128B swizzle would put them (chunk c of row r
// at c ^ (r % 8)); rows at or past the sequence capacity S are zero-filled. A row's page comes from the
// lane that looked it up (GatherRows), by shuffle. Boxes [kBox0, kBox1) only: half a stage (kRingHalves), into dst's
// boxes from kDst0 on.
template <class Tr, int kBox0 = 0, int kBox1 = Tr::kStageBoxes, int kDst0 = 0, int kN>
__device__ __forceinline__ void gather_kv_tile(uint16_t (&dst)[kN][Tr::kBlockN * Tr::kBoxCols],
                                               const void* pool, int64_t s_blk, int64_t s_tok, int64_t s_h,
                                               const GatherRows<Tr>& rows, int r0, int kvh, int lane) {
  static_assert(Tr::kRowBytes == 128 && Tr::kBlockN % 4 == 0, "gather: 128-byte box rows, 4-row groups");
  using Rows = GatherRows<Tr>;
  const uint32_t base = ptx::smem_addr(&dst[0][0]);
  const int sub = lane / 8, chunk = lane % 8;
  const uint16_t* head = static_cast<const uint16_t*>(pool) + kvh * s_h + chunk * 8;
  if constexpr (Tr::kLeanProducer) {
    // At most 32 rows a warp (kPerLane = 1), its row groups as a loop: setmaxnreg's few registers.
    static_assert(Rows::kPerLane == 1, "lean gather: one lookup entry per lane");
#pragma unroll 1
    for (int g = 0; g < Rows::kRows / 4; ++g) {
      const int r = 4 * g + sub;
      const int block = __shfl_sync(0xffffffffu, rows.block[0], r);
      const int row = __shfl_sync(0xffffffffu, rows.row[0], r);
      const uint16_t* src = head + block * s_blk + max(row, 0) * s_tok;
      const int rt = r0 + r;  // the row in the tile
      const uint32_t to = base + rt * Tr::kRowBytes + ((chunk ^ (rt % 8)) * 16), bytes = row >= 0 ? 16u : 0u;
#pragma unroll
      for (int bx = kBox0; bx < kBox1; ++bx)
        ptx::cp_async_16(to + (bx - kDst0) * Tr::kKvBoxBytes, src + bx * Tr::kBoxCols, bytes);
    }
  } else {
#pragma unroll
    for (int g = 0; g < Rows::kRows / 4; ++g) {
      const int r = 4 * g + sub;  // lane r % 32 looked this row up, as entry r / 32 = (4 g) / 32
      const int block = __shfl_sync(0xffffffffu, rows.block[(4 * g) / 32], (4 * g) % 32 + sub);
      const int row = __shfl_sync(0xffffffffu, rows.row[(4 * g) / 32], (4 * g) % 32 + sub);
      const uint16_t* src = head + block * s_blk + max(row, 0) * s_tok;
      const int rt = r0 + r;  // the row in the tile (r0 % 8 == 0 keeps the swizzle phase)
      const uint32_t to = base + rt * Tr::kRowBytes + ((chunk ^ (rt % 8)) * 16), bytes = row >= 0 ? 16u : 0u;
#pragma unroll
      for (int bx = kBox0; bx < kBox1; ++bx)
        ptx::cp_async_16(to + (bx - kDst0) * Tr::kKvBoxBytes, src + bx * Tr::kBoxCols, bytes);
    }
  }
}

// The gather path's producer, run by each of the Tr::kGatherWarps gathering warps (gw: which one): every
// lane issues its copies of the warp's share of a tile and arrives on the stage's full barrier when they
// land (cp.async.mbarrier.arrive; the barrier expects 32 kGatherWarps arrivals and no transaction bytes),
// so the whole ring is in flight as on the TMA path. The consumers' proxy fence after their wait
// (wait_full_stage, gathered) makes the copies visible to the wgmmas. K is issued before V's stage is
// waited for: the overlapped loop waits for K(it + 2) before it releases V(it).
template <class Tr, class Ss>
__device__ __forceinline__ void producer_loop_gather(Ss& ss, const DecodeParams& p, const TileRange& tr, int kvh,
                                                     int b, int lane, int gw) {
  constexpr int kRows = GatherRows<Tr>::kRows;
  const int r0 = gw * kRows;
  GatherRows<Tr> rows;  // the next tile's rows of this warp
  if (tr.begin < tr.end) rows.lookup(p, b, tr.begin * Tr::kBlockN + r0, lane);
  for (int tile = tr.begin, it = 0; tile < tr.end; ++tile, ++it) {
    const int stage = it % Tr::kStages, stage_v = it % Tr::kStagesV;
    ptx::mbarrier_wait_parity(&ss.empty_k[stage], (static_cast<uint32_t>(it / Tr::kStages) & 1u) ^ 1u);
    gather_kv_tile<Tr, 0, Tr::kHalfBoxes>(ss.k[stage], p.k, p.k_blk, p.k_tok, p.k_h, rows, r0, kvh, lane);
    ptx::cp_async_mbarrier_arrive_noinc(&ss.full_k[stage]);
    if constexpr (Tr::kRingHalves) {  // the stage's second half, on its own barriers
      ptx::mbarrier_wait_parity(&ss.empty_v[stage], (static_cast<uint32_t>(it / Tr::kStages) & 1u) ^ 1u);
      gather_kv_tile<Tr, Tr::kHalfBoxes>(ss.k[stage], p.k, p.k_blk, p.k_tok, p.k_h, rows, r0, kvh, lane);
      if constexpr (Tr::kRopeRing) {  // the rope box, into its own ring (landing with the second half)
        ptx::mbarrier_wait_parity(&ss.empty_rope[Tr::rope_stage(it)], Tr::rope_phase(it) ^ 1u);
        gather_kv_tile<Tr, Tr::kStageBoxes, Tr::kBoxes, Tr::kStageBoxes>(ss.rope[Tr::rope_stage(it)], p.k, p.k_blk,
                                                                         p.k_tok, p.k_h, rows, r0, kvh, lane);
      }
      ptx::cp_async_mbarrier_arrive_noinc(&ss.full_v[stage]);
    }
    if constexpr (!Tr::kSharedKv) {  // (one ring: V is read from the K stage)
      ptx::mbarrier_wait_parity(&ss.empty_v[stage_v], (static_cast<uint32_t>(it / Tr::kStagesV) & 1u) ^ 1u);
      gather_kv_tile<Tr>(ss.v[stage_v], p.v, p.v_blk, p.v_tok, p.v_h, rows, r0, kvh, lane);
      ptx::cp_async_mbarrier_arrive_noinc(&ss.full_v[stage_v]);
    }
    if (tile + 1 < tr.end) rows.lookup(p, b, (tile + 1) * Tr::kBlockN + r0, lane);
  }
}

// Tr::kRopeRing: the rope box of the tile at token0, ring position pos, into its rope stage once the owner's
// Q K^T of position pos - Tr::kRopeStages completed (empty_rope), on the stage's second-half barrier `full` (whose
// bytes count it).
template <class Tr, bool kPaged, class Ss>
__device__ __forceinline__ void load_rope_box(Ss& ss, const CUtensorMap* tmap, uint64_t* full, const DecodeParams& p,
                                              const PagedTile<Tr>& pages, int pos, int token0, int kvh, int b,
                                              int head_major, uint64_t policy) {
  const int rs = Tr::rope_stage(pos);
  ptx::mbarrier_wait_parity(&ss.empty_rope[rs], Tr::rope_phase(pos) ^ 1u);
  constexpr int kRope = Tr::kStageBoxes;  // the key's box past V's
  if constexpr (kPaged)
    load_kv_tile_paged<Tr, kRope, kRope + 1, kRope>(ss.rope[rs], tmap, full, p, pages, token0, kvh, head_major, policy);
  else
    load_kv_tile<Tr, kRope, kRope + 1, kRope>(ss.rope[rs], tmap, full, token0, kvh, b, head_major, policy);
}

// The TMA producer (one thread): K and V tiles of every tile of the range, through the block table for
// paged caches (kPaged: a separate instance, so that the contiguous producer carries no paging code).
template <class Tr, bool kPaged, class Ss>
__device__ __forceinline__ void producer_loop(Ss& ss, const CUtensorMap* tmap_k, const CUtensorMap* tmap_v,
                                              const DecodeParams& p, const TileRange& tr, int kvh, int b) {
  const int k_head_major = p.k_head_major, v_head_major = p.v_head_major;
  ptx::prefetch_tensormap(tmap_k);
  ptx::prefetch_tensormap(tmap_v);
  const uint64_t policy = ptx::create_policy_evict_first();
  PagedTile<Tr> pages;  // paged: the next tile's pages
  if (kPaged && tr.begin < tr.end) pages.lookup(p, b, tr.begin * Tr::kBlockN);
  for (int tile = tr.begin, it = 0; tile < tr.end; ++tile, ++it) {
    const int stage = it % Tr::kStages;
    const uint32_t phase = static_cast<uint32_t>(it / Tr::kStages) & 1u;
    probe_stamp(it, kProbeKEmptyWait);
    ptx::mbarrier_wait_parity(&ss.empty_k[stage], phase ^ 1u);  // first round passes on fresh barriers
    constexpr int kHalf = Tr::kHalfBoxes;  // (kBoxes but with kRingHalves)
    ptx::mbarrier_arrive_expect_tx(&ss.full_k[stage], Tr::kKvTileBytes / Tr::kBoxes * kHalf);
    if constexpr (kPaged)
      load_kv_tile_paged<Tr, 0, kHalf>(ss.k[stage], tmap_k, &ss.full_k[stage], p, pages, tile * Tr::kBlockN, kvh,
                                       k_head_major, policy);
    else
      load_kv_tile<Tr, 0, kHalf>(ss.k[stage], tmap_k, &ss.full_k[stage], tile * Tr::kBlockN, kvh, b, k_head_major,
                                 policy);
    if constexpr (Tr::kRingHalves) {  // the stage's second half, on its own barriers
      ptx::mbarrier_wait_parity(&ss.empty_v[stage], phase ^ 1u);
      ptx::mbarrier_arrive_expect_tx(&ss.full_v[stage], Tr::kKvTileBytes / Tr::kBoxes * (Tr::kBoxes - kHalf));
      if constexpr (kPaged)
        load_kv_tile_paged<Tr, kHalf>(ss.k[stage], tmap_k, &ss.full_v[stage], p, pages, tile * Tr::kBlockN, kvh,
                                      k_head_major, policy);
      else
        load_kv_tile<Tr, kHalf>(ss.k[stage], tmap_k, &ss.full_v[stage], tile * Tr::kBlockN, kvh, b, k_head_major,
                                policy);
      if constexpr (Tr::kRopeRing)
        load_rope_box<Tr, kPaged>(ss, tmap_k, &ss.full_v[stage], p, pages, it, tile * Tr::kBlockN, kvh, b,
                                  k_head_major, policy);
    }
    probe_stamp(it, kProbeKIssued);
    if constexpr (!Tr::kSharedKv) {  // (one ring: V is read from the K stage)
      const int stage_v = it % Tr::kStagesV;
      const uint32_t phase_v = static_cast<uint32_t>(it / Tr::kStagesV) & 1u;
      probe_stamp(it, kProbeVEmptyWait);
      ptx::mbarrier_wait_parity(&ss.empty_v[stage_v], phase_v ^ 1u);
      ptx::mbarrier_arrive_expect_tx(&ss.full_v[stage_v], Tr::kKvTileBytes);
      if constexpr (kPaged)
        load_kv_tile_paged<Tr>(ss.v[stage_v], tmap_v, &ss.full_v[stage_v], p, pages, tile * Tr::kBlockN, kvh,
                               v_head_major, policy);
      else
        load_kv_tile<Tr>(ss.v[stage_v], tmap_v, &ss.full_v[stage_v], tile * Tr::kBlockN, kvh, b, v_head_major,
                         policy);
      probe_stamp(it, kProbeVIssued);
    }
    if (kPaged && tile + 1 < tr.end) pages.lookup(p, b, (tile + 1) * Tr::kBlockN);
  }
}

// ----------------------------------------------------------------------------
// Consumer pieces
// ----------------------------------------------------------------------------

// Zero the V rows [valid, kBlockN) of one ring stage, in every box. Tokens in
// [L, S) are real cache memory (only tokens >= S come back as TMA zero fill);
// P is exactly 0 there, but 0 * NaN = NaN in the MMA, so garbage in unused
// cache slots would otherwise reach the output. A whole 128 B row is cleared,
// so the 128B swizzle (a permutation within the row) does not matter.
// kThreads threads take part, thread index ctid.
// kSharedKv: the V columns of the K stage, once every Q K^T that reads the stage has completed.
template <class Tr, int kThreads = Tr::kConsumerThreads, class Ss>
__device__ __forceinline__ void zero_v_tail(Ss& ss, int stage, int valid, int ctid) {
  constexpr int kChunksPerRow = Tr::kRowBytes / 16;  // 16 B chunks
  constexpr int kBoxesV = Tr::kHeadDimV / Tr::kBoxCols;
  const int per_box = (Tr::kBlockN - valid) * kChunksPerRow;  // chunks to clear in each box
  const uint4 zero = make_uint4(0u, 0u, 0u, 0u);
  for (int e = ctid; e < kBoxesV * per_box; e += kThreads) {
    const int box = e / per_box;
    uint16_t* rows;
    if constexpr (Tr::kSharedKv) rows = ss.k[stage][box];
    else rows = ss.v[stage][box];
    reinterpret_cast<uint4*>(rows)[valid * kChunksPerRow + e % per_box] = zero;
  }
}

// Tile `it`'s V rows past the sequence zeroed in its stage by kThreads threads (zero_v_tail), then fenced for the
// MMA's reads; nothing where the tile is whole.
template <class Tr, int kThreads, class Ss>
__device__ __forceinline__ void clear_v_tail(Ss& ss, const TileRange& tr, int it, int stage, int tid) {
  const int valid = max(tr.L - (tr.begin + it) * Tr::kBlockN, 0);  // uniform: the barrier is safe
  if (valid < Tr::kBlockN) {
    zero_v_tail<Tr, kThreads>(ss, stage, valid, tid);
    ptx::fence_proxy_async_shared();  // generic stores -> the MMA's async-proxy reads
    ptx::named_barrier_sync(kBarVTail, kThreads);
  }
}

// One warp's arrival on a stage's "empty" barrier, once its wgmmas reading the stage completed.
__device__ __forceinline__ void release_stage(uint64_t* empty, int lane) {
  __syncwarp();
  if (lane == 0) ptx::mbarrier_arrive(empty);
}

// One warp's release of ring stage `stage`'s V tile once its P V completed: on the V ring, or (one ring)
// on the K stage itself, whose Q K^T completed before.
template <class Tr, class Ss>
__device__ __forceinline__ void release_v_stage(Ss& ss, int stage, int lane) {
  if constexpr (Tr::kSharedKv) release_stage(&ss.empty_k[stage], lane);
  else release_stage(&ss.empty_v[stage], lane);
}

// Wait for the V tile of ring position `it`; clear its rows past the sequence (see zero_v_tail). The
// clearing threads are kThreads (all consumers by default) of index clear_tid (-1: ctid), which sync on
// kBarVTail; clear = false: this thread only waits (the seesaw's other warpgroup, see consumer_loop_seesaw).
template <class Tr, int kThreads = Tr::kConsumerThreads, class Ss>
__device__ __forceinline__ void wait_v_stage(Ss& ss, const TileRange& tr, int it, int stage, uint32_t phase, int ctid,
                                             bool gathered, int clear_tid = -1, bool clear = true) {
  // (kSharedKv: the K stage's wait again, which the stage's Q K^T passed already; the stage is not
  // released before its P V, so the phase cannot have moved on.)
  uint64_t* full;
  if constexpr (Tr::kSharedKv) full = &ss.full_k[stage];
  else full = &ss.full_v[stage];
  wait_full_stage(full, phase, it, kProbeVFullWait, ctid, gathered);
  if (clear) clear_v_tail<Tr, kThreads>(ss, tr, it, stage, clear_tid < 0 ? ctid : clear_tid);
}
template <class Tr, int kThreads = Tr::kConsumerThreads, class Ss>
__device__ __forceinline__ void wait_v_tile(Ss& ss, const TileRange& tr, int it, int ctid, bool gathered,
                                            int clear_tid = -1, bool clear = true) {
  wait_v_stage<Tr, kThreads>(ss, tr, it, it % Tr::kStagesV, static_cast<uint32_t>(it / Tr::kStagesV) & 1u, ctid,
                             gathered, clear_tid, clear);
}
// Wait for the K tile of ring position `it` (stamped by thread 0 under the probe).
template <class Tr, class Ss>
__device__ __forceinline__ void wait_k_tile(Ss& ss, int it, int ctid, bool gathered) {
  wait_full_stage(&ss.full_k[it % Tr::kStages], static_cast<uint32_t>(it / Tr::kStages) & 1u, it, kProbeKFullWait,
                  ctid, gathered);
}

}  // namespace fmha
