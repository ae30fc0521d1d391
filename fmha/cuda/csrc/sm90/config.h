// fmha sm_90a: the configuration table. One entry per (head dim, configuration): the K/V tile, the
// ring depths, the resident CTAs per SM and the consumer loop. The host chooses a configuration per
// problem (fmha/cuda/backend.py); docs/design-sm90.md has the measurements behind every value.
#pragma once

#include <cstddef>

#include "../common/params.h"
#include "../fmha_capi.h"

namespace fmha {
namespace sm90 {

// Shared memory of one SM (the per-CTA opt-in limit is 227 KB; each resident CTA also takes 1 KB that
// the hardware reserves).
constexpr size_t kSmemPerSm = 228 * 1024;
constexpr size_t kSmemPerCta = 227 * 1024;  // the most one CTA may ask for
constexpr size_t kSmemReservedPerCta = 1024;

// The consumer loop of problems of more than kNarrowRows packed rows (the narrow loop takes the rest
// where Config::narrow).
enum class Mainloop : int {
  kSerial,      // consumer_loop: Q K^T, softmax, P V one tile after another
  kOverlapped,  // consumer_loop_overlapped: Q K^T of the next tile in flight with P V of this one
  kSeesaw,      // consumer_loop_seesaw: D = 512, two warpgroups take turns over the tiles
  kSeesaw64,    // consumer_loop_seesaw64: the same over 64-key tiles of one ring whose stages free by halves
  kNarrowOnly,  // consumer_loop_narrow alone: at most kNarrowRows packed rows (the host refuses more)
};

struct Config {
  int tile_n;               // KV tokens per tile
  int stages_k;             // K ring depth
  int stages_v;             // V ring depth
  int ctas_per_sm;          // resident CTAs per SM the launch bounds ask for
  int tma_rows;             // tokens per TMA box (tile_n: whole tiles)
  Mainloop loop;            // more than the narrow loop's packed rows
  bool narrow;              // at most 16 (LATENT_NARROW: 32) packed rows: the narrow loop (keys in the MMA's M)
  bool split_qk;            // two consumer warpgroups, each computes Q K^T over half of the head dim
  int q_reg_cols;           // Q head-dim columns a consumer warpgroup keeps as register A fragments
  bool early_operand_wait;  // overlapped loop: wait for the next tile's K and V before P V's wgmma wait
  bool cluster_merge;       // split-KV partials may merge inside clusters (dealt rows)
  bool pair_merge;          // two splits of the 64-row loop may merge as a cluster pair
  bool shared_kv = false;   // one ring: V is the first D_v columns of the K stage (no V ring)
  int gather_warps = 0;     // producer warps of the gather path (0: traits.h's rule)
};

constexpr Config kNoConfig{0, 0, 0, 0, 0, Mainloop::kSerial, false, false, 0, false, false, false};

// The table. A rule's reason in one line; its measurement in docs/design-sm90.md.
//   tile  K  V  CTAs  TMA  loop  narrow  split_qk  Q regs  early wait  cluster merge  pair merge
//   (then shared kv and gather warps, where an entry sets them)
constexpr Config config_table(int D, int config) {
  constexpr Mainloop kSerial = Mainloop::kSerial, kOverlapped = Mainloop::kOverlapped, kSeesaw = Mainloop::kSeesaw,
                     kSeesaw64 = Mainloop::kSeesaw64, kNarrowOnly = Mainloop::kNarrowOnly;
  switch (D) {
    case 64:
      // Serial loop: the overlapped one keeps two score tiles and spills at two CTAs per SM.
      if (config == FMHA_CONFIG_WIDE) return {128, 2, 2, 2, 128, kSerial, true, false, 0, false, true, false};
      // One CTA per SM, a 192 KB ring: bytes in flight set the bandwidth of small and split grids.
      if (config == FMHA_CONFIG_DEEP) return {128, 6, 6, 1, 32, kOverlapped, true, false, 0, false, true, true};
      // WIDE for paged launches that gather: four gathering warps outpace two, at the cost of the registers
      // every launch of the kernel gets (128), which is why contiguous and TMA launches keep WIDE.
      if (config == FMHA_CONFIG_WIDE_GATHER)
        return {128, 2, 2, 2, 128, kSerial, true, false, 0, false, true, false, false, 4};
      return kNoConfig;
    case 128:
      // Two CTAs per SM: one CTA's prologue and epilogue overlap the other's stream. No narrow loop:
      // the 64-row loop measured faster on the grids this configuration gets.
      if (config == FMHA_CONFIG_WIDE) return {64, 2, 2, 2, 64, kOverlapped, false, false, 0, true, true, false};
      // DEEP's ring bytes in 128-token tiles; 32-token TMA boxes fetch both halves of a 256 B row together.
      if (config == FMHA_CONFIG_DEEP) return {128, 3, 3, 1, 32, kOverlapped, true, false, 0, true, true, true};
      // WIDE's ring with the narrow loop: narrow grids of one wave stream faster from a shallow ring.
      if (config == FMHA_CONFIG_STREAM) return {64, 2, 2, 2, 64, kOverlapped, true, false, 0, true, true, false};
      return kNoConfig;
    case 256:
      // One CTA per SM holds a 128 KB ring; no room for the pair merge's receive buffer beside it.
      if (config == FMHA_CONFIG_WIDE) return {64, 2, 2, 1, 64, kOverlapped, true, false, 0, false, true, false};
      // One-wave and split grids: a third stage of each ring.
      if (config == FMHA_CONFIG_DEEP) return {64, 3, 3, 1, 32, kOverlapped, true, false, 0, false, true, false};
      return kNoConfig;
    case 512:
      // 32-token tiles (16-token ones measured slower: docs/design-sm90.md); 192 Q columns in registers make
      // room for a third V stage. No cluster merge: compiling it in moved the hot loop's register allocation.
      // More than 64 packed rows: the warpgroups take turns, no score exchange.
      if (config == FMHA_CONFIG_SEESAW) return {32, 2, 3, 1, 32, kSeesaw, false, false, 192, false, false, false};
      // One 64-row block: the warpgroups split Q K^T's head dim and exchange partial scores.
      if (config == FMHA_CONFIG_SPLIT_QK) return {32, 2, 3, 1, 32, kOverlapped, false, true, 192, false, false, false};
      // K = V: the two rings' shared memory as one ring of five stages.
      if (config == FMHA_CONFIG_LATENT_SEESAW) return {32, 5, 0, 1, 32, kSeesaw, false, false, 192, false, false, false, true};
      if (config == FMHA_CONFIG_LATENT_SPLIT_QK) return {32, 5, 0, 1, 32, kOverlapped, false, true, 192, false, false, false, true};
      // 64-key tiles: an N = 64 Q K^T reads as many shared-memory bytes as it has math; two stages, one per
      // warpgroup. 64 Q columns in registers (128 leave the consumer too few). Splits merge inside clusters:
      // the idle ring receives them.
      if (config == FMHA_CONFIG_LATENT_SEESAW64) return {64, 2, 0, 1, 64, kSeesaw64, false, false, 64, false, true, false, true};
      // 48-key tiles: three stages fit, so each Q K^T is issued a tile before its softmax (contiguous caches; a
      // paged box must divide 48, and 16-row boxes stream slower).
      if (config == FMHA_CONFIG_LATENT_SEESAW48) return {48, 3, 0, 1, 48, kSeesaw64, false, false, 64, false, true, false, true};
      // At most 32 packed rows: the narrow loop's M = 64 keys, beside Q's eight boxes.
      if (config == FMHA_CONFIG_LATENT_NARROW) return {64, 2, 0, 1, 64, kNarrowOnly, true, false, 0, false, false, false, true};
      return kNoConfig;
    case 576:
      // V = the first 512 of 576 columns: four 36 KB stages are what fits beside Q and the P / score buffers.
      if (config == FMHA_CONFIG_LATENT_SEESAW) return {32, 4, 0, 1, 32, kSeesaw, false, false, 192, false, false, false, true};
      if (config == FMHA_CONFIG_LATENT_SPLIT_QK) return {32, 4, 0, 1, 32, kOverlapped, false, true, 192, false, false, false, true};
      // As at 512: the narrow loop's M = 64 keys, beside Q's nine boxes.
      if (config == FMHA_CONFIG_LATENT_NARROW) return {64, 2, 0, 1, 64, kNarrowOnly, true, false, 0, false, false, false, true};
      // Two 72 KB stages beside seven boxes of Q (128 columns in registers) and two P tiles.
      if (config == FMHA_CONFIG_LATENT_SEESAW64) return {64, 2, 0, 1, 64, kSeesaw64, false, false, 128, false, true, false, true};
      // Three 48-key stages as at 512: they fit with the rope box in a ring of its own, 192 Q columns in registers
      // and compact row states (DecodeTraits::kRopeRing).
      if (config == FMHA_CONFIG_LATENT_SEESAW48) return {48, 3, 0, 1, 48, kSeesaw64, false, false, 192, false, true, false, true};
      return kNoConfig;
    default:
      return kNoConfig;
  }
}

constexpr bool has_config(int D, int config) { return config_table(D, config).tile_n > 0; }


// Feature settings shared by every configuration. (The K/V loads' L2 policies are fixed where they are
// made: evict-first in producer_loop, common/kv_ring.cuh; 128 B promotion in encode_kv_map, common/host.cu.)
// A warp skips O *= alpha when none of its rows changed its max, from this head dim on (below it the
// vote costs more than the multiplies).
constexpr int kSkipUnitRescaleMinD = 128;
// Paged launches take TMA boxes of at least this many tokens, else the producer warps gather (cp.async):
// smaller boxes stream slower than the gather (docs/paged.md).
constexpr int kPagedTmaMinRows = 32;

// The fewest rows of a paged launch's TMA box: kPagedTmaMinRows, or on 48-key tiles 16, the largest power of two
// that divides them (a box lies inside one page and one tile).
constexpr int paged_tma_min_rows(int D, int config) {
  const int low = config_table(D, config).tma_rows & -config_table(D, config).tma_rows;
  return low < kPagedTmaMinRows ? low : kPagedTmaMinRows;
}

// Whether a paged launch gathers (cp.async) instead of reading TMA boxes: boxes (common/params.h paged_box_rows)
// under paged_tma_min_rows, and any page size on the D = 128 DEEP kernel with more CTAs than SMs, where its four
// gathering warps outpace one TMA thread (docs/paged.md). `ctas`: the whole grid's.
constexpr bool paged_gathers(int D, int config, int page_size, long long ctas, int sms) {
  return paged_box_rows(page_size, config_table(D, config).tma_rows) < paged_tma_min_rows(D, config) ||
         (D == 128 && config == FMHA_CONFIG_DEEP && ctas > sms);
}
// Registers the D = 512 producer warpgroup keeps (setmaxnreg); the consumers get the rest.
constexpr int kProducerRegs = 24;
// Packed query rows (T x Hq/Hkv) up to which split-KV partials merge inside clusters (dealt rows; 64-row
// problems measured slower that way at D = 128). The 64-key seesaw takes any (DecodeTraits::kClusterMergeMaxRows).
constexpr int kClusterMergeMaxRows = 16;

// Feature flags, each compiled by a test (tests/test_cuda_build.py): the default build has them all on
// (FMHA_DISABLE_PDL, every architecture's: common/params.h).
#ifndef FMHA_DISABLE_CLUSTER_MERGE  // 1: split-KV partials always merge through the combine kernel
#define FMHA_DISABLE_CLUSTER_MERGE 0
#endif
constexpr bool kClusterMergeEnabled = !FMHA_DISABLE_CLUSTER_MERGE;
#ifndef FMHA_DISABLE_ROW_BLOCK_PAIRS  // 1: unsplit 64-key seesaw grids launch without clusters (pairs_row_blocks)
#define FMHA_DISABLE_ROW_BLOCK_PAIRS 0
#endif
constexpr bool kPairRowBlocksEnabled = !FMHA_DISABLE_ROW_BLOCK_PAIRS;
#ifndef FMHA_DISABLE_Q_TMA  // 1: the shared-latent loops' consumers always load Q (DecodeParams::q_tma)
#define FMHA_DISABLE_Q_TMA 0
#endif
constexpr bool kQTmaEnabled = !FMHA_DISABLE_Q_TMA;
#ifndef FMHA_DISABLE_HALF_PARTIALS  // 1: the 64-key seesaw's split partials stay fp32 (DecodeParams::partials_f16)
#define FMHA_DISABLE_HALF_PARTIALS 0
#endif
constexpr bool kHalfPartialsEnabled = !FMHA_DISABLE_HALF_PARTIALS;

}  // namespace sm90
}  // namespace fmha
