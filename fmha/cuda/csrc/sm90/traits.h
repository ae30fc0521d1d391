// fmha sm_90a: the compile-time traits of one kernel (head dim x configuration, from config.h), its
// shared-memory plan and its named barriers.
#pragma once

#include <climits>  // INT_MAX
#include <cstddef>  // offsetof
#include <cstdint>

#include <cuda_runtime.h>  // float4

#include "../common/merge_layout.h"
#include "config.h"

namespace fmha {
namespace sm90 {

template <int D, int kConfig>
struct DecodeTraits {
  static_assert(D == 64 || D == 128 || D == 256 || D == 512 || D == 576, "head dim");
  static_assert(has_config(D, kConfig), "no such configuration at this head dim (config.h)");
  static constexpr Config kCfg = config_table(D, kConfig);
  static constexpr int kHeadDim = D;                 // Q's and K's
  static constexpr int kHeadDimV = head_dim_v(D);    // V's and the output's
  // One ring (DeepSeek's shared latent): V is the first kHeadDimV columns of the K stage, which both
  // Q K^T and P V read before it is released; there is no V ring (kStagesV names K's).
  static constexpr bool kSharedKv = kCfg.shared_kv;
  // Serves KV-head pairs (DecodeParams::head_pairs): the C API runs them on the D = 128 stream kernel only,
  // so no other instantiation carries their code.
  static constexpr bool kHeadPairs = D == 128 && kConfig == FMHA_CONFIG_STREAM;
  static constexpr int kBlockM = 64;         // packed query rows per CTA (one wgmma M)
  static constexpr int kBlockN = kCfg.tile_n;  // KV tokens per tile
  static constexpr int kStages = kCfg.stages_k;
  static constexpr int kCtasPerSm = kCfg.ctas_per_sm;
  // Only the narrow loop (Mainloop::kNarrowOnly): one warpgroup at any head dim.
  static constexpr bool kNarrowOnly = kCfg.loop == Mainloop::kNarrowOnly;
  static constexpr int kConsumerWGs = D >= 512 && !kNarrowOnly ? 2 : 1;
  // Two consumer warpgroups take turns over the tiles (consumer_loop_seesaw: each computes S of every
  // other tile over the whole head dim and shares P), or split the head dim of Q K^T and exchange their
  // partial scores (kSplitQk; otherwise each would compute the full S: 1.5x the MMA work).
  static constexpr bool kSeesaw = kCfg.loop == Mainloop::kSeesaw || kCfg.loop == Mainloop::kSeesaw64;
  // The seesaw over 64-key tiles (consumer_loop_seesaw64): two ring stages, tile it in stage it % 2 (three stages
  // of 48-key tiles: stage it % 3).
  static constexpr bool kSeesaw64 = kCfg.loop == Mainloop::kSeesaw64;
  // Split partials for the combine kernel in fp16 where the output is bf16 (DecodeParams::partials_f16): the 64-key
  // seesaw's, whose 4-split launches at 64 and 128 heads spend their tail writing them and merging them.
  static constexpr bool kHalfPartials = kSeesaw64 && kSharedKv;
  // A ring stage fills and frees in two halves (common/kv_ring.cuh): boxes [0, kHalfBoxes) land on full_k
  // and are freed on empty_k by warpgroup 0 (whose P V reads them), the rest on full_v / empty_v by
  // warpgroup 1, so that each half reloads as soon as its one reader is done.
  static constexpr bool kRingHalves = kSeesaw64;
  // Who frees a ring stage (the empty barriers' arrival counts; the stream-only probe arrives the same way):
  // a K stage is freed by one warpgroup's warps where only one reads it after its Q K^T (the seesaw with
  // separate K and V: the tile's owner; halves: warpgroup 0, whose P V reads the first half), else by every
  // consumer warp. V barriers exist for a V ring or a stage's second half (warpgroup 1's).
  static constexpr bool kKFreedByOneWg = kSeesaw && (!kSharedKv || kRingHalves);
  // The producer may load Q by TMA (DecodeParams::q_tma) through the V-map slot, which the shared-latent 64-key
  // seesaw and narrow loop leave free: boxes of kQTmaRows rows (below).
  static constexpr bool kQByTma = kSeesaw64 || (kNarrowOnly && kSharedKv);
  static constexpr bool kVBarriers = !kSharedKv || kRingHalves;
  // The softmax keeps a lazy reference max (online_softmax_tile): the 64-key seesaw's accumulator rescales lie
  // on the hand-off chain between its warpgroups.
  static constexpr bool kLazyMax = kSeesaw64;
  // ... and reduces its rows in short chains (online_softmax_tile), for the same reason.
  static constexpr bool kShortChains = kSeesaw64;
  static constexpr bool kSplitQk = kCfg.split_qk;
  static constexpr bool kOverlap = kCfg.loop == Mainloop::kOverlapped;
  static constexpr bool kSkipUnitRescale = D >= kSkipUnitRescaleMinD;  // see rescale_acc
  static constexpr int kOutCols = kHeadDimV / kConsumerWGs;  // output columns per consumer warpgroup (PV wgmma N)
  // consumer_loop_narrow (at most kNarrowRows packed rows): one warpgroup, whole 64-key M blocks. The shared
  // latent's takes 32 (N = 32 above 16 rows): the 64-key seesaw multiplies those rows padded to 64.
  static constexpr int kNarrowRows = kNarrowOnly ? 32 : 16;
  static_assert(!kNarrowOnly || kSharedKv, "the narrow-only loop is the shared latent's (LATENT_NARROW)");
  // Rows of a Q TMA box (kQByTma): a row block, or the narrow loop's rows, its B operand's N.
  static constexpr int kQTmaRows = kNarrowOnly ? kNarrowRows : kBlockM;
  static constexpr bool kNarrow = kCfg.narrow;
  static constexpr bool kClusterMerge = kCfg.cluster_merge;
  // Packed query rows up to which the dealt-rows merge is taken: any in the 64-key seesaw, whose 512-column
  // fp32 partials cost more to round-trip through the workspace than to push (config.h otherwise).
  static constexpr int kClusterMergeMaxRows = kSeesaw64 ? INT_MAX : sm90::kClusterMergeMaxRows;
  static constexpr bool kPairMerge = kCfg.pair_merge;
  static constexpr int kBoxCols = 64;            // 64 x 16-bit = 128 B = one swizzle row
  static constexpr int kBoxes = D / kBoxCols;    // boxes per tile row (K's)
  static constexpr int kBoxesV = kHeadDimV / kBoxCols;
  static constexpr int kHalfBoxes = kRingHalves ? kBoxesV / 2 : kBoxes;  // the first half of a stage (kRingHalves)
  // The rope ring (576-wide keys on three 48-key stages, where nine boxes a stage do not fit): a ring stage holds the
  // kBoxesV V boxes, and the rope box, which only the owner's Q K^T reads, lands in a ring of its own
  // (SharedStorage::rope, ring position r in rope stage rope_stage(r)) with the stage's second half (full_v); the
  // owner frees it on empty_rope once that Q K^T completed.
  static constexpr bool kRopeRing = kSeesaw64 && kCfg.stages_k == 3 && kBoxes > kBoxesV;
  static constexpr int kRopeStageBits = 1;
  static constexpr int kRopeStages = 1 << kRopeStageBits;
  // Ring position r's rope stage, and the phase of its barriers there (bit fields of r).
  __host__ __device__ static constexpr int rope_stage(int r) { return r & (kRopeStages - 1); }
  __host__ __device__ static constexpr uint32_t rope_phase(int r) {
    return static_cast<uint32_t>(r >> kRopeStageBits) & 1u;
  }
  static constexpr int kStageBoxes = kRopeRing ? kBoxesV : kBoxes;  // boxes of a ring stage
  // The seesaw's row states in 3 KB instead of 8 (what the rope ring needs): m_i and alpha once a row, l_i a thread.
  static constexpr bool kCompactState = kRopeRing;
  // Q's boxes that land in shared memory (the 64-key seesaw: its Q boxes, then its P boxes): all, or with the rope
  // ring all but the last, whose columns the consumers load from global memory into registers
  // (consumer_prologue_q_boxes).
  static constexpr int kQLandedBoxes = kRopeRing ? kBoxes - 1 : kBoxes;
  static constexpr int kRowBytes = kBoxCols * 2;  // 128
  // The wgmma descriptors of 128B-swizzled boxes: 8-row core-matrix groups packed (SBO), and the LBO of a K-major
  // operand, which the swizzle leaves unused (encoded as 1).
  static constexpr uint32_t kSwizzleSbo = 8 * kRowBytes;
  static constexpr uint32_t kLboUnused = 16;
  static constexpr int kConsumerThreads = 128 * kConsumerWGs;
  // The empty barriers' arrivals, a warp each (kKFreedByOneWg above).
  static constexpr uint32_t kEmptyKArrivals = (kKFreedByOneWg ? 128 : kConsumerThreads) / 32;
  static constexpr uint32_t kEmptyVArrivals = (kRingHalves ? 128 : kConsumerThreads) / 32;
  static constexpr uint32_t kEmptyRopeArrivals = 128 / 32;  // (kRopeRing: the owner warpgroup's warps)
  // The producer is one warp, or (D = 512) a whole warpgroup so that setmaxnreg can move its registers
  // to the two consumer warpgroups (acc alone is 128 registers per thread there). Budget: the CTA's pool
  // is what the launch bounds give every thread (65536 / kThreads rounded down to a multiple of 8: 168 at
  // 384 threads); setmaxnreg.inc waits until the pool has the registers, so 128 x kProducerRegs + 256 x
  // kConsumerRegs must fit in it.
  static constexpr bool kSetMaxNReg = kConsumerWGs == 2;
  static constexpr int kProducerThreads = kSetMaxNReg ? 128 : 32;
  static constexpr int kProducerWarp = kConsumerThreads / 32;  // the producer's first warp issues the TMA
  static constexpr int kThreads = kConsumerThreads + kProducerThreads;
  // Producer warps that gather a paged tile with cp.async (common/kv_ring.cuh; the gather path only): one
  // warp's copies fall short of the bytes in flight the ring allows (docs/paged.md). Two where two CTAs share
  // an SM (four would cap every launch's consumer registers), else four, or the configuration's own count
  // (Config::gather_warps); a gathered launch has kGatherThreads threads, within the launch bounds
  // (kMaxThreads).
  static constexpr int kGatherWarps =
      kCfg.gather_warps ? kCfg.gather_warps : kSetMaxNReg ? kProducerThreads / 32 : kCtasPerSm == 2 ? 2 : 4;
  static constexpr int kGatherThreads = kConsumerThreads + 32 * kGatherWarps;
  static constexpr int kMaxThreads = kGatherThreads;  // the largest launch (static_assert below)
  static constexpr int kRegPool = kThreads * (65536 / kThreads / 8 * 8);
  // The 64-key seesaw's producer issues each tile in two halves: 24 registers are too few for its live ranges, and 32
  // with the rope box's paged loads (40 still leave the consumers their 232).
  static constexpr int kProducerRegs = kRopeRing ? 40 : kSeesaw64 ? 32 : sm90::kProducerRegs;
  static constexpr bool kLeanProducer = kSetMaxNReg;  // common/kv_ring.cuh PagedTile: no rows kept
  static constexpr int kConsumerRegs = (kRegPool - 128 * kProducerRegs) / 256 / 8 * 8;
  static constexpr int kKvTileBytes = kBlockN * D * 2;  // one K (or V) tile, all boxes
  static constexpr int kKvBoxBytes = kBlockN * kRowBytes;
  // Tokens per TMA box: a tile's 64-column box is fetched in kBlockN / kTmaRows pieces.
  static constexpr int kTmaRows = kCfg.tma_rows;
  // The fewest tokens of a paged launch's TMA box (config.h paged_gathers: smaller pages gather), as the
  // producer's page lookup counts them: the 64-key seesaw's setmaxnreg producer keeps two page ids a
  // tile (three on 48-key tiles) instead of eight, which its registers hold.
  static constexpr int kPagedMinBoxRows = kSeesaw64 ? paged_tma_min_rows(D, kConfig) : 8;
  static constexpr int kQBoxBytes = kBlockM * kRowBytes;
  // Score exchange (kSplitQk): per parity and warpgroup, kBlockN/8 float4 per consumer thread. The
  // seesaw keeps its row states there instead: per parity, 2 float4 per thread (see SeesawSmem).
  static constexpr int kExchangeFloat4s = kSplitQk        ? 2 * 2 * (kBlockN / 8) * 128
                                          : kCompactState ? 2 * (2 * kBlockM + 2 * 128) / 4
                                          : kSeesaw       ? 2 * 2 * 128
                                                          : 1;
  // Q in registers (kSplitQk, kSeesaw): the last kQRegCols columns of each warpgroup's head-dim half (the
  // seesaw: of the whole head dim, the same in both) are A fragments held in registers (kQRegSteps k16
  // steps, 4 registers each); shared memory keeps the rest, kQSmemBoxesPerWg boxes a warpgroup (all
  // kBoxes without it), kQSmemBoxes in all.
  // kSplitQk: each warpgroup takes Q K^T over kWgBoxes boxes of the head dim, warpgroup 1 the last ones.
  // An odd number of boxes (576 = 9 x 64) overlaps the two ranges by one box, which warpgroup 0 multiplies
  // by zeros (its Q there is zero: load_q_regs): the same wgmma sequence in both, one box of extra work.
  static constexpr int kQRegCols = kCfg.q_reg_cols;
  static constexpr int kQRegSteps = kQRegCols / 16;
  static constexpr int kWgBoxes = kConsumerWGs == 2 ? (kBoxes + 1) / 2 : kBoxes;
  static constexpr int kWg1FirstBox = kBoxes - kWgBoxes;
  static constexpr int kOverlapBoxes = kConsumerWGs == 2 ? 2 * kWgBoxes - kBoxes : 0;  // warpgroup 0's zero boxes
  static constexpr int kQSmemBoxesPerWg = ((kSeesaw ? D : kWgBoxes * kBoxCols) - kQRegCols) / kBoxCols;
  static constexpr int kQSmemBoxes = kSeesaw ? kQSmemBoxesPerWg : kQSmemBoxesPerWg * kConsumerWGs;
  // The seesaw's P tiles: four 64 x kBlockN buffers (tile it in buffer it % 4), two to a 64-column
  // box, in boxes kQSmemBoxes and kQSmemBoxes + 1 of the Q array (the same swizzled layout as Q);
  // kSeesaw64: two 64 x 64 tiles, one a box (tile it in box it % 2).
  static constexpr int kPBoxes = kSeesaw ? 2 : 0;
  // V ring depth: the K ring's, except where Q in registers frees the shared memory of a third V stage;
  // with one ring (kSharedKv), K's.
  static constexpr int kStagesV = kSharedKv ? kCfg.stages_k : kCfg.stages_v;
  // consumer_loop_overlapped waits for K(it+2) and V(it+1) before V(it) is released: at least two stages
  // in each ring, or a ring would wait on itself.
  static constexpr bool kEarlyOperandWait = kCfg.early_operand_wait && kStages >= 2 && kStagesV >= 2;
  // Shared-memory box of Q's head-dim box bx (0 .. kBoxes-1) and back, for boxes kept in shared memory.
  __host__ __device__ static constexpr int q_smem_box(int bx) {
    return kQRegCols == 0 || kSeesaw ? bx : bx < kWg1FirstBox ? bx : kQSmemBoxesPerWg + bx - kWg1FirstBox;
  }
  __host__ __device__ static constexpr int q_global_box(int sb) {
    return kQRegCols == 0 || kSeesaw ? sb : sb < kQSmemBoxesPerWg ? sb : kWg1FirstBox + sb - kQSmemBoxesPerWg;
  }
  static_assert((kOutCols <= 256 || kNarrowOnly) && kOutCols % 64 == 0, "PV wgmma N");
  static_assert(kStages >= 1 && kStagesV >= 1, "ring depth");
  static_assert(!kSetMaxNReg || (128 * kProducerRegs + 256 * kConsumerRegs <= kRegPool && kProducerRegs % 8 == 0 &&
                                 kProducerRegs >= 24 && kConsumerRegs <= 256),
                "setmaxnreg budget (kProducerRegs)");
  static_assert(kBlockN % 16 == 0 && kBlockN <= 256, "QK wgmma N / PV k steps");
  static_assert(!kNarrow || (kConsumerWGs == 1 && kBlockN % 64 == 0), "narrow loop: one warpgroup, 64-key M blocks");
  static_assert(!kSplitQk || (kConsumerWGs == 2 && kOverlapBoxes * kBoxCols <= kQRegCols),
                "split Q K^T: whole boxes; warpgroup 0's zero boxes in registers");
  static_assert(kHeadDimV == D || kSharedKv, "a V head dim of its own: the shared-latent ring only");
  static_assert(!kSharedKv || ((kConsumerWGs == 2 || kNarrowOnly) && (!kCfg.cluster_merge || kSeesaw64) &&
                               !kCfg.pair_merge),
                "one ring: the D = 512 loops or the narrow one, merged by the combine kernel (the 64-key seesaw "
                "also inside clusters)");
  // One ring holds a stage until P V: the seesaw waits for K(o + 2) and an early operand wait for K(it + 2)
  // before releasing stage o (it), the overlapped loop for K(it + 1); the serial loop releases K after Q K^T.
  static_assert(!kSharedKv || (kCfg.loop != Mainloop::kSerial && kStages >= 2 &&
                               ((!kSeesaw && !kEarlyOperandWait) || kStages >= 3 || kSeesaw64)),
                "one ring: too few stages for the loop, or the serial loop");
  static_assert(!kRopeRing || (kBoxes == kBoxesV + 1 && kQRegCols >= kBoxCols),
                "rope ring: one rope box; Q's last box in registers");
  static_assert(!kSeesaw64 || (kSharedKv && (kStages == 2 || (kStages == 3 && kBlockN == 48)) && kBoxesV % 2 == 0),
                "64-key seesaw: one ring of two stages (one per warpgroup; 48-key tiles: three), halves of whole V "
                "boxes");
  static_assert(kQRegCols % kBoxCols == 0 && kQSmemBoxesPerWg >= 1, "Q in registers: whole boxes, some left in shared memory");
  static_assert(kQRegCols == 0 || kBlockN == 32 || (kSeesaw64 && (kBlockN == 64 || kBlockN == 48)),
                "Q in registers: the m64n32k16 (the 64-key seesaw's m64n64k16 or m64n48k16) register-A wgmma");
  static_assert(kQRegCols == 0 || kSeesaw || kSplitQk, "Q in registers: split Q K^T or seesaw");
  static_assert(!kSeesaw || (kConsumerWGs == 2 && (kSeesaw64 ? kBlockN == 64 || kBlockN == 48 : kBlockN == 32) &&
                             kOutCols == 256),
                "seesaw: 32-key P buffers, two to a box (64-key: one a box); N = 256 P V");
  static_assert(kBlockN % kTmaRows == 0 && kTmaRows % 8 == 0, "TMA box rows: whole 1024 B swizzle groups");
  // (The lean gather swizzles by each row's own index, so its warps' shares need only whole 4-row groups.)
  static_assert(kBlockN % ((kLeanProducer ? 4 : 8) * kGatherWarps) == 0,
                "gather: whole swizzle groups (lean: 4-row groups) per gathering warp");
  static_assert(kGatherThreads >= kThreads, "a gathered launch holds every warp of a TMA launch");
};

// One visit of the balanced schedule (DecodeParams::balanced, sm90/schedule_balanced.cuh): tiles [tile_begin,
// tile_end) of unit (b, kvh), piece `piece` of the `pieces` CTAs that share the unit (1: written out directly);
// first_cta and first_mid locate every piece's workspace slot (common/params.h balanced_slot).
struct BalancedVisit {
  int unit, b, kvh, tile_begin, tile_end, piece, pieces, first_cta, first_mid;
};

// The shared-memory plan of one kernel: every buffer, named. The K/V ring (k, v and the four barrier
// arrays) is what common/kv_ring.cuh reads and writes.
template <class Tr>
struct SharedStorage {
  alignas(1024) uint16_t q[Tr::kQSmemBoxes + Tr::kPBoxes][Tr::kBlockM * Tr::kBoxCols];  // (see Tr::q_smem_box, kPBoxes)
  // Tr::kRopeRing: the rope box of ring position r in rope[Tr::rope_stage(r)] (no storage in other kernels).
  alignas(1024) uint16_t rope[Tr::kRopeRing ? Tr::kRopeStages : 0][1][Tr::kBlockN * Tr::kBoxCols];
  alignas(1024) uint16_t k[Tr::kStages][Tr::kStageBoxes][Tr::kBlockN * Tr::kBoxCols];
  alignas(1024) uint16_t v[Tr::kSharedKv ? 1 : Tr::kStagesV][Tr::kSharedKv ? 1 : Tr::kBoxes]
                          [Tr::kSharedKv ? 8 : Tr::kBlockN * Tr::kBoxCols];  // (kSharedKv: unused, see v_stage)
  alignas(16) float4 s_exchange[Tr::kExchangeFloat4s];  // partial scores [parity][wg][kBlockN/8][128] (kSplitQk),
                                                        // or the seesaw's row states [parity][2][128]
  alignas(8) uint64_t full_k[Tr::kStages];   // TMA bytes of the K tile landed
  // kRingHalves: full_k / empty_k are the first half of the K stage's, full_v / empty_v its second half's.
  alignas(8) uint64_t full_v[Tr::kVBarriers ? Tr::kStagesV : 1];  // TMA bytes of the V tile landed (kSharedKv: full_k)
  alignas(8) uint64_t empty_k[Tr::kStages];  // the warps that read the stage's K tile are done (kKFreedByOneWg)
  alignas(8) uint64_t empty_v[Tr::kVBarriers ? Tr::kStagesV : 1];  // ... with its V tile (kSharedKv: empty_k, after P V)
  // Tr::kRopeRing: the owner's Q K^T of the rope stage's tile completed.
  alignas(8) uint64_t empty_rope[Tr::kRopeRing ? Tr::kRopeStages : 0];
  // kMergePair (store_output_pair): the half of the partner's partial that this CTA merges, pushed by the
  // partner's 64 threads that hold it, slot = the pusher's thread index in those two warps: o
  // [kOutCols / 8][64 slots] float4 (a thread's accumulator order), LSEs [2][64]; complete when the 64
  // have arrived on pair_full.
  static constexpr int kPairSlots = 64;
  alignas(16) float4 pair_recv[Tr::kPairMerge ? Tr::kOutCols / 8 * kPairSlots : 1];
  float pair_recv_lse[Tr::kPairMerge ? 2 * kPairSlots : 1];
  alignas(8) uint64_t pair_full;
  // The seesaw: P(it) and the row state after tile it published, slot it % 2 (the owning warpgroup's), phase
  // (it / 2) % 2; every thread of the publishing warpgroup arrives (release), the other waits (acquire).
  static constexpr uint32_t kPublishArrivals = 128;
  alignas(8) uint64_t p_full[Tr::kSeesaw ? 2 : 1];
  // DecodeParams::q_tma (Tr::kQByTma): Q's kBoxes TMA boxes landed in rows 0 .. kQTmaRows - 1 of q[0 .. kBoxes - 1]
  // (the 64-key seesaw: the Q boxes and then the P boxes, which hold the columns the consumers keep in registers
  // until they read them out).
  alignas(8) uint64_t q_full;
  // The balanced schedule (sm90/schedule_balanced.cuh; the shared latent's narrow loop): the consumers' release of a
  // visit's Q.
  alignas(8) uint64_t q_empty;
  // The balanced schedule's 64-key seesaw: the visit whose Q lands on q_full (unit -1: none left), written by the
  // producer before that Q's load, read by the consumers until each releases it on q_empty.
  alignas(16) BalancedVisit visit;
  // Buffers that overlay the ones above once those are idle, with no storage of their own:
  //   merge_base(): kMergeDealtRows: the K and V rings and the score exchange behind them receive the rows this CTA
  //     merges, from every split of its cluster (ClusterMerge, common/merge.cuh; merge_capacity_floats)
  //   q[kQSmemBoxes ..]: the seesaws' P tiles (kPBoxes; SeesawSmem)
  //   q's rows past the narrow loop's: its P^T (box 0) and cross-warp reductions (box 0 or 1; NarrowSmem), the
  //     balanced schedule's running sums (boxes 2 ..; BalancedPrefix)
  //   k[0] (and k[1] on 48-key tiles): the 64-key seesaw's unsplit epilogue stages each warpgroup's output tile in its
  //     halves (store_output_staged)
  __device__ float* merge_base() { return reinterpret_cast<float*>(&k[0][0][0]); }
  // The V tile of a ring stage: its own ring's, or (kSharedKv) the K stage's first kBoxesV boxes.
  __device__ uint16_t (&v_stage(int stage))[Tr::kStageBoxes][Tr::kBlockN * Tr::kBoxCols] {
    if constexpr (Tr::kSharedKv) return k[stage];
    else return v[stage];
  }
  __device__ const uint16_t (&v_stage(int stage) const)[Tr::kStageBoxes][Tr::kBlockN * Tr::kBoxCols] {
    if constexpr (Tr::kSharedKv) return k[stage];
    else return v[stage];
  }
};

// Floats of the K and V rings together, and of the score exchange where it follows them (the cluster
// merge's receive buffer, all idle once the loop is done), or 0 when the rings are not adjacent. (The 512-wide
// shared-latent ring alone is 1,264 B short of four splits' 64 rows and their LSEs.)
template <class Tr>
constexpr size_t merge_capacity_floats() {
  using Ss = SharedStorage<Tr>;
  constexpr size_t rings_end = offsetof(Ss, v) + sizeof(Ss::v);
  constexpr size_t end = offsetof(Ss, s_exchange) == rings_end ? rings_end + sizeof(Ss::s_exchange) : rings_end;
  return offsetof(Ss, v) == offsetof(Ss, k) + sizeof(Ss::k) ? (end - offsetof(Ss, k)) / sizeof(float) : 0;
}

// Whether the cluster merge's receive buffer holds num_splits x ceil(rows / num_splits) rows of o and
// their LSEs, rows = the packed rows of the fullest row block (the host checks before launching).
template <class Tr>
constexpr bool merge_fits(int num_splits, int rows) {
  return merge_slots_fit(num_splits, rows, Tr::kBlockM, Tr::kHeadDimV, merge_capacity_floats<Tr>());
}

// Dynamic shared memory to request: the storage plus slack to round the base up to 1024 B.
template <class Tr>
constexpr size_t smem_bytes() {
  return sizeof(SharedStorage<Tr>) + 1024;
}

template <class Tr>
constexpr bool fits_ctas_per_sm() {
  return (smem_bytes<Tr>() + kSmemReservedPerCta) * Tr::kCtasPerSm <= kSmemPerSm;
}

// Named hardware barriers (0 is __syncthreads).
constexpr uint32_t kBarQReady = 1;  // consumers: Q tile written and fenced
// 2: common/kv_ring.cuh kBarVTail (the V-tail clear; the seesaw: the tile owner's warpgroup)
constexpr uint32_t kBarScores = 3;  // consumers (kSplitQk): both partial score tiles written
constexpr uint32_t kBarNarrowMax = 4;  // narrow loop: every warp's column maxima (or sums) written
constexpr uint32_t kBarNarrowP = 5;    // narrow loop: every warp's part of P^T written and fenced
constexpr uint32_t kBarOutStaged = 6;  // + warpgroup (64-key seesaw): its output tile staged in shared memory

}  // namespace sm90
}  // namespace fmha
