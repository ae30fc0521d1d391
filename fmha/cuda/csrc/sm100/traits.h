// fmha sm_100a: the compile-time traits of one kernel (head dim x configuration, from config.h), its
// Tensor Memory plan, its shared-memory plan and its named barriers. The names the common layers read
// (kBlockM, kBlockN, kStages, kBoxes, kOutCols, ...) mean what they mean in sm90/traits.h.
#pragma once

#include <cstddef>
#include <cstdint>

#include "../common/merge_layout.h"
#include "../common/params.h"
#include "config.h"

namespace fmha {
namespace sm100 {

// Tensor Memory plan of the rows-on-M loop (D: V's head dim, O's columns). An M = 64 accumulator (cta_group::1) puts its row r in lane
// 32 (r / 16) + r % 16, so it fills lanes 0-15 of each warp's quarter; a second M = 64 accumulator may
// sit at lane offset 16 (ISA "Data path layout F"; BLACKWELL-FACTS.md §TMEM). The two S buffers share
// columns [0, tile) at lane offsets 0 and 16 (by tile parity); O follows at column tile, lane offset 0,
// and at D = 512 its second 256 columns at lane offset 16 (O would need 512 columns of its own).
template <int D, int kTile>
struct TmemPlan {
  static constexpr uint32_t kSCol = 0;
  static constexpr uint32_t kOCol = kTile;
  static constexpr int kOHalves = D > 256 ? 2 : 1;  // O column blocks of at most 256 (an MMA's N)
  static constexpr int kOColsPerHalf = D / kOHalves;
  static constexpr uint32_t kUsedCols = kTile + kOColsPerHalf;
  static constexpr uint32_t kCols = kUsedCols <= 32 ? 32 : kUsedCols <= 64 ? 64 : kUsedCols <= 128 ? 128
                                    : kUsedCols <= 256 ? 256 : 512;
  // Address of S buffer `parity` and of O's column block `half`: lane << 16 | column, relative to the
  // allocation's base address.
  __host__ __device__ static constexpr uint32_t s(int parity) { return (uint32_t(16 * parity) << 16) + kSCol; }
  __host__ __device__ static constexpr uint32_t o(int half) { return (uint32_t(16 * half) << 16) + kOCol; }
  static_assert(kUsedCols <= 512, "Tensor Memory: S and O exceed 512 columns");
};

template <int D, int kConfig>
struct DecodeTraits {
  static_assert(D == 64 || D == 128 || D == 256 || D == 512 || D == 576, "head dim");
  static_assert(has_config(D, kConfig), "no such configuration at this head dim (config.h)");
  static constexpr Config kCfg = config_table(D, kConfig);
  static constexpr int kHeadDim = D;               // Q's and K's
  static constexpr int kHeadDimV = head_dim_v(D);  // V's, O's and the output's
  // One ring (K = V): P V reads V from the K stage, which is released after P V instead of after Q K^T;
  // there is no V ring (kStagesV names K's).
  static constexpr bool kSharedKv = kCfg.shared_kv;
  static constexpr bool kRingHalves = false;  // whole ring stages (common/kv_ring.cuh)
  static constexpr int kPagedMinBoxRows = 8;  // TMA boxes of paged launches (sm100/config.h paged_gathers)
  static constexpr bool kHeadPairs = false;  // KV-head pairs: sm_90a only
  static constexpr int kBlockM = 64;         // packed query rows per CTA (the MMA's M)
  static constexpr int kBlockN = kCfg.tile_n;
  static constexpr int kStages = kCfg.stages_k;
  static constexpr int kStagesV = kSharedKv ? kCfg.stages_k : kCfg.stages_v;
  static constexpr int kCtasPerSm = kCfg.ctas_per_sm;
  static constexpr int kTmaRows = kCfg.tma_rows;
  // The softmax warpgroup (warps 0-3, one per Tensor Memory lane quarter) is the "consumer" of the
  // common layers: it loads Q, reads S, writes P, corrects O and runs the epilogue.
  static constexpr int kConsumerWGs = 1;
  static constexpr int kConsumerThreads = 128;
  static constexpr int kMmaWarp = 4;       // allocates Tensor Memory; one lane issues every tcgen05.mma
  static constexpr int kProducerWarp = 5;  // K/V by TMA (one lane) or the gather (32 lanes), common/kv_ring.cuh
  static constexpr int kThreads = 192;
  static constexpr int kGatherWarps = 1;  // the gather path: the producer warp alone (common/kv_ring.cuh)
  static constexpr bool kLeanProducer = false;  // the producer warp keeps the kernel's registers
  // Output columns per epilogue pass (store_output's `wg` is the pass): an MMA's N is at most 256.
  static constexpr int kOutCols = kHeadDimV > 256 ? 256 : kHeadDimV;
  static constexpr int kOutPasses = kHeadDimV / kOutCols;
  static constexpr bool kNarrow = false;
  static constexpr int kNarrowRows = 16;
  static constexpr bool kSeesaw = false;
  static constexpr bool kClusterMerge = false;  // split partials merge through the combine kernel
  static constexpr bool kHalfPartials = false;  // fp32 split partials (DecodeParams::partials_f16)
  static constexpr bool kPairMerge = false;
  static constexpr int kBoxCols = 64;            // 64 x 16-bit = 128 B = one swizzle row
  static constexpr int kBoxes = D / kBoxCols;    // boxes per tile row
  static constexpr int kHalfBoxes = kBoxes;  // (kRingHalves: whole stages)
  static constexpr bool kRopeRing = false;   // (common/kv_ring.cuh: no rope ring)
  static constexpr int kStageBoxes = kBoxes;  // boxes of a ring stage
  static constexpr int kRowBytes = kBoxCols * 2;  // 128
  static constexpr int kKvTileBytes = kBlockN * D * 2;
  static constexpr int kKvBoxBytes = kBlockN * kRowBytes;
  static constexpr int kQBoxBytes = kBlockM * kRowBytes;
  static constexpr int kQRegCols = 0;
  static constexpr int kQSmemBoxes = kBoxes;
  __host__ __device__ static constexpr int q_global_box(int sb) { return sb; }
  // P (64 rows x kBlockN keys, K-major, 128B-swizzled like Q): kPBoxes boxes of 64 keys; a 32-key tile
  // uses the first half of one box (a 128B-swizzled row is 128 bytes whatever the K extent).
  static constexpr int kPBoxes = (kBlockN + 63) / 64;
  using Tmem = TmemPlan<kHeadDimV, kBlockN>;
  static_assert(Tmem::kCols * kCtasPerSm <= kTmemColsPerSm, "Tensor Memory of kCtasPerSm CTAs exceeds an SM");
  static_assert(kBlockN % 16 == 0 && kBlockN <= 256, "Q K^T: N = kBlockN; P V: K steps of 16");
  static_assert(kBlockN % kTmaRows == 0 && kTmaRows % 8 == 0, "TMA box rows: whole 1024 B swizzle groups");
  static_assert(kStages >= 1 && kStagesV >= 1, "ring depth");
  static_assert(!kSharedKv || kStages >= 2, "one ring: S(it + 1) is issued while stage it waits for its P V");
  static_assert(kHeadDimV == D || kSharedKv, "a V head dim of its own: the shared-latent ring only");
};

// The shared-memory plan of one kernel: every buffer, named. The K/V ring (k, v and the four barrier
// arrays) is what common/kv_ring.cuh reads and writes; the empty barriers complete on tcgen05.commit.
template <class Tr>
struct SharedStorage {
  alignas(1024) uint16_t q[Tr::kBoxes][Tr::kBlockM * Tr::kBoxCols];
  alignas(1024) uint16_t p[2][Tr::kPBoxes][Tr::kBlockM * Tr::kBoxCols];  // P(it) in buffer it % 2
  alignas(1024) uint16_t k[Tr::kStages][Tr::kBoxes][Tr::kBlockN * Tr::kBoxCols];
  alignas(1024) uint16_t v[Tr::kSharedKv ? 1 : Tr::kStagesV][Tr::kSharedKv ? 1 : Tr::kBoxes]
                          [Tr::kSharedKv ? 8 : Tr::kBlockN * Tr::kBoxCols];  // (kSharedKv: unused, V is k[stage])
  alignas(8) uint64_t full_k[Tr::kStages];    // the K tile landed (TMA bytes, or the gather's 32 arrivals)
  alignas(8) uint64_t full_v[Tr::kSharedKv ? 1 : Tr::kStagesV];   // the V tile landed (kSharedKv: full_k)
  alignas(8) uint64_t empty_k[Tr::kStages];   // commit after Q K^T read the stage (kSharedKv: after P V)
  alignas(8) uint64_t empty_v[Tr::kSharedKv ? 1 : Tr::kStagesV];  // commit after P V read the stage
  alignas(8) uint64_t q_full;                 // softmax threads: Q stored and fenced (128 arrivals)
  alignas(8) uint64_t s_full[2];              // commit after S(it) was written to its buffer
  alignas(8) uint64_t s_free[2];              // softmax threads: S(it) read out (128 arrivals)
  alignas(8) uint64_t p_full[2];              // softmax threads: P(it) stored, O corrected, V tail cleared (128)
  alignas(8) uint64_t p_free[2];              // commit after P V(it): P buffer it % 2 reusable, O holds tile it
  uint32_t tmem_base;                         // written by tcgen05.alloc
  // The combine-kernel path only (no cluster merge), but store_output builds a ClusterMerge from it.
  __device__ float* merge_base() { return reinterpret_cast<float*>(&k[0][0][0]); }
};

// Dynamic shared memory to request: the storage plus slack to round the base up to 1024 B.
template <class Tr>
constexpr size_t smem_bytes() {
  return sizeof(SharedStorage<Tr>) + 1024;
}

template <class Tr>
constexpr bool fits_ctas_per_sm() {
  return (smem_bytes<Tr>() + kSmemReservedPerCta) * Tr::kCtasPerSm <= kSmemPerSm;
}

// Named hardware barriers (0 is __syncthreads; common/kv_ring.cuh's kBarVTail is 2).
constexpr uint32_t kBarSoftmax = 1;  // the softmax warpgroup

}  // namespace sm100
}  // namespace fmha
