// fmha sm_100a: the configuration table of the Blackwell decode kernel. One entry per (head dim,
// configuration): the K/V tile, the ring depths and the resident CTAs per SM. Every configuration runs
// the rows-on-M loop (mainloop_rows.cuh); docs/design-sm100.md derives each value from bytes in flight,
// shared memory and Tensor Memory per CTA.
#pragma once

#include <cstddef>

#include "../fmha_capi.h"

namespace fmha {
namespace sm100 {

// Shared memory of one SM, as on sm_90 (227 KB per CTA; each resident CTA also takes 1 KB reserved,
// where the tcgen05 allocator keeps its bookkeeping).
constexpr size_t kSmemPerSm = 228 * 1024;
constexpr size_t kSmemPerCta = 227 * 1024;  // the most one CTA may ask for
constexpr size_t kSmemReservedPerCta = 1024;
// Tensor Memory: 512 columns of 128 lanes x 32 bits per SM, shared by its resident CTAs.
constexpr int kTmemColsPerSm = 512;

struct Config {
  int tile_n;              // KV tokens per tile
  int stages_k;            // K ring depth
  int stages_v;            // V ring depth
  int ctas_per_sm;         // resident CTAs per SM the launch bounds ask for
  int tma_rows;            // tokens per TMA box (tile_n: whole tiles)
  bool shared_kv = false;  // one ring: V is the K stage (K = V, DeepSeek-V4's latent), no V ring
};

constexpr Config kNoConfig{0, 0, 0, 0, 0};

// The table. The configuration names are the sm_90 ones, so that the host's plan (fmha/cuda/backend.py)
// reads both libraries alike: WIDE is the two-CTA shallow ring where Tensor Memory allows it, DEEP one
// CTA with the deepest ring that fits, and the D = 128 STREAM and D = 512 SEESAW / SPLIT_QK names map to
// the one kernel each head dim has for them (LATENT_SEESAW / LATENT_SPLIT_QK to the shared-latent one).
// KV_HEAD_PAIRS has no sm_100a kernel.
//   tile  K  V  CTAs  TMA rows  (shared kv)
constexpr Config config_table(int D, int config) {
  switch (D) {
    case 64:
      // 128-key tiles: a 16 KB K/V tile, and S (M = 64, N = 128) fits two buffers in 128 columns.
      if (config == FMHA_CONFIG_WIDE) return {128, 2, 2, 2, 128};
      // 5 + 5 stages of 16 KB: 144 KB in flight per SM (the design's 2 us latency needs 106 KB).
      if (config == FMHA_CONFIG_DEEP) return {128, 5, 5, 1, 128};
      return kNoConfig;
    case 128:
      if (config == FMHA_CONFIG_WIDE || config == FMHA_CONFIG_STREAM) return {64, 2, 2, 2, 64};
      if (config == FMHA_CONFIG_DEEP) return {64, 5, 5, 1, 64};
      return kNoConfig;
    case 256:
      // O takes 256 columns: one CTA per SM by Tensor Memory (512-column allocation).
      if (config == FMHA_CONFIG_WIDE) return {64, 2, 2, 1, 64};
      if (config == FMHA_CONFIG_DEEP) return {64, 3, 2, 1, 64};
      return kNoConfig;
    case 512:
      // 32-key tiles (a 32 KB tile), Q alone is 64 KB: two stages of each.
      if (config == FMHA_CONFIG_SEESAW || config == FMHA_CONFIG_SPLIT_QK) return {32, 2, 2, 1, 32};
      // K = V: the two rings' shared memory as one ring of four stages, each held until its P V.
      if (config == FMHA_CONFIG_LATENT_SEESAW || config == FMHA_CONFIG_LATENT_SPLIT_QK)
        return {32, 4, 0, 1, 32, true};
      return kNoConfig;
    case 576:
      // DeepSeek-V3's latent (V = K's first 512 columns): Q is 72 KB, so three 36 KB stages fit.
      if (config == FMHA_CONFIG_LATENT_SEESAW || config == FMHA_CONFIG_LATENT_SPLIT_QK)
        return {32, 3, 0, 1, 32, true};
      return kNoConfig;
    default:
      return kNoConfig;
  }
}

constexpr bool has_config(int D, int config) { return config_table(D, config).tile_n > 0; }

// Paged launches take TMA boxes from a box's 1024-byte swizzle group up (8 rows); smaller pages gather on
// the one producer warp (sm_90a gathers more with more warps: never measured here).
constexpr bool paged_gathers(int, int, int page_size, long long, int) { return (page_size & -page_size) < 8; }

// FMHA_DISABLE_PDL (kPdl): common/params.h.

}  // namespace sm100
}  // namespace fmha
