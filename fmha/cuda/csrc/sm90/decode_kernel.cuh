// fmha: Hopper (sm_90a) decode attention, TMA + WGMMA.
//
// Grid -> work
//   blockIdx.x = row_block * num_splits + split
//   blockIdx.y = kvh  (KV head)
//   blockIdx.z = b    (sequence)
//   row_block: 64 packed query rows r in [64 row_block, 64 row_block + 64) of
//   the T * G rows that share KV head kvh; row r is query token t = r / G of
//   query head hq = kvh * G + r % G. Rows >= T * G are padding (computed on
//   zeros, never stored). split: a contiguous range of the KV tiles this row
//   block needs (all of them when num_splits == 1).
//
// Instantiations: head dim D x dtype x DecodeVariant. The host (fmha/cuda/backend.py,
// launch_plan) runs grids of more CTAs than SMs with kWide (two CTAs per SM at D <= 128, shallow
// ring), narrow grids of one wave (unsplit or split) at D = 128 with kStream (kWide's ring, the narrow
// loop; at D = 64 kWide is that), and other smaller or split-KV grids with kDeep (one CTA per SM, deeper
// ring). The C API launches a split grid of one wave one CTA per SM (capi.cu exclusive_sms). D = 64 caches
// whose KV heads lie side by side run on the D = 128 kStream kernel as KV-head pairs where the pairs fill
// most SMs (DecodeParams::head_pairs, pair_row; the C API's variant 3): blockIdx.y is then a pair.
//
// Roles (kConsumerWGs consumer warpgroups, then the producer: one warp, or a
// warpgroup of which one warp works when setmaxnreg is used)
//   Producer warp (one elected lane): streams K and V tiles of kBlockN tokens
//     by TMA into rings of kStages (K) and kStagesV (V) stages; full_k/full_v[stage] complete on the TMA
//     bytes; empty_k[stage] is armed by every consumer warp once its Q K^T
//     that read the K tile completed, empty_v[stage] once its P V did.
//   Consumer warpgroup(s): load Q once (plain 16 B loads, written in the
//     128B-swizzled K-major layout; at D = 512 three quarters of it as register
//     fragments instead, see QRegs), then per tile
//       S = Q K^T            wgmma, A = Q (smem desc, or registers), B = K (smem desc), both K-major
//       online softmax        in registers (FA2 rescale), masks keys j >= limit
//       O += P V              wgmma, A = P (registers), B = V (smem desc, MN-major)
//     and finally O / l and the LSE (or per-split partials for the combine).
//     consumer_loop_overlapped keeps the tensor core busy across tiles: Q K^T
//     of tile i+1 is issued with P V of tile i, and the softmax of i+1 runs
//     while P V of i is in flight (with two consumer warpgroups P V of i is
//     issued once Q K^T of i+1 landed: FMHA_SM90_PV_AFTER_QK).
//   With two consumer warpgroups (D = 512) each computes S over half of the
//   head dim and they add each other's partial scores through shared memory
//   (exchange_scores; both then hold the same S and identical softmax
//   statistics), and each owns half of the output columns
//   (FMHA_SM90_D512_SPLIT_QK=0: both compute the full S, no exchange).
//   Problems of at most 16 packed rows (T = 1 with up to 16 query heads per KV
//   head, or T x G <= 16) take consumer_loop_narrow instead, where keys and
//   head-dim columns fill the MMA's M and the 16 rows its N (see its comment);
//   the D = 128 wide instantiation keeps the 64-row loop (measured faster; kStream is the same
//   configuration with the narrow loop).
//   Split-KV partials are merged inside a thread-block cluster when the host
//   launches the splits of a row block as one (p.cluster_merge): kMergeDealtRows (see
//   ClusterMerge: at most 16 splits, every cluster resident at once, <= 16 packed
//   rows) or kMergePair (two splits of the 64-row loop, see store_output_pair); else
//   by combine_splits_kernel (launched as a programmatic dependent).
//
// Shared-memory tiles: every tile is a stack of 64-column "boxes"; a box of R
// rows is R x 128 B, 128B-swizzled (16 B chunk c of row r lives at chunk
// c ^ (r % 8)), 1024 B aligned. A box is filled by TMA boxes of 64 head-dim columns x kTmaRows
// tokens of one (KV head, sequence) (kTmaRows = kBlockN except on the deep variant), each starting
// on a 1024 B boundary; both tensor-map dimension orders give the same shared-memory image.
#pragma once

#include <cuda.h>  // CUtensorMap (types only; no driver calls from device code)
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstddef>  // offsetof
#include <cstdint>
#include <type_traits>  // std::integral_constant (the seesaw trip shapes)

#include "../common/combine.cuh"  // SplitMerge (the in-cluster merge)
#include "../common/params.h"
#include "../common/ptx.cuh"
#include "../common/softmax.cuh"

// Tuning knobs: defaults are the fastest measured on an H200 (perf/RESULTS.md);
// FMHA_NVCC_FLAGS="-DFMHA_SM90_...=N" overrides one for an experiment (the loader
// keys its cache on the flags).
#ifndef FMHA_SM90_D64_TILE_N
#define FMHA_SM90_D64_TILE_N 128
#endif
#ifndef FMHA_SM90_D128_TILE_N
#define FMHA_SM90_D128_TILE_N 64
#endif
#ifndef FMHA_SM90_D256_TILE_N
#define FMHA_SM90_D256_TILE_N 64
#endif
#ifndef FMHA_SM90_DEEP_D128_TILE_N  // D = 128, deep variant (the ring keeps its bytes: stages scale down)
#define FMHA_SM90_DEEP_D128_TILE_N 128
#endif
// Two instantiations per head dim (DecodeVariant): "wide" packs several CTAs on an SM for
// grids that fill the GPU; "deep" runs one CTA per SM with a deeper K/V ring for small or
// split grids, where bytes in flight per SM decide the bandwidth.
#ifndef FMHA_SM90_SMALL_D_STAGES  // D <= 128, wide variant
#define FMHA_SM90_SMALL_D_STAGES 2
#endif
#ifndef FMHA_SM90_SMALL_D_CTAS_PER_SM  // D <= 128, wide variant: resident CTAs per SM the launch bounds ask for
#define FMHA_SM90_SMALL_D_CTAS_PER_SM 2
#endif
#ifndef FMHA_SM90_D64_STAGES  // D = 64, wide variant
#define FMHA_SM90_D64_STAGES FMHA_SM90_SMALL_D_STAGES
#endif
#ifndef FMHA_SM90_DEEP_SMALL_D_STAGES  // D <= 128, deep variant
#define FMHA_SM90_DEEP_SMALL_D_STAGES 6
#endif
#ifndef FMHA_SM90_DEEP_CTAS_PER_SM  // D <= 128, deep variant: resident CTAs per SM
#define FMHA_SM90_DEEP_CTAS_PER_SM 1
#endif
#ifndef FMHA_SM90_D256_STAGES
#define FMHA_SM90_D256_STAGES 2
#endif
#ifndef FMHA_SM90_DEEP_D256_STAGES
#define FMHA_SM90_DEEP_D256_STAGES 3
#endif
#ifndef FMHA_SM90_D256_CTAS_PER_SM
#define FMHA_SM90_D256_CTAS_PER_SM 1
#endif
#ifndef FMHA_SM90_KV_EVICT_FIRST  // 1: K/V TMA loads carry an L2 evict-first policy (streamed once)
#define FMHA_SM90_KV_EVICT_FIRST 1
#endif
#ifndef FMHA_SM90_ZERO_V_TAIL  // 1: clear V rows past the sequence length in the last tile (see zero_v_tail)
#define FMHA_SM90_ZERO_V_TAIL 1
#endif
#ifndef FMHA_SM90_SPLIT_RELEASE  // 1: a K stage is released after Q K^T, its V stage after P V (else both after P V)
#define FMHA_SM90_SPLIT_RELEASE 1
#endif
#ifndef FMHA_SM90_PDL  // 1: programmatic dependent launch (see the kernel's prologue and capi.cu)
#define FMHA_SM90_PDL 1
#endif
#ifndef FMHA_SM90_PAIR_MERGE  // 1: two-split launches of the 64-row loop merge as cluster pairs (store_output_pair)
#define FMHA_SM90_PAIR_MERGE 1
#endif
#ifndef FMHA_SM90_OVERLAP  // 1: Q K^T of tile i+1 runs while P V of tile i and the softmax of i+1 proceed (consumer_loop_overlapped)
#define FMHA_SM90_OVERLAP 1
#endif
#ifndef FMHA_SM90_SKIP_UNIT_RESCALE_MIN_D  // head dims from which a warp skips O *= alpha when none of its rows
// changed its max (alpha == 1): D = 512 -2% (MQA Hq=128 232.3 -> 227.7 us), D = 64 +11% (126.9 -> 141.0);
// D = 128 (run cr, 7 rounds): B128 S8192 926.3 -> 922.5 us, T=4 121.6 -> 121.1, B32 S4096 121.1 -> 120.8, T=16 level
#define FMHA_SM90_SKIP_UNIT_RESCALE_MIN_D 128
#endif
#ifndef FMHA_SM90_NARROW  // 1: problems of at most 16 packed query rows take consumer_loop_narrow (keys in M)
// H200 (run s, interleaved, us): D=64 131.9 -> 127.3 (SM clock at the power cap 1545 -> 1965 MHz),
// B4 S512 8.6 -> 8.3, B1 S65536 70.6 -> 70.2, D=256 478.4 -> 479.5, T=4 127.0 -> 126.9
#define FMHA_SM90_NARROW 1
#endif
#ifndef FMHA_SM90_NARROW_D128_WIDE  // D = 128 wide instantiation (64-token tiles, 2 CTAs/SM): B128 S8192
// 957.5 -> 969.4 us, B32 S4096 126.4 -> 125.8 with the narrow loop; off
#define FMHA_SM90_NARROW_D128_WIDE 0
#endif
#ifndef FMHA_SM90_D512_SEESAW  // 1: D = 512's wide instantiation runs consumer_loop_seesaw (the warpgroups take
// turns over the tiles); the host sends it problems of more than 64 packed rows (fmha/cuda/backend.py), and the
// deep one (the split-Q K^T loop) those of one row block. H200, against the split loop (us, sustained, runs fd,
// ff): MQA B64 Hq=128 176.5 vs 199.9 and 173.5 vs 197.9, T=4 Hq=32 102.1 vs 108.8, B1 S65536 Hq=128 63.5 vs
// 65.3; one row block: Hq=64 149.9 vs 148.7, Hq=32 135.2 vs 134.3, T=4 Hq=16 82.1 vs 80.7, Hq=16 level
#define FMHA_SM90_D512_SEESAW 1
#endif
#ifndef FMHA_SM90_D512_SPLIT_QK  // without the seesaw: 1: at D = 512 each consumer warpgroup computes half of Q K^T (see exchange_scores).
// H200, with the overlapped loop and the unit-alpha skip: MQA Hq=128 225.7 -> 218.7 us and 227.7 -> 221.3 (two
// runs), Hq=16 within 0.5% (it is bandwidth-bound). Before those two changes it measured 2% slower.
#define FMHA_SM90_D512_SPLIT_QK 1
#endif

#ifndef FMHA_SM90_PV_AFTER_QK  // 1: with two consumer warpgroups (D = 512), P V(it) is issued once Q K^T(it+1) landed,
// not with it: the two warpgroups' wgmmas share the SM's tensor cores, and one warpgroup's P V issued beside its
// Q K^T can presumably run ahead of the other's Q K^T, which the score exchange then waits for (the probe, run ex,
// did not show the warpgroups' skew change). H200, MQA Hq=128, 12 rounds
// (run ey): sustained 201.2 vs 203.9 us (faster in 8 of 12 rounds), per replay 187.5 vs 188.3 (9 of 12); T=2
// 188.3 vs 190.0; Hq=64 and Hq=16 level
#define FMHA_SM90_PV_AFTER_QK 1
#endif

#ifndef FMHA_SM90_EARLY_OPERAND_WAIT  // overlapped loop at D = 128: wait for the next tile's K and V before P V(it)'s
// wgmma wait (see consumer_loop_overlapped). H200 run an (us): B128 S8192 932.1 -> 927.2, T=4 124.1 -> 123.3, B1 S8192
// and T=16 within 0.3%; D = 512 195.5 -> 211.7 (V(it) released later on its two-stage ring; with three V
// stages 201.2 vs 202.6, run ar): D = 128 (D = 512: FMHA_SM90_D512_EARLY_OPERAND_WAIT)
#define FMHA_SM90_EARLY_OPERAND_WAIT 1
#endif
#ifndef FMHA_SM90_D512_EARLY_OPERAND_WAIT  // 1: FMHA_SM90_EARLY_OPERAND_WAIT at D = 512 too (its three-stage V ring
// holds V(it) while V(it+1) is waited for). H200 run fa, 8 rounds (us): sustained MQA Hq=128 197.8 vs 202.1 (faster
// in 7 of 8 rounds), T=2 Hq=128 181.1 vs 188.1 (7 of 8), Hq=16 level; per replay 189.1 vs 186.0 (4 of 8). Correct
// (651 passed, racecheck 0 with it on). Off until a longer comparison and a suite run confirm the sustained gain
#define FMHA_SM90_D512_EARLY_OPERAND_WAIT 0
#endif
#ifndef FMHA_SM90_PRODUCER_REGS  // D = 512: registers the producer warpgroup keeps (setmaxnreg); the consumers get the
// rest (40: 232; 24: 240). 24 vs 40 alone: no difference (runs am, ax); Q_REGS=192 was measured with 24 (run ax)
#define FMHA_SM90_PRODUCER_REGS 24
#endif
#ifndef FMHA_SM90_EDGE_MASK_ONLY  // 1: tiles whose keys every row sees skip the mask compares. H200 run ak (us):
// D=512 Hq=128 203.8 -> 202.4, Hq=16 249.1 -> 247.9, T=4 126.4 -> 125.6, D=128 T=1 unchanged
#define FMHA_SM90_EDGE_MASK_ONLY 1
#endif

#ifndef FMHA_SM90_D512_Q_REGS  // D = 512: head-dim columns of its Q half each consumer warpgroup keeps in registers
// (A of Q K^T from registers for those k steps; the rest of Q stays in shared memory): 0, 64 (with
// FMHA_SM90_D512_V_STAGES=2), 128 or 192 (48 registers a thread; no spills with 232 or 240 consumer
// registers: highest register R229 / R232 in the SASS). H200, MQA Hq=128 (us): 0 -> 128 199.1 -> 190.3
// (run ap); 128 -> 192 196.0 -> 191.2 per replay, 211.4 -> 208.5 (+-7-30%) timed as the suite does (run ax)
#define FMHA_SM90_D512_Q_REGS 192
#endif

#ifndef FMHA_SM90_D512_SEESAW_Q_REGS  // the seesaw's FMHA_SM90_D512_Q_REGS: the last columns of the whole head dim,
// the same in both warpgroups (the split loop keeps the last of each warpgroup's half); 192 .. 448 in steps of 64
// (with fewer, Q's shared-memory boxes and the rings exceed the 227 KB a CTA may have). H200, 256 vs 192 (run fh,
// us): sustained MQA Hq=128 173.0 vs 174.5, T=4 Hq=32 101.4 vs 102.0; per replay Hq=128 165.8 vs 163.6: kept
#define FMHA_SM90_D512_SEESAW_Q_REGS 192
#endif

#ifndef FMHA_SM90_D512_V_STAGES  // D = 512 with Q in registers: V ring depth (the shared memory Q no longer needs)
#define FMHA_SM90_D512_V_STAGES 3
#endif
#ifndef FMHA_SM90_D512_K_STAGES  // D = 512: K ring depth. H200, MQA Hq=128 (us), 3 K / 2 V stages against 2 / 3 (with
// FMHA_SM90_D512_V_STAGES=2): sustained 197.7 vs 204.3 (run eq), 193.5 vs 205.6 (run er), 201.4 vs 201.5 over 16
// rounds (run es, +-16-19%); per replay 184.8 vs 183.5 (eq), 189.5 vs 188.9 (er); Hq=64 150.3 vs 149.3, T=2 Hq=128
// 183.4 vs 188.2 (es)
#define FMHA_SM90_D512_K_STAGES 2
#endif

#ifndef FMHA_SM90_TMA_BOX_ROWS  // deep variant: tokens per K/V TMA box (0: the whole tile); smaller boxes fetch both
// halves of a 256 B (D = 128) cache row close together in time. H200, 32 vs whole 128-token tiles (runs w, y):
// B1 S65536 71.2 -> 70.9 / 71.4 -> 70.8 us, T=16 75.7 -> 74.9, B4 S512 8.4 -> 7.9 (gains near the noise);
// the wide variant keeps whole tiles (B128 S8192 inconclusive: 957.0 -> 960.4 +-19%)
#define FMHA_SM90_TMA_BOX_ROWS 32
#endif
#ifndef FMHA_SM90_PROBE_TIMESTAMPS  // timing probe (1): clock64 stamps of ring waits and TMA issues per tile
// into g_probe_stamps, read by perf/stream_probe.py through fmha_sm90_probe_read (correct results; off: no code)
#define FMHA_SM90_PROBE_TIMESTAMPS 0
#endif
#ifndef FMHA_SM90_PROBE_STREAM_ONLY  // timing probe only (wrong results by design): consumers release each
// stage as soon as it lands, with no MMA or softmax, to time the K/V stream alone
#define FMHA_SM90_PROBE_STREAM_ONLY 0
#endif

namespace fmha {
namespace sm90 {

// Shared memory of one SM on sm_90 (the per-CTA opt-in limit is 227 KB; each resident CTA
// also takes 1 KB that the hardware reserves).
constexpr size_t kSmemPerSm = 228 * 1024;
constexpr size_t kSmemReservedPerCta = 1024;

// Which instantiation of a head dim runs (the host picks per problem, see fmha/cuda/backend.py).
enum DecodeVariant : int {
  kWide = 0,  // several CTAs per SM (D <= 128), shallow ring: grids of at least one CTA per SM
  kDeep = 1,  // one CTA per SM, deep ring: small grids and split-KV
  // (D = 512: both have one configuration and differ in the loop, see FMHA_SM90_D512_SEESAW)
  // D = 128 only: kWide's configuration (64-token tiles, a two-stage ring: 64 KB of K/V in flight a CTA)
  // with the narrow loop, for grids of at most 16 packed rows that fill one wave. H200, B16 S32768
  // (128 CTAs, run ee): 462.8 us against kDeep's 468.5 (its 192 KB ring; cuDNN 464.2); alone under ncu
  // 92.4-92.8% of DRAM peak against 91.4-91.9% (run ed). Split grids gain too once every CTA has an SM to
  // itself (B1 S65536 65.4 vs 66.1, run el; 74.4 with two CTAs on some SMs); the 64-row loop loses (B128
  // Hkv1 G32 S8192: 174.2 vs 128.8, run ec).
  kStream = 2,
};

template <int D, int kVariant = kWide>
struct DecodeTraits {
  static_assert(D == 64 || D == 128 || D == 256 || D == 512, "head dim");
  static_assert(kVariant == kWide || kVariant == kDeep || (kVariant == kStream && D == 128), "variant");
  static constexpr int kHeadDim = D;
  static constexpr bool kIsDeep = kVariant == kDeep;
  // Serves KV-head pairs (DecodeParams::head_pairs): the C API runs them on the D = 128 stream kernel only,
  // so no other instantiation carries their code.
  static constexpr bool kHeadPairs = D == 128 && kVariant == kStream;
  static constexpr int kBlockM = 64;                       // packed query rows per CTA (one wgmma M)
  static constexpr int kBlockN = D == 64    ? FMHA_SM90_D64_TILE_N                    // KV tokens per tile
                                 : D == 128 ? (kIsDeep ? FMHA_SM90_DEEP_D128_TILE_N : FMHA_SM90_D128_TILE_N)
                                 : D == 256 ? FMHA_SM90_D256_TILE_N
                                            : 32;  // 16-token tiles x 4 stages measured 44% slower
  // K ring depth (the V ring's too, except at D = 512: kStagesV). D = 512 has room for five K and V
  // stages together (two K, three V by default), so its variants share them (and differ in the loop).
  static constexpr int kStages = D == 64    ? (kIsDeep ? FMHA_SM90_DEEP_SMALL_D_STAGES : FMHA_SM90_D64_STAGES)
                                 : D == 128 ? (kIsDeep ? FMHA_SM90_DEEP_SMALL_D_STAGES * 64 / FMHA_SM90_DEEP_D128_TILE_N
                                                       : FMHA_SM90_SMALL_D_STAGES)
                                 : D == 256 ? (kIsDeep ? FMHA_SM90_DEEP_D256_STAGES : FMHA_SM90_D256_STAGES)
                                            : FMHA_SM90_D512_K_STAGES;
  // CTAs per SM: more than one overlaps one CTA's prologue/epilogue with another's streaming.
  static constexpr int kCtasPerSm = kIsDeep ? (D <= 128 ? FMHA_SM90_DEEP_CTAS_PER_SM : 1)
                                   : D <= 128 ? FMHA_SM90_SMALL_D_CTAS_PER_SM
                                               : D == 256  ? FMHA_SM90_D256_CTAS_PER_SM
                                                           : 1;
  static constexpr int kConsumerWGs = D == 512 ? 2 : 1;
  // Two consumer warpgroups take turns over the tiles (consumer_loop_seesaw, the wide instantiation: each
  // computes S of every other tile over the whole head dim and shares P), or split the head dim of Q K^T and
  // exchange their partial scores (the deep one; otherwise each computes the full S: 1.5x the MMA work).
  static constexpr bool kSeesaw = kConsumerWGs == 2 && FMHA_SM90_D512_SEESAW && kVariant == kWide;
  static constexpr bool kSplitQk = kConsumerWGs == 2 && FMHA_SM90_D512_SPLIT_QK && !kSeesaw;
  static constexpr bool kSkipUnitRescale = D >= FMHA_SM90_SKIP_UNIT_RESCALE_MIN_D;  // see rescale_acc
  static constexpr int kOutCols = D / kConsumerWGs;        // output columns per consumer warpgroup (PV wgmma N)
  // consumer_loop_overlapped keeps S of the next tile beside P of this one; at D = 64 (128-token
  // tiles) with two CTAs per SM (168 registers a thread) that spills, so that instantiation keeps
  // the serial loop.
  static constexpr bool kOverlap = FMHA_SM90_OVERLAP && !(D == 64 && kBlockN == 128 && kCtasPerSm > 1);
  // consumer_loop_narrow (at most kNarrowRows packed rows): one warpgroup, whole 64-key M blocks.
  static constexpr int kNarrowRows = 16;
  static constexpr bool kNarrow = FMHA_SM90_NARROW && kConsumerWGs == 1 && kBlockN % 64 == 0 &&
                                  (D != 128 || kIsDeep || kVariant == kStream || FMHA_SM90_NARROW_D128_WIDE);
  // Split-KV partials merged inside clusters (ClusterMerge) can be used by this instantiation. Not at
  // D = 512: its consumer registers are tight, and compiling the merge in moved the hot loop's register
  // allocation (MQA Hq=128 213.1 -> 225.7 us, run ag, same process); it gains only on <= 16 rows.
  static constexpr bool kClusterMerge = D != 512;
  // Two splits of the 64-row loop merged as a cluster pair (store_output_pair): the deep variant (the host
  // splits only deep grids) where a 64-row receive buffer fits beside its ring (not D = 256, 512).
  static constexpr bool kPairMerge = kIsDeep && D <= 128 && FMHA_SM90_PAIR_MERGE;
  static constexpr int kBoxCols = 64;                      // 64 x 16-bit = 128 B = one swizzle row
  static constexpr int kBoxes = D / kBoxCols;              // boxes per tile row
  static constexpr int kRowBytes = kBoxCols * 2;           // 128
  static constexpr int kConsumerThreads = 128 * kConsumerWGs;
  // The producer is one warp, or (D = 512) a whole warpgroup so that setmaxnreg
  // can move its registers to the two consumer warpgroups (acc alone is 128
  // registers per thread there). Budget: the CTA's pool is what the launch bounds give every thread
  // (65536 / kThreads rounded down to a multiple of 8: 168 at 384 threads); setmaxnreg.inc waits
  // until the pool has the registers, so 128 x kProducerRegs + 256 x kConsumerRegs must fit in it.
  static constexpr bool kSetMaxNReg = kConsumerWGs == 2;
  static constexpr int kProducerThreads = kSetMaxNReg ? 128 : 32;
  static constexpr int kProducerWarp = kConsumerThreads / 32;  // the producer's first warp issues the TMA
  static constexpr int kThreads = kConsumerThreads + kProducerThreads;
  static constexpr int kRegPool = kThreads * (65536 / kThreads / 8 * 8);
  static constexpr int kProducerRegs = FMHA_SM90_PRODUCER_REGS;
  static constexpr int kConsumerRegs = (kRegPool - 128 * kProducerRegs) / 256 / 8 * 8;
  static constexpr int kKvTileBytes = kBlockN * D * 2;     // one K (or V) tile, all boxes
  static constexpr int kKvBoxBytes = kBlockN * kRowBytes;
  // Tokens per TMA box: a tile's 64-column box is fetched in kBlockN / kTmaRows pieces.
  static constexpr int kTmaRows =
      kIsDeep && FMHA_SM90_TMA_BOX_ROWS > 0 && FMHA_SM90_TMA_BOX_ROWS < kBlockN ? FMHA_SM90_TMA_BOX_ROWS : kBlockN;
  static constexpr int kQBoxBytes = kBlockM * kRowBytes;
  // Score exchange (kSplitQk): per parity and warpgroup, kBlockN/8 float4 per consumer thread. The
  // seesaw keeps its row states there instead: per parity, 2 float4 per thread (see SeesawSmem).
  static constexpr int kExchangeFloat4s = kSplitQk ? 2 * 2 * (kBlockN / 8) * 128 : kSeesaw ? 2 * 2 * 128 : 1;
  // Q in registers (kSplitQk, kSeesaw): the last kQRegCols columns of each warpgroup's head-dim half (the
  // seesaw: of the whole head dim, the same in both) are A fragments held in registers (kQRegSteps k16
  // steps, 4 registers each); shared memory keeps the rest, kQSmemBoxesPerWg boxes a warpgroup (all
  // kBoxes without it), kQSmemBoxes in all.
  static constexpr int kQRegCols = D != 512 ? 0
                                   : kSeesaw  ? FMHA_SM90_D512_SEESAW_Q_REGS
                                   : kSplitQk ? FMHA_SM90_D512_Q_REGS
                                              : 0;
  static constexpr int kQRegSteps = kQRegCols / 16;
  static constexpr int kQSmemBoxesPerWg = ((kSeesaw ? D : D / kConsumerWGs) - kQRegCols) / kBoxCols;
  static constexpr int kQSmemBoxes = kSeesaw ? kQSmemBoxesPerWg : kQSmemBoxesPerWg * kConsumerWGs;
  // The seesaw's P tiles: four 64 x kBlockN buffers (tile it in buffer it % 4), two to a 64-column
  // box, in boxes kQSmemBoxes and kQSmemBoxes + 1 of the Q array (the same swizzled layout as Q).
  static constexpr int kPBoxes = kSeesaw ? 2 : 0;
  // V ring depth: the K ring's, except at D = 512 with Q in registers, where the shared memory Q gives
  // up holds a third V stage (V is waited for a tile after K, so its ring runs shorter of lead).
  static constexpr int kStagesV =
      (D == 512 && kQRegCols > 0 && FMHA_SM90_SPLIT_RELEASE) ? FMHA_SM90_D512_V_STAGES : kStages;
  // consumer_loop_overlapped waits for the next tile's operands before P V(it)'s wgmma wait (measured at D = 128 only).
  // It waits for K(it+2) and V(it+1) before V(it) is released: needs K released on its own (split
  // release) and at least two stages in each ring, or a ring would wait on itself.
  static constexpr bool kEarlyOperandWait =
      FMHA_SM90_EARLY_OPERAND_WAIT && (D == 128 || (D == 512 && FMHA_SM90_D512_EARLY_OPERAND_WAIT)) &&
      FMHA_SM90_SPLIT_RELEASE && kStages >= 2 && kStagesV >= 2;
  // Shared-memory box of Q's head-dim box bx (0 .. kBoxes-1) and back, for boxes kept in shared memory.
  __host__ __device__ static constexpr int q_smem_box(int bx) {
    return kQRegCols == 0 || kSeesaw ? bx : (bx / (kBoxes / kConsumerWGs)) * kQSmemBoxesPerWg + bx % (kBoxes / kConsumerWGs);
  }
  __host__ __device__ static constexpr int q_global_box(int sb) {
    return kQRegCols == 0 || kSeesaw ? sb : (sb / kQSmemBoxesPerWg) * (kBoxes / kConsumerWGs) + sb % kQSmemBoxesPerWg;
  }
  static_assert(kOutCols <= 256 && kOutCols % 64 == 0, "PV wgmma N");
  static_assert(kStages >= 1, "ring depth: check the FMHA_SM90_*_STAGES / *_TILE_N knobs");
  static_assert(!kSetMaxNReg || (128 * kProducerRegs + 256 * kConsumerRegs <= kRegPool && kProducerRegs % 8 == 0 &&
                                 kProducerRegs >= 24 && kConsumerRegs <= 256),
                "setmaxnreg budget (FMHA_SM90_PRODUCER_REGS)");
  static_assert(kStagesV >= 1 && (kStagesV == kStages || FMHA_SM90_SPLIT_RELEASE), "separate V ring: split release");
  static_assert(kBlockN % 16 == 0 && kBlockN <= 256, "QK wgmma N / PV k steps");
  static_assert(!kSplitQk || (kBoxes % 2 == 0), "split Q K^T: each warpgroup takes whole boxes");
  static_assert(kQRegCols % kBoxCols == 0 && kQSmemBoxesPerWg >= 1, "Q in registers: whole boxes, some left in shared memory");
  static_assert(kQRegCols == 0 || kBlockN == 32, "Q in registers: the m64n32k16 register-A wgmma");
  static_assert(!kSeesaw || (kBlockN == 32 && kOutCols == 256), "seesaw: 32-key P buffers, two to a box; N = 256 P V");
  static_assert(kBlockN % kTmaRows == 0 && kTmaRows % 8 == 0, "TMA box rows: whole 1024 B swizzle groups");
};

template <class Tr>
struct SharedStorage {
  alignas(1024) uint16_t q[Tr::kQSmemBoxes + Tr::kPBoxes][Tr::kBlockM * Tr::kBoxCols];  // (see Tr::q_smem_box, kPBoxes)
  alignas(1024) uint16_t k[Tr::kStages][Tr::kBoxes][Tr::kBlockN * Tr::kBoxCols];
  alignas(1024) uint16_t v[Tr::kStagesV][Tr::kBoxes][Tr::kBlockN * Tr::kBoxCols];
  alignas(16) float4 s_exchange[Tr::kExchangeFloat4s];  // partial scores [parity][wg][kBlockN/8][128] (kSplitQk),
                                                        // or the seesaw's row states [parity][2][128]
  alignas(8) uint64_t full_k[Tr::kStages];  // TMA bytes of the K tile landed
  alignas(8) uint64_t full_v[Tr::kStagesV];  // TMA bytes of the V tile landed
  alignas(8) uint64_t empty_k[Tr::kStages];  // every consumer warp is done with the stage's K tile
  alignas(8) uint64_t empty_v[Tr::kStagesV];  // ... with its V tile (FMHA_SM90_SPLIT_RELEASE=0: with both)
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
  // kMergeDealtRows: the K and V rings (idle by then) receive the rows this CTA merges, from every
  // split of its cluster: o [num_splits][rows_per_rank][kMergeStride] fp32, then the LSEs
  // [num_splits][rows_per_rank] (see ClusterMerge). Rows padded by 4 floats at D <= 256 so that the
  // fragment stores of several rows do not fall on one bank (merge_fits checks the capacity).
  static constexpr int kMergeStride = Tr::kHeadDim + (Tr::kHeadDim <= 256 ? 4 : 0);
  __device__ float* merge_base() { return reinterpret_cast<float*>(&k[0][0][0]); }
};

// Floats of the K and V rings together (the cluster merge's receive buffer), or 0 when they are not
// adjacent.
template <class Tr>
constexpr size_t merge_capacity_floats() {
  return offsetof(SharedStorage<Tr>, v) == offsetof(SharedStorage<Tr>, k) + sizeof(SharedStorage<Tr>::k)
             ? (sizeof(SharedStorage<Tr>::k) + sizeof(SharedStorage<Tr>::v)) / sizeof(float)
             : 0;
}

// Whether the cluster merge's receive buffer holds num_splits x ceil(rows / num_splits) rows of o and
// their LSEs, rows = the packed rows of the fullest row block (the host checks before launching).
template <class Tr>
constexpr bool merge_fits(int num_splits, int rows) {
  const int block_rows = rows < Tr::kBlockM ? rows : Tr::kBlockM;
  const size_t slots = static_cast<size_t>(num_splits) * ((block_rows + num_splits - 1) / num_splits);
  return slots * (SharedStorage<Tr>::kMergeStride + 1) <= merge_capacity_floats<Tr>();
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
constexpr uint32_t kBarVTail = 2;   // consumers (the seesaw: the tile owner's warpgroup): V rows past the sequence cleared and fenced
constexpr uint32_t kBarScores = 3;  // consumers (kSplitQk): both partial score tiles written
constexpr uint32_t kBarNarrowMax = 4;  // narrow loop: every warp's column maxima (or sums) written
constexpr uint32_t kBarNarrowP = 5;    // narrow loop: every warp's part of P^T written and fenced

// Timing probe (FMHA_SM90_PROBE_TIMESTAMPS): for the first kProbeTiles ring positions of the first
// kProbeCtas CTAs (linear block index), the SM clock (clock64: one SM's counter, so only stamps of one
// CTA compare) when the producer lane starts waiting for a free stage and when it has issued the tile's
// TMA, and when consumer thread 0 starts waiting for the tile and has it. perf/stream_probe.py reads
// them (fmha_sm90_probe_read in capi.cu) and prints where a tile's time goes. The row after the ring
// positions is the CTA's timeline in %globaltimer nanoseconds (one clock for the whole GPU, so CTAs
// compare): entry, past griddepcontrol.wait, first K tile in, last V tile in, end, and the SM (%smid).
// consumer_loop_overlapped (the 64-row loop) also stamps its phases, filed under the iteration `it`: its
// operands waited for, wgmmas issued (Q K^T(it+1) and P V(it); Q K^T(it+1) alone with FMHA_SM90_PV_AFTER_QK),
// Q K^T(it+1) landed (consumer thread 0, and thread 128 of a second warpgroup), scores exchanged, softmax
// done, P V(it) landed.
enum ProbeEvent : int {
  kProbeKEmptyWait = 0, kProbeKIssued, kProbeVEmptyWait, kProbeVIssued,
  kProbeKFullWait, kProbeKFull, kProbeVFullWait, kProbeVFull,
  kProbeLoopIssued, kProbeQkLanded, kProbeQkLandedWg1, kProbeExchanged, kProbeSoftmaxDone, kProbePvLanded,
  kProbeOperandsReady,
  kProbeEvents
};
enum ProbeTimeline : int { kTimelineEntry = 0, kTimelineGridDep, kTimelineFirstK, kTimelineLastV, kTimelineEnd, kTimelineSmId };
static_assert(kTimelineSmId < kProbeEvents, "the timeline row holds kProbeEvents stamps");
constexpr int kProbeCtas = 256;
constexpr int kProbeRingTiles = 64;               // ring positions stamped
constexpr int kProbeTiles = kProbeRingTiles + 1;  // + the timeline row
#if FMHA_SM90_PROBE_TIMESTAMPS
__device__ unsigned long long g_probe_stamps[kProbeCtas * kProbeTiles * kProbeEvents];
#endif

#if FMHA_SM90_PROBE_TIMESTAMPS
// The linear block index the probe files a CTA's stamps under.
__device__ __forceinline__ unsigned probe_cta() {
  return blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
}
#endif

// A no-op unless the probe is compiled in.
__device__ __forceinline__ void probe_stamp(int it, int event) {
#if FMHA_SM90_PROBE_TIMESTAMPS
  const unsigned cta = probe_cta();
  if (cta < kProbeCtas && it < kProbeRingTiles) g_probe_stamps[(cta * kProbeTiles + it) * kProbeEvents + event] = clock64();
#else
  (void)it;
  (void)event;
#endif
}

// A CTA timeline stamp (%globaltimer) under the probe, from the thread that calls it; a no-op without it.
__device__ __forceinline__ void probe_timeline(int event) {
#if FMHA_SM90_PROBE_TIMESTAMPS
  const unsigned cta = probe_cta();
  if (cta < kProbeCtas)
    g_probe_stamps[(cta * kProbeTiles + kProbeRingTiles) * kProbeEvents + event] =
        event == kTimelineSmId ? ptx::sm_id() : ptx::global_timer();
#else
  (void)event;
#endif
}

// A consumer's wait for a full stage (ring position `it`), stamped by thread 0 under the probe.
__device__ __forceinline__ void wait_full_stage(uint64_t* full, uint32_t phase, int it, int wait_event, int ctid) {
  if (ctid == 0) probe_stamp(it, wait_event);
  ptx::mbarrier_wait_parity(full, phase);
  if (ctid == 0) {
    probe_stamp(it, wait_event + 1);
    if (it == 0 && wait_event == kProbeKFullWait) probe_timeline(kTimelineFirstK);
    if (wait_event == kProbeVFullWait) probe_timeline(kTimelineLastV);  // the last one stays
  }
}

// Most CTAs in one cluster merge (p.cluster_merge): the non-portable maximum on sm_90.
constexpr int kMaxClusterSplits = 16;

// mbarrier arrival counts.
constexpr uint32_t kFullArrivals = 1;  // the producer's arrive.expect_tx

// The KV tiles one CTA processes, and its rows' key limits.
struct TileRange {
  int L;      // clamped sequence length
  int begin;  // first tile index (tile = kBlockN tokens)
  int end;    // one past the last
};

template <class Tr>
__device__ __forceinline__ TileRange tile_range(const DecodeParams& p, int b, int row_block, int split) {
  int L = p.seqlens != nullptr ? p.seqlens[b] : p.S;
  L = min(max(L, 0), p.S);
  // Keys any row of this block can see: causal rows stop at L - T + t + 1 (<= L).
  int n_keys = L;
  if (p.causal) {
    const int t_last = min(p.T - 1, (row_block * Tr::kBlockM + Tr::kBlockM - 1) / p.G);
    n_keys = max(0, L - p.T + t_last + 1);
  }
  const int n_tiles = (n_keys + Tr::kBlockN - 1) / Tr::kBlockN;
  const int per_split = (n_tiles + p.num_splits - 1) / p.num_splits;
  TileRange r;
  r.L = L;
  r.begin = min(n_tiles, split * per_split);
  r.end = min(n_tiles, r.begin + per_split);
  return r;
}

// ----------------------------------------------------------------------------
// Producer: one thread streams K and V tiles into the ring.
// ----------------------------------------------------------------------------
// One K or V tile (kBlockN tokens from token0, all boxes) into one ring stage, completing on `full`.
// Pieces of kTmaRows tokens, box after box within a piece, so the halves of a D = 128 cache row
// are requested close together when kTmaRows < kBlockN.
template <class Tr>
__device__ __forceinline__ void load_kv_tile(uint16_t (&dst)[Tr::kBoxes][Tr::kBlockN * Tr::kBoxCols],
                                             const CUtensorMap* tmap, uint64_t* full, int token0, int kvh, int b,
                                             int head_major, uint64_t policy) {
#pragma unroll
  for (int r = 0; r < Tr::kBlockN; r += Tr::kTmaRows) {
    // Coordinates of dims 1 and 2: (token, head) or (head, token), see DecodeParams.
    const int c1 = head_major ? kvh : token0 + r, c2 = head_major ? token0 + r : kvh;
#pragma unroll
    for (int bx = 0; bx < Tr::kBoxes; ++bx) {
      uint16_t* d = &dst[bx][r * Tr::kBoxCols];
      if constexpr (FMHA_SM90_KV_EVICT_FIRST)
        ptx::tma_load_4d_hint(d, tmap, full, bx * Tr::kBoxCols, c1, c2, b, policy);
      else
        ptx::tma_load_4d(d, tmap, full, bx * Tr::kBoxCols, c1, c2, b);
    }
  }
}

template <class Tr>
__device__ __forceinline__ void producer_loop(SharedStorage<Tr>& ss, const CUtensorMap* tmap_k,
                                              const CUtensorMap* tmap_v, const TileRange& tr, int kvh, int b,
                                              int k_head_major, int v_head_major) {
  ptx::prefetch_tensormap(tmap_k);
  ptx::prefetch_tensormap(tmap_v);
  const uint64_t policy = ptx::create_policy_evict_first();
  for (int tile = tr.begin, it = 0; tile < tr.end; ++tile, ++it) {
    const int stage = it % Tr::kStages;
    const uint32_t phase = static_cast<uint32_t>(it / Tr::kStages) & 1u;
    probe_stamp(it, kProbeKEmptyWait);
    ptx::mbarrier_wait_parity(&ss.empty_k[stage], phase ^ 1u);  // first round passes on fresh barriers
    ptx::mbarrier_arrive_expect_tx(&ss.full_k[stage], Tr::kKvTileBytes);
    load_kv_tile<Tr>(ss.k[stage], tmap_k, &ss.full_k[stage], tile * Tr::kBlockN, kvh, b, k_head_major, policy);
    probe_stamp(it, kProbeKIssued);
    const int stage_v = it % Tr::kStagesV;
    const uint32_t phase_v = static_cast<uint32_t>(it / Tr::kStagesV) & 1u;
    probe_stamp(it, kProbeVEmptyWait);
    if constexpr (FMHA_SM90_SPLIT_RELEASE) ptx::mbarrier_wait_parity(&ss.empty_v[stage_v], phase_v ^ 1u);
    ptx::mbarrier_arrive_expect_tx(&ss.full_v[stage_v], Tr::kKvTileBytes);
    load_kv_tile<Tr>(ss.v[stage_v], tmap_v, &ss.full_v[stage_v], tile * Tr::kBlockN, kvh, b, v_head_major, policy);
    probe_stamp(it, kProbeVIssued);
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
template <class Tr, int kThreads = Tr::kConsumerThreads>
__device__ __forceinline__ void zero_v_tail(SharedStorage<Tr>& ss, int stage, int valid, int ctid) {
  constexpr int kChunksPerRow = Tr::kRowBytes / 16;  // 16 B chunks
  const int per_box = (Tr::kBlockN - valid) * kChunksPerRow;  // chunks to clear in each box
  const uint4 zero = make_uint4(0u, 0u, 0u, 0u);
  for (int e = ctid; e < Tr::kBoxes * per_box; e += kThreads) {
    const int box = e / per_box;
    reinterpret_cast<uint4*>(ss.v[stage][box])[valid * kChunksPerRow + e % per_box] = zero;
  }
}

// Gather the 64 packed Q rows of this block into the swizzled K-major tile (the boxes kept in shared
// memory). All consumer threads take part; pad rows are zero-filled.
template <class Tr>
__device__ __forceinline__ void load_q_tile_rows(SharedStorage<Tr>& ss, const DecodeParams& p, int b, int kvh,
                                                 int row0, int ctid) {
  constexpr int kChunksPerRow = Tr::kQSmemBoxes * 8;  // 16 B chunks kept in shared memory
  constexpr int kTotal = Tr::kBlockM * kChunksPerRow;
  static_assert(kTotal % Tr::kConsumerThreads == 0, "Q load split");
  constexpr int kPerThread = kTotal / Tr::kConsumerThreads;
  // A thread loads one chunk column c of the rows r_first + i kRowStep: (t, query head) of its first
  // row takes one division by G, the others follow by carries (a division per chunk measured ~58
  // instructions each in the SASS, ahead of the last load).
  static_assert(Tr::kConsumerThreads % kChunksPerRow == 0, "Q load: whole rows per pass");
  constexpr int kRowStep = Tr::kConsumerThreads / kChunksPerRow;
  const int c = ctid % kChunksPerRow;  // shared-memory chunk: box c / 8, chunk c % 8 of it
  const int r_first = ctid / kChunksPerRow;
  const int col = Tr::kQRegCols == 0 ? c * 8 : Tr::q_global_box(c / 8) * Tr::kBoxCols + (c % 8) * 8;
  const uint16_t* q = static_cast<const uint16_t*>(p.q) + b * p.q_b + kvh * p.G * p.q_h + col;
  int t = (row0 + r_first) / p.G, g = (row0 + r_first) % p.G;
  const int step_t = kRowStep / p.G, step_g = kRowStep % p.G;
  // All loads are issued before the first store (T=16 70.7 vs 73.6 us, T=4 125.0 vs 128.9 with the
  // division per chunk and loads in groups of four, run bk).
  uint4 val[kPerThread];
#pragma unroll
  for (int i = 0; i < kPerThread; ++i) {
    val[i] = make_uint4(0u, 0u, 0u, 0u);
    if (row0 + r_first + i * kRowStep < p.rows)
      val[i] = __ldg(reinterpret_cast<const uint4*>(q + t * p.q_t + g * p.q_h));
    t += step_t;
    g += step_g;
    if (g >= p.G) {
      g -= p.G;
      ++t;
    }
  }
#pragma unroll
  for (int i = 0; i < kPerThread; ++i) {
    const int r = r_first + i * kRowStep;
    const int chunk = (c % 8) ^ (r % 8);  // 128B swizzle
    *reinterpret_cast<uint4*>(&ss.q[c / 8][r * Tr::kBoxCols + chunk * 8]) = val[i];
  }
}

// load_q_tile where a pass of the consumer threads does not cover whole rows (the seesaw's 5 boxes: 40
// chunks a row): a division per chunk, once per CTA; all loads before the first store.
template <class Tr>
__device__ __forceinline__ void load_q_tile_chunks(SharedStorage<Tr>& ss, const DecodeParams& p, int b, int kvh,
                                                   int row0, int ctid) {
  constexpr int kChunksPerRow = Tr::kQSmemBoxes * 8;
  constexpr int kTotal = Tr::kBlockM * kChunksPerRow;
  static_assert(kTotal % Tr::kConsumerThreads == 0, "Q load split");
  constexpr int kPerThread = kTotal / Tr::kConsumerThreads;
  const uint16_t* q = static_cast<const uint16_t*>(p.q) + b * p.q_b + kvh * p.G * p.q_h;
  uint4 val[kPerThread];
#pragma unroll
  for (int i = 0; i < kPerThread; ++i) {
    const int e = ctid + i * Tr::kConsumerThreads, r = e / kChunksPerRow, c = e % kChunksPerRow;
    const int row = row0 + r, col = Tr::q_global_box(c / 8) * Tr::kBoxCols + (c % 8) * 8;
    val[i] = make_uint4(0u, 0u, 0u, 0u);
    if (row < p.rows) val[i] = __ldg(reinterpret_cast<const uint4*>(q + (row / p.G) * p.q_t + (row % p.G) * p.q_h + col));
  }
#pragma unroll
  for (int i = 0; i < kPerThread; ++i) {
    const int e = ctid + i * Tr::kConsumerThreads, r = e / kChunksPerRow, c = e % kChunksPerRow;
    *reinterpret_cast<uint4*>(&ss.q[c / 8][r * Tr::kBoxCols + ((c % 8) ^ (r % 8)) * 8]) = val[i];  // 128B swizzle
  }
}

template <class Tr>
__device__ __forceinline__ void load_q_tile(SharedStorage<Tr>& ss, const DecodeParams& p, int b, int kvh, int row0,
                                            int ctid) {
  if constexpr (Tr::kConsumerThreads % (Tr::kQSmemBoxes * 8) == 0)
    load_q_tile_rows<Tr>(ss, p, b, kvh, row0, ctid);
  else
    load_q_tile_chunks<Tr>(ss, p, b, kvh, row0, ctid);
}

// KV-head pairs (p.head_pairs, see DecodeParams): which D = 64 KV head packed row n of CTA kvh belongs to,
// its row within that head's T G rows, and which 64-column half of the pair's Q and O it uses. With Q's
// other half zero, S = K Q^T over the 128 columns is the row's own head's scores, and of O^T = V^T P^T
// only the rows (head-dim columns) of its half are its output.
struct PairRow {
  int kvh, row, half;
};
__device__ __forceinline__ PairRow pair_row(const DecodeParams& p, bool pairs, int kvh, int n) {
  if (!pairs) return PairRow{kvh, n, 0};
  const int per_head = p.rows >> 1;
  const int half = n >= per_head ? 1 : 0;
  return PairRow{2 * kvh + half, n - half * per_head, half};
}

// Q of a KV-head pair (p.head_pairs; the narrow loop reads rows 0 .. kNarrowRows - 1): row n of head 2 kvh
// + half fills box `half` with its 64 columns and the other box with zeros (see pair_row).
template <class Tr>
__device__ __forceinline__ void load_q_tile_pairs(SharedStorage<Tr>& ss, const DecodeParams& p, int b, int kvh,
                                                  int ctid) {
  static_assert(Tr::kHeadPairs && Tr::kQSmemBoxes == 2, "head pairs: Q as two 64-column boxes");
  constexpr int kChunksPerRow = 16;  // 16 B chunks of a 128-column row
  constexpr int kTotal = Tr::kNarrowRows * kChunksPerRow;
  static_assert(kTotal % Tr::kConsumerThreads == 0, "Q load split");
  constexpr int kPerThread = kTotal / Tr::kConsumerThreads;
  const uint16_t* q = static_cast<const uint16_t*>(p.q) + b * p.q_b;
  uint4 val[kPerThread];
#pragma unroll
  for (int i = 0; i < kPerThread; ++i) {
    const int e = ctid + i * Tr::kConsumerThreads, r = e / kChunksPerRow, c = e % kChunksPerRow;
    const PairRow pr = pair_row(p, true, kvh, r);
    val[i] = make_uint4(0u, 0u, 0u, 0u);
    if (r < p.rows && c / 8 == pr.half) {
      const int t = pr.row / p.G, hq = pr.kvh * p.G + pr.row % p.G;
      val[i] = __ldg(reinterpret_cast<const uint4*>(q + t * p.q_t + hq * p.q_h + (c % 8) * 8));
    }
  }
#pragma unroll
  for (int i = 0; i < kPerThread; ++i) {
    const int e = ctid + i * Tr::kConsumerThreads, r = e / kChunksPerRow, c = e % kChunksPerRow;
    *reinterpret_cast<uint4*>(&ss.q[c / 8][r * Tr::kBoxCols + ((c % 8) ^ (r % 8)) * 8]) = val[i];  // 128B swizzle
  }
}

// Q columns held in registers (Tr::kQRegCols): warpgroup wg's A fragments of Q K^T for its last
// kQRegSteps k16 steps. Fragment layout (wgmma A from registers, as mma.m16n8k16's A): register j of
// step kk holds two 16-bit values of row 16 w + g + 8 (j & 1), columns 16 kk + 8 (j >> 1) + 2 q, +1.
template <class Tr>
struct QRegs {
  uint32_t r[Tr::kQRegSteps > 0 ? Tr::kQRegSteps : 1][4];
};

template <class Tr>
__device__ __forceinline__ void load_q_regs(QRegs<Tr>& qr, const DecodeParams& p, int b, int kvh, int row0, int wg,
                                            int tid_wg) {
  if constexpr (Tr::kQRegSteps > 0) {
    const int w = tid_wg / 32, lane = tid_wg % 32, g = lane / 4, ql = lane % 4;
    const int col_base =
        (Tr::kSeesaw ? Tr::kHeadDim : (wg + 1) * (Tr::kHeadDim / Tr::kConsumerWGs)) - Tr::kQRegCols + 2 * ql;
    const uint16_t* q = static_cast<const uint16_t*>(p.q);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = row0 + 16 * w + g + 8 * h;
      const bool valid = row < p.rows;  // padding rows are zero
      const uint16_t* src = q;
      if (valid) src = q + b * p.q_b + (row / p.G) * p.q_t + (kvh * p.G + row % p.G) * p.q_h + col_base;
#pragma unroll
      for (int kk = 0; kk < Tr::kQRegSteps; ++kk)
#pragma unroll
        for (int half = 0; half < 2; ++half)
          qr.r[kk][h + 2 * half] = valid ? __ldg(reinterpret_cast<const uint32_t*>(src + 16 * kk + 8 * half)) : 0u;
    }
  }
}

template <int N>
__device__ __forceinline__ void fence_regs(float (&r)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) ptx::reg_fence(r[i]);
}
template <int N>
__device__ __forceinline__ void fence_regs(uint32_t (&r)[N][4]) {
#pragma unroll
  for (int i = 0; i < N; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) ptx::reg_fence(r[i][j]);
}

// O *= alpha, row-wise. Once the running maxima settle (after the first tiles of a sequence) alpha
// is exactly 1 for most tiles: a warp in which every row kept its max skips the kOutCols / 2
// multiplies a thread (128 at D = 512). Multiplying by 1 is exact, so skipping changes no bit.
// The vote and branch cost more than they save at small D (kSkipUnitRescale).
template <bool kSkipUnit, int N>
__device__ __forceinline__ void rescale_acc(float (&acc)[N], const float (&alpha)[2]) {
  if constexpr (kSkipUnit)
    if (!__any_sync(0xffffffffu, alpha[0] != 1.f || alpha[1] != 1.f)) return;
#pragma unroll
  for (int i = 0; i < N; ++i) acc[i] *= alpha[frag_row_half(i)];
}

// S = Q K^T over head-dim columns [kCol0, kCol0 + kCols): kCols/16 k16 steps,
// each a 32 B advance inside a 128 B swizzle row, moving to the next box every 4 steps.
// With Tr::kQRegCols (split Q K^T at D = 512) the last kQRegSteps steps take A from qr.
template <class Tr, bool kBf16, int kCols = Tr::kHeadDim>
__device__ __forceinline__ void qk_gemm(float (&s)[Tr::kBlockN / 2], const SharedStorage<Tr>& ss, int stage,
                                        int col0 = 0, const QRegs<Tr>* qr = nullptr) {
  constexpr uint32_t kSbo = 8 * Tr::kRowBytes;  // 8-row core-matrix groups, packed: 1024 B
  constexpr uint32_t kLboUnused = 16;           // K-major swizzled: LBO not used (encoded as 1)
  constexpr int kSteps = kCols / 16;
  constexpr int kSmemSteps = kSteps - (kCols == Tr::kHeadDim && !Tr::kSeesaw ? 0 : Tr::kQRegSteps);
  static_assert(kCols != Tr::kHeadDim || Tr::kQRegSteps == 0 || Tr::kSeesaw, "Q in registers: split Q K^T or seesaw");
  const int box0 = col0 / Tr::kBoxCols;
  const ptx::SmemDescSw128 da(ptx::smem_addr(&ss.q[Tr::q_smem_box(box0)][0]), kLboUnused, kSbo);
  const ptx::SmemDescSw128 db(ptx::smem_addr(&ss.k[stage][box0][0]), kLboUnused, kSbo);
#pragma unroll
  for (int kk = 0; kk < kSteps; ++kk) {
    const uint32_t in_row = (kk % 4) * 32;
    if (kk < kSmemSteps)
      ptx::wgmma_ss<Tr::kBlockN, kBf16>(s, da.at((kk / 4) * Tr::kQBoxBytes + in_row),
                                        db.at((kk / 4) * Tr::kKvBoxBytes + in_row), kk > 0 ? 1 : 0);
    else if constexpr (kSmemSteps < kSteps)
      ptx::wgmma_rs_m64n32k16_kmajor<kBf16>(s, qr->r[kk - kSmemSteps], db.at((kk / 4) * Tr::kKvBoxBytes + in_row), 1);
  }
}

// kSplitQk: warpgroup wg holds the partial S over its half of the head dim; add
// the other warpgroup's half through shared memory. Thread t of each warpgroup
// owns the same fragment positions, so it exchanges with thread t of the other.
// Both sides compute mine + other, which is the same float sum either way round
// (addition is commutative), so both warpgroups keep identical softmax statistics.
// Two buffers by tile parity: a warpgroup writes buffer (it & 1) again only after
// the next barrier, which the other passes only once it has read that buffer.
template <class Tr>
__device__ __forceinline__ void exchange_scores(float (&s)[Tr::kBlockN / 2], SharedStorage<Tr>& ss, int it, int wg,
                                                int tid_wg) {
  constexpr int kVec = Tr::kBlockN / 8;  // float4 per thread
  float4* base = ss.s_exchange + (it & 1) * 2 * kVec * 128;
  float4* mine = base + wg * kVec * 128;
  const float4* other = base + (wg ^ 1) * kVec * 128;
#pragma unroll
  for (int j = 0; j < kVec; ++j) mine[j * 128 + tid_wg] = make_float4(s[4 * j], s[4 * j + 1], s[4 * j + 2], s[4 * j + 3]);
  ptx::named_barrier_sync(kBarScores, Tr::kConsumerThreads);
#pragma unroll
  for (int j = 0; j < kVec; ++j) {
    const float4 o = other[j * 128 + tid_wg];
    s[4 * j] += o.x;
    s[4 * j + 1] += o.y;
    s[4 * j + 2] += o.z;
    s[4 * j + 3] += o.w;
  }
}

// O[:, wg cols] += P V: kBlockN/16 k16 steps of 16 tokens (16 swizzle rows =
// 2048 B) each; the N = kOutCols columns span kOutCols/64 boxes (LBO apart).
template <class Tr, bool kBf16>
__device__ __forceinline__ void pv_gemm(float (&acc)[Tr::kOutCols / 2], const uint32_t (&pa)[Tr::kBlockN / 16][4],
                                        const SharedStorage<Tr>& ss, int stage, int wg) {
  constexpr uint32_t kSbo = 8 * Tr::kRowBytes;     // 8-token groups along K: 1024 B
  constexpr uint32_t kLbo = Tr::kKvBoxBytes;       // next 64 output columns: next box
  const ptx::SmemDescSw128 db(ptx::smem_addr(&ss.v[stage][wg * (Tr::kOutCols / Tr::kBoxCols)][0]), kLbo, kSbo);
#pragma unroll
  for (int kk = 0; kk < Tr::kBlockN / 16; ++kk) ptx::wgmma_rs<Tr::kOutCols, kBf16>(acc, pa[kk], db.at(kk * 16 * Tr::kRowBytes), 1);
}

// Where packed query row `row` of KV head kvh lives: token t, query head hq, and its output row,
// split partial row and LSE slot (the LSE is [B, Hq, T]; partials are [split][B][T][Hq][D]).
struct OutRow {
  int t, hq;
  int64_t lse_idx;
  __device__ __forceinline__ OutRow(const DecodeParams& p, int b, int kvh, int row)
      : t(row / p.G), hq(kvh * p.G + row % p.G), lse_idx((static_cast<int64_t>(b) * p.Hq + hq) * p.T + t) {}
  __device__ __forceinline__ uint16_t* out(const DecodeParams& p, int b) const {
    return static_cast<uint16_t*>(p.out) + b * p.o_b + t * p.o_t + hq * p.o_h;
  }
  __device__ __forceinline__ float* partial(const DecodeParams& p, int b, int split, int head_dim) const {
    return p.o_partial + (((static_cast<int64_t>(split) * p.B + b) * p.T + t) * p.Hq + hq) * head_dim;
  }
  __device__ __forceinline__ float* partial_lse(const DecodeParams& p, int split) const {
    return p.lse_partial + static_cast<int64_t>(split) * p.B * p.Hq * p.T + lse_idx;
  }
};

// Visible-key limit (absolute token index, exclusive) of packed row `row`: causal rows stop at
// L - T + t + 1; padding rows (row >= p.rows) borrow the last token's limit.
__device__ __forceinline__ int row_key_limit(const DecodeParams& p, const TileRange& tr, int row) {
  const int t = min(row / p.G, p.T - 1);
  return p.causal ? min(tr.L, tr.L - p.T + t + 1) : tr.L;
}

// Split-KV merge inside a cluster (p.cluster_merge): the num_splits CTAs of one (row block, KV head,
// sequence) run as one cluster, rank = split. The block's rows are dealt out to the ranks,
// rows_per_rank each (rank r merges rows [r rows_per_rank, (r + 1) rows_per_rank)). Every CTA pushes
// each partial row (its split's normalised o and LSE) into the receive buffer of the rank that merges
// it (st.shared::cluster, no round trip), then every rank merges its rows from its own shared memory
// (merge_cluster_splits). Two cluster barriers: before the pushes (every ring in the cluster is idle)
// and after them.
template <class Tr>
struct ClusterMerge {
  int ns, rows_per_rank;
  uint32_t base;  // this CTA's receive buffer (shared::cta address; mapa gives the others')
  __device__ __forceinline__ ClusterMerge(SharedStorage<Tr>& ss, const DecodeParams& p, int row0)
      : ns(p.num_splits), rows_per_rank((min(Tr::kBlockM, p.rows - row0) + p.num_splits - 1) / p.num_splits),
        base(ptx::smem_addr(ss.merge_base())) {}
  __device__ __forceinline__ int owner(int row_local) const { return row_local / rows_per_rank; }
  // Receive slot of (split, local row of its owner): o at column 0, and the LSE.
  __device__ __forceinline__ uint32_t o_slot(int split, int row_local) const {
    return base + 4u * static_cast<uint32_t>((split * rows_per_rank + row_local % rows_per_rank) *
                                             SharedStorage<Tr>::kMergeStride);
  }
  __device__ __forceinline__ uint32_t lse_slot(int split, int row_local) const {
    return base + 4u * static_cast<uint32_t>(ns * rows_per_rank * SharedStorage<Tr>::kMergeStride +
                                             split * rows_per_rank + row_local % rows_per_rank);
  }
};

// Where one partial row of a split goes: the workspace (combine kernel), or the receive buffer of the
// cluster rank that merges it.
template <class Tr>
struct PartialRow {
  float* o = nullptr;    // workspace: the row's column 0
  float* lse = nullptr;
  uint32_t o_remote = 0, lse_remote = 0;  // cluster merge: shared::cluster addresses in the owner CTA
  bool cluster = false;
  // in_cluster: push into cm's ranks, else write the workspace. (cm by reference with a flag, not
  // a pointer that may be null: a pointer to it kept cm in local memory, a 24-byte stack frame.)
  __device__ __forceinline__ PartialRow(const DecodeParams& p, const OutRow& r, int b, int split, int row_local,
                                        const ClusterMerge<Tr>& cm, bool in_cluster) {
    if (in_cluster) {
      cluster = true;
      const uint32_t owner = static_cast<uint32_t>(cm.owner(row_local));
      o_remote = ptx::map_shared_rank(cm.o_slot(split, row_local), owner);
      lse_remote = ptx::map_shared_rank(cm.lse_slot(split, row_local), owner);
    } else {
      o = r.partial(p, b, split, Tr::kHeadDim);
      lse = r.partial_lse(p, split);
    }
  }
  __device__ __forceinline__ void put(int col, float x) const {
    if (cluster) ptx::st_shared_cluster_f32(o_remote + 4u * col, x);
    else o[col] = x;
  }
  __device__ __forceinline__ void put2(int col, float x, float y) const {  // col even
    if (cluster) ptx::st_shared_cluster_v2f32(o_remote + 4u * col, x, y);
    else *reinterpret_cast<float2*>(o + col) = make_float2(x, y);
  }
  __device__ __forceinline__ void put_lse(float x) const {
    if (cluster) ptx::st_shared_cluster_f32(lse_remote, x);
    else *lse = x;
  }
};

// Whether this launch merges its splits in clusters. The kernel body and the epilogues must agree
// (every thread runs both cluster barriers or none), so both ask here. Instantiations without
// Tr::kClusterMerge compile the path out (the host never asks them for it).
template <class Tr>
__device__ __forceinline__ bool uses_cluster_merge(const DecodeParams& p) {
  if constexpr (!Tr::kClusterMerge) return false;
  return p.num_splits > 1 && p.cluster_merge == kMergeDealtRows;
}

// (Also checked here, as the host does: the narrow loop has its own epilogue, which would leave the
// partials unmerged; the host never asks, but a wrong answer must not be possible.)
template <class Tr>
__device__ __forceinline__ bool uses_pair_merge(const DecodeParams& p) {
  if constexpr (!Tr::kPairMerge) return false;
  const bool narrow = Tr::kNarrow && p.rows <= Tr::kNarrowRows;
  return p.num_splits == 2 && p.cluster_merge == kMergePair && !narrow;
}

// Before the first partial row of a cluster merge is pushed: every CTA of the cluster has finished
// with its ring. All threads of the CTA take part (the producer in the kernel body).
template <class Tr>
__device__ __forceinline__ bool begin_cluster_push(const DecodeParams& p) {
  const bool cluster = uses_cluster_merge<Tr>(p);
  if (cluster) ptx::cluster_sync();
  return cluster;
}

// kMergePair: the two splits of a row block run as a cluster pair (rank = split). Rank 0 merges rows
// 0-31 of the block (warps 0-1 hold them), rank 1 rows 32-63 (warps 2-3). As soon as a CTA's loop is
// done, its two warps holding the partner's rows push their partial (o already divided by l, and the
// LSE) into the partner's pair_recv and arrive on its pair_full (release, cluster scope), whether or
// not the partner is still streaming; its other two warps wait on their own pair_full and merge the
// partner's values with their registers, in split order (the bits do not depend on which CTA finishes
// first), then store out and the LSE. The first CTA to finish thus pushes while the second streams;
// after the second finishes, one push of 16 KB (D = 128) and the first's merge remain.
template <class Tr, bool kBf16>
__device__ __forceinline__ void store_output_pair(SharedStorage<Tr>& ss, const DecodeParams& p,
                                                  const float (&acc)[Tr::kOutCols / 2], const float (&inv_l)[2],
                                                  const float (&lse)[2], int b, int kvh, int row0, int split,
                                                  int tid_wg) {
  static_assert(Tr::kConsumerWGs == 1, "one consumer warpgroup holds the whole row");
  constexpr int kVec = Tr::kOutCols / 8;  // float4 of a thread's accumulators (2 rows x kOutCols / 4 columns)
  using Ss = SharedStorage<Tr>;
  const int w = tid_wg / 32, lane = tid_wg % 32, g = lane / 4, ql = lane % 4;
  const int slot = (w % 2) * 32 + lane;
  // acc[4 k + e] is row h = e / 2 (0: g, 1: g + 8) of the warp's 16: the partial value a split writes.
  auto partial4 = [&](int k) {
    return make_float4(acc[4 * k] * inv_l[0], acc[4 * k + 1] * inv_l[0], acc[4 * k + 2] * inv_l[1],
                       acc[4 * k + 3] * inv_l[1]);
  };
  if (w / 2 != split) {  // the partner merges these rows: push them
    const uint32_t partner = static_cast<uint32_t>(split ^ 1);
    const uint32_t o_dst = ptx::map_shared_rank(ptx::smem_addr(&ss.pair_recv[0]), partner);
    const uint32_t lse_dst = ptx::map_shared_rank(ptx::smem_addr(&ss.pair_recv_lse[0]), partner);
#pragma unroll
    for (int k = 0; k < kVec; ++k) ptx::st_shared_cluster_v4f32(o_dst + 16u * (k * Ss::kPairSlots + slot), partial4(k));
#pragma unroll
    for (int h = 0; h < 2; ++h) ptx::st_shared_cluster_f32(lse_dst + 4u * (h * Ss::kPairSlots + slot), lse[h]);
    ptx::mbarrier_arrive_remote_release_cluster(ptx::map_shared_rank(ptx::smem_addr(&ss.pair_full), partner));
    return;
  }
  ptx::mbarrier_wait_parity_acquire_cluster(&ss.pair_full, 0);
  float wt[2][2], inv_w[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const float other = ss.pair_recv_lse[h * Ss::kPairSlots + slot];
    const float l0 = split == 0 ? lse[h] : other, l1 = split == 0 ? other : lse[h];
    const float m = fmaxf(l0, l1);
    wt[h][0] = l0 == -INFINITY ? 0.f : exp2_approx((l0 - m) * kLog2e);
    wt[h][1] = l1 == -INFINITY ? 0.f : exp2_approx((l1 - m) * kLog2e);
    const float wsum = wt[h][0] + wt[h][1];
    inv_w[h] = wsum > 0.f ? 1.f / wsum : 0.f;
    const int row = row0 + 16 * w + g + 8 * h;
    if (ql == 0 && row < p.rows) p.lse[OutRow(p, b, kvh, row).lse_idx] = wsum > 0.f ? m + logf(wsum) : -INFINITY;
  }
  uint16_t* dst[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int row = row0 + 16 * w + g + 8 * h;
    dst[h] = row < p.rows ? OutRow(p, b, kvh, row).out(p, b) : nullptr;
  }
#pragma unroll
  for (int k = 0; k < kVec; ++k) {
    const float4 mine = partial4(k), other = ss.pair_recv[k * Ss::kPairSlots + slot];
    const float4 o0 = split == 0 ? mine : other, o1 = split == 0 ? other : mine;
    const float r00 = fmaf(wt[0][1], o1.x, wt[0][0] * o0.x) * inv_w[0];
    const float r01 = fmaf(wt[0][1], o1.y, wt[0][0] * o0.y) * inv_w[0];
    const float r10 = fmaf(wt[1][1], o1.z, wt[1][0] * o0.z) * inv_w[1];
    const float r11 = fmaf(wt[1][1], o1.w, wt[1][0] * o0.w) * inv_w[1];
    if (dst[0]) *reinterpret_cast<uint32_t*>(dst[0] + frag_col(4 * k, ql)) = pack2<kBf16>(r00, r01);
    if (dst[1]) *reinterpret_cast<uint32_t*>(dst[1] + frag_col(4 * k + 2, ql)) = pack2<kBf16>(r10, r11);
  }
}

// Write this warpgroup's output columns (or the split partials) and the LSE.
template <class Tr, bool kBf16>
__device__ __forceinline__ void store_output(SharedStorage<Tr>& ss, const DecodeParams& p,
                                             const float (&acc)[Tr::kOutCols / 2], const float (&inv_l)[2],
                                             const float (&lse)[2], int b, int kvh, int row0, int split, int wg,
                                             int tid_wg) {
  if constexpr (Tr::kPairMerge) {
    if (uses_pair_merge<Tr>(p)) {
      store_output_pair<Tr, kBf16>(ss, p, acc, inv_l, lse, b, kvh, row0, split, tid_wg);
      return;
    }
  }
  const int w = tid_wg / 32, lane = tid_wg % 32, g = lane / 4, ql = lane % 4;
  const int col0 = wg * Tr::kOutCols;
  const ClusterMerge<Tr> cm(ss, p, row0);
  const bool in_cluster = begin_cluster_push<Tr>(p);
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int row = row0 + 16 * w + g + 8 * h;
    if (row >= p.rows) continue;  // padding row
    const OutRow r(p, b, kvh, row);
    if (p.num_splits == 1) {
      uint16_t* dst = r.out(p, b) + col0;
#pragma unroll
      for (int c = 0; c < Tr::kOutCols / 8; ++c) {
        const int i = 4 * c + 2 * h;
        *reinterpret_cast<uint32_t*>(dst + frag_col(i, ql)) = pack2<kBf16>(acc[i] * inv_l[h], acc[i + 1] * inv_l[h]);
      }
      if (ql == 0 && wg == 0) p.lse[r.lse_idx] = lse[h];
    } else if constexpr (!Tr::kClusterMerge) {  // the workspace only (the combine kernel merges)
      float* dst = r.partial(p, b, split, Tr::kHeadDim) + col0;
#pragma unroll
      for (int c = 0; c < Tr::kOutCols / 8; ++c) {
        const int i = 4 * c + 2 * h;
        *reinterpret_cast<float2*>(dst + frag_col(i, ql)) = make_float2(acc[i] * inv_l[h], acc[i + 1] * inv_l[h]);
      }
      if (ql == 0 && wg == 0) *r.partial_lse(p, split) = lse[h];
    } else {
      const PartialRow<Tr> dst(p, r, b, split, row - row0, cm, in_cluster);
#pragma unroll
      for (int c = 0; c < Tr::kOutCols / 8; ++c) {
        const int i = 4 * c + 2 * h;
        dst.put2(col0 + frag_col(i, ql), acc[i] * inv_l[h], acc[i + 1] * inv_l[h]);
      }
      if (ql == 0 && wg == 0) dst.put_lse(lse[h]);
    }
  }
}

// Per-row visible-key limit (absolute token index, exclusive) of the two rows a thread owns.
template <class Tr>
__device__ __forceinline__ void row_key_limits(const DecodeParams& p, const TileRange& tr, int row0, int w, int g,
                                               int (&limit_abs)[2]) {
#pragma unroll
  for (int h = 0; h < 2; ++h) limit_abs[h] = row_key_limit(p, tr, row0 + 16 * w + g + 8 * h);
}


// One warp's arrival on a stage's "empty" barrier, once its wgmmas reading the stage completed.
__device__ __forceinline__ void release_stage(uint64_t* empty, int lane) {
  __syncwarp();
  if (lane == 0) ptx::mbarrier_arrive(empty);
}

// Consumer start: Q into shared memory (fenced for the wgmma, all consumer threads synced) and
// the per-row key limits.
template <class Tr>
__device__ __forceinline__ void consumer_prologue(SharedStorage<Tr>& ss, const DecodeParams& p, const TileRange& tr,
                                                  int b, int kvh, int row0, int ctid, int (&limit_abs)[2]) {
  const int tid_wg = ctid % 128;
  load_q_tile<Tr>(ss, p, b, kvh, row0, ctid);
  ptx::fence_proxy_async_shared();  // generic st.shared -> async-proxy (wgmma) reads
  ptx::named_barrier_sync(kBarQReady, Tr::kConsumerThreads);
  row_key_limits<Tr>(p, tr, row0, tid_wg / 32, (tid_wg % 32) / 4, limit_abs);
}

// Wait for the V tile of ring position `it`; clear its rows past the sequence (see zero_v_tail). The
// clearing threads are kThreads (all consumers by default) of index clear_tid (-1: ctid), which sync on
// kBarVTail; clear = false: this thread only waits (the seesaw's other warpgroup, see consumer_loop_seesaw).
template <class Tr, int kThreads = Tr::kConsumerThreads>
__device__ __forceinline__ void wait_v_stage(SharedStorage<Tr>& ss, const TileRange& tr, int it, int stage,
                                             uint32_t phase, int ctid, int clear_tid = -1, bool clear = true) {
  wait_full_stage(&ss.full_v[stage], phase, it, kProbeVFullWait, ctid);
  if constexpr (FMHA_SM90_ZERO_V_TAIL) {
    const int valid = max(tr.L - (tr.begin + it) * Tr::kBlockN, 0);  // uniform: the barrier is safe
    if (clear && valid < Tr::kBlockN) {
      zero_v_tail<Tr, kThreads>(ss, stage, valid, clear_tid < 0 ? ctid : clear_tid);
      ptx::fence_proxy_async_shared();  // generic stores -> the wgmma's async-proxy reads
      ptx::named_barrier_sync(kBarVTail, kThreads);
    }
  }
}
template <class Tr, int kThreads = Tr::kConsumerThreads>
__device__ __forceinline__ void wait_v_tile(SharedStorage<Tr>& ss, const TileRange& tr, int it, int ctid,
                                            int clear_tid = -1, bool clear = true) {
  wait_v_stage<Tr, kThreads>(ss, tr, it, it % Tr::kStagesV, static_cast<uint32_t>(it / Tr::kStagesV) & 1u, ctid,
                             clear_tid, clear);
}
// Wait for the K tile of ring position `it` (stamped by thread 0 under the probe).
template <class Tr>
__device__ __forceinline__ void wait_k_tile(SharedStorage<Tr>& ss, int it, int ctid) {
  wait_full_stage(&ss.full_k[it % Tr::kStages], static_cast<uint32_t>(it / Tr::kStages) & 1u, it, kProbeKFullWait,
                  ctid);
}

// The online softmax of ring position `it` (s becomes P), masked only where a key of the tile is past some
// row's limit (FMHA_SM90_EDGE_MASK_ONLY; unmasked_until: keys below it are visible to every row).
template <class Tr>
__device__ __forceinline__ void softmax_ring_tile(float (&s)[Tr::kBlockN / 2], RowState& st, const DecodeParams& p,
                                                  const TileRange& tr, int it, const int (&limit_abs)[2],
                                                  int unmasked_until, int ql, float (&alpha)[2]) {
  const int key0 = (tr.begin + it) * Tr::kBlockN;
  const int key_limit[2] = {limit_abs[0] - key0, limit_abs[1] - key0};
  if (FMHA_SM90_EDGE_MASK_ONLY && key0 + Tr::kBlockN <= unmasked_until)  // uniform over the CTA
    online_softmax_tile<Tr::kBlockN, false>(s, st, key_limit, p.qk_scale, ql, alpha);
  else
    online_softmax_tile<Tr::kBlockN>(s, st, key_limit, p.qk_scale, ql, alpha);
}

// The consumer warpgroup of thread ctid, read from lane 0 so that the compiler knows it is warp-uniform:
// shared-memory descriptors built from it then stay in uniform registers (the D = 512 loop's SASS had an
// R2UR before nearly every wgmma: 89 in the kernel, 8 with this).
template <class Tr>
__device__ __forceinline__ int warpgroup_index(int ctid) {
  return Tr::kConsumerWGs == 1 ? 0 : __shfl_sync(0xffffffffu, ctid / 128, 0);
}

template <class Tr, bool kBf16>
__device__ __forceinline__ void consumer_loop(SharedStorage<Tr>& ss, const DecodeParams& p, const TileRange& tr,
                                              int b, int kvh, int row0, int split, int ctid) {
  const int wg = warpgroup_index<Tr>(ctid);
  const int tid_wg = ctid % 128;
  const int lane = tid_wg % 32, ql = lane % 4;  // quad lane: owns columns 2 ql, 2 ql + 1 of each 8

  int limit_abs[2];
  consumer_prologue<Tr>(ss, p, tr, b, kvh, row0, ctid, limit_abs);
  QRegs<Tr> qr;
  load_q_regs<Tr>(qr, p, b, kvh, row0, wg, tid_wg);

  RowState st;
  st.init();
  float acc[Tr::kOutCols / 2];
#pragma unroll
  for (int i = 0; i < Tr::kOutCols / 2; ++i) acc[i] = 0.f;

  for (int tile = tr.begin, it = 0; tile < tr.end; ++tile, ++it) {
    const int stage = it % Tr::kStages;
    const uint32_t phase = static_cast<uint32_t>(it / Tr::kStages) & 1u;

    // S = Q K^T
    float s[Tr::kBlockN / 2];
    wait_full_stage(&ss.full_k[stage], phase, it, kProbeKFullWait, ctid);
    ptx::wgmma_fence();
    if constexpr (Tr::kSplitQk)
      qk_gemm<Tr, kBf16, Tr::kHeadDim / 2>(s, ss, stage, wg * (Tr::kHeadDim / 2), &qr);
    else
      qk_gemm<Tr, kBf16>(s, ss, stage);
    ptx::wgmma_commit_group();
    ptx::wgmma_wait_group<0>();
    fence_regs(s);
    if constexpr (FMHA_SM90_SPLIT_RELEASE) {  // the K tile is free: the producer may refill it during softmax and P V
      __syncwarp();
      if (lane == 0) ptx::mbarrier_arrive(&ss.empty_k[stage]);
    }
    if constexpr (Tr::kSplitQk) exchange_scores<Tr>(s, ss, it, wg, tid_wg);

    // Online softmax; P packed into the A fragment of the PV wgmma.
    const int key0 = tile * Tr::kBlockN;
    const int key_limit[2] = {limit_abs[0] - key0, limit_abs[1] - key0};
    float alpha[2];
    online_softmax_tile<Tr::kBlockN>(s, st, key_limit, p.qk_scale, ql, alpha);
    rescale_acc<Tr::kSkipUnitRescale>(acc, alpha);
    uint32_t pa[Tr::kBlockN / 16][4];
#pragma unroll
    for (int kk = 0; kk < Tr::kBlockN / 16; ++kk)
#pragma unroll
      for (int j = 0; j < 4; ++j) pa[kk][j] = pack2<kBf16>(s[8 * kk + 2 * j], s[8 * kk + 2 * j + 1]);

    // O += P V
    fence_regs(acc);
    fence_regs(pa);
    wait_v_tile<Tr>(ss, tr, it, ctid);
    ptx::wgmma_fence();
    pv_gemm<Tr, kBf16>(acc, pa, ss, it % Tr::kStagesV, wg);
    ptx::wgmma_commit_group();
    ptx::wgmma_wait_group<0>();
    fence_regs(acc);
    fence_regs(pa);

    // V (and, without split release, K) free: this warp's wgmmas that read them have completed.
    __syncwarp();
    if (lane == 0) {
      ptx::mbarrier_arrive(&ss.empty_v[it % Tr::kStagesV]);
      if constexpr (!FMHA_SM90_SPLIT_RELEASE) ptx::mbarrier_arrive(&ss.empty_k[stage]);
    }
  }

  float inv_l[2], lse[2];
  finalize_rows(st, inv_l, lse);
  store_output<Tr, kBf16>(ss, p, acc, inv_l, lse, b, kvh, row0, split, wg, tid_wg);
}

// The consumer loop with the tensor core kept busy across tiles (FMHA_SM90_OVERLAP):
//   iteration it:  issue S(it+1) = Q K(it+1)^T  and  O += P(it) V(it)   (two wgmma groups)
//                  wait for S(it+1) only; softmax(it+1) runs while P V(it) is in flight
//                  wait for P V(it); rescale O by alpha(it+1); P(it+1) becomes P
// Groups complete in order, so wait_group<1> after committing [QK, PV] means QK is done.
template <class Tr, bool kBf16>
__device__ __forceinline__ void consumer_loop_overlapped(SharedStorage<Tr>& ss, const DecodeParams& p,
                                                         const TileRange& tr, int b, int kvh, int row0, int split,
                                                         int ctid) {
  const int wg = warpgroup_index<Tr>(ctid);
  const int tid_wg = ctid % 128;
  const int lane = tid_wg % 32, ql = lane % 4;  // quad lane: owns columns 2 ql, 2 ql + 1 of each 8

  int limit_abs[2];
  consumer_prologue<Tr>(ss, p, tr, b, kvh, row0, ctid, limit_abs);
  QRegs<Tr> qr;
  load_q_regs<Tr>(qr, p, b, kvh, row0, wg, tid_wg);

  RowState st;
  st.init();
  float acc[Tr::kOutCols / 2];
#pragma unroll
  for (int i = 0; i < Tr::kOutCols / 2; ++i) acc[i] = 0.f;
  uint32_t pa[Tr::kBlockN / 16][4];  // P of the tile whose P V is next, as the PV wgmma's A fragment
  float s[Tr::kBlockN / 2];

  // Keys below this are visible to every row of the block (causal rows start at L - T + 1).
  const int unmasked_until = p.causal ? tr.L - p.T + 1 : tr.L;
  // Every wgmma issue below is unconditional between its fence and its wait (the last tile is
  // peeled off the loop), so ptxas can follow the two groups without serialising them.
  auto wait_k = [&](int it) { wait_k_tile<Tr>(ss, it, ctid); };
  auto issue_qk = [&](int it) {  // S = Q K^T of ring position `it`, committed as one group
    const int stage = it % Tr::kStages;
    if constexpr (Tr::kSplitQk)
      qk_gemm<Tr, kBf16, Tr::kHeadDim / 2>(s, ss, stage, wg * (Tr::kHeadDim / 2), &qr);
    else
      qk_gemm<Tr, kBf16>(s, ss, stage);
    ptx::wgmma_commit_group();
  };
  auto issue_pv = [&](int it) {  // O += P V of ring position `it`, committed as one group
    pv_gemm<Tr, kBf16>(acc, pa, ss, it % Tr::kStagesV, wg);
    ptx::wgmma_commit_group();
  };
  // After S of ring position `it` landed: free its K tile, masked online softmax (s becomes P).
  auto softmax_scores = [&](int it, float (&alpha)[2]) {
    fence_regs(s);
    if constexpr (FMHA_SM90_SPLIT_RELEASE) {
      release_stage(&ss.empty_k[it % Tr::kStages], lane);
      fence_regs(s);  // the softmax reads s after the arrive: ptxas would otherwise sink the arrive below it
    }
    if constexpr (Tr::kSplitQk) exchange_scores<Tr>(s, ss, it, wg, tid_wg);
    if (ctid == 0 && it > 0) probe_stamp(it - 1, kProbeExchanged);  // (filed under the loop iteration)
    softmax_ring_tile<Tr>(s, st, p, tr, it, limit_abs, unmasked_until, ql, alpha);
  };
  auto pack_p = [&]() {
#pragma unroll
    for (int kk = 0; kk < Tr::kBlockN / 16; ++kk)
#pragma unroll
      for (int j = 0; j < 4; ++j) pa[kk][j] = pack2<kBf16>(s[8 * kk + 2 * j], s[8 * kk + 2 * j + 1]);
  };
  const int n = tr.end - tr.begin;
  constexpr bool kPvAfterQk = FMHA_SM90_PV_AFTER_QK && Tr::kConsumerWGs == 2;
  // Before P V(it) and Q K^T(it + 1) are issued: V(it) and, unless it is the last, K(it + 1) landed.
  auto wait_operands = [&](int it) {
    wait_v_tile<Tr>(ss, tr, it, ctid);
    if (it + 1 < n) wait_k(it + 1);
  };
  auto release_after_pv = [&](int it) {
    release_stage(&ss.empty_v[it % Tr::kStagesV], lane);
    if constexpr (!FMHA_SM90_SPLIT_RELEASE) release_stage(&ss.empty_k[it % Tr::kStages], lane);
  };
  if (n == 0) {
    float inv_l[2], lse[2];
    finalize_rows(st, inv_l, lse);
    store_output<Tr, kBf16>(ss, p, acc, inv_l, lse, b, kvh, row0, split, wg, tid_wg);
    return;
  }
  {
    float alpha[2];
    wait_k(0);
    fence_regs(s);
    ptx::wgmma_fence();
    issue_qk(0);
    ptx::wgmma_wait_group<0>();
    softmax_scores(0, alpha);  // acc is zero: nothing to rescale
    pack_p();
    if constexpr (Tr::kEarlyOperandWait) wait_operands(0);
  }
  for (int it = 0; it + 1 < n; ++it) {
    if constexpr (!Tr::kEarlyOperandWait) wait_operands(it);
    if (ctid == 0) probe_stamp(it, kProbeOperandsReady);
    fence_regs(acc);
    fence_regs(pa);
    fence_regs(s);
    ptx::wgmma_fence();
    issue_qk(it + 1);
    if constexpr (!kPvAfterQk) issue_pv(it);
    if (ctid == 0) probe_stamp(it, kProbeLoopIssued);
    float alpha[2];
    if constexpr (kPvAfterQk) {
      ptx::wgmma_wait_group<0>();  // S(it+1) landed
      ptx::wgmma_fence();
      issue_pv(it);                // runs during the exchange and the softmax
    } else {
      ptx::wgmma_wait_group<1>();  // S(it+1) landed; P V(it) may still run (pa is repacked only after it)
    }
    if (ctid == 0) probe_stamp(it, kProbeQkLanded);
    if (ctid == 128) probe_stamp(it, kProbeQkLandedWg1);
    softmax_scores(it + 1, alpha);
    if (ctid == 0) probe_stamp(it, kProbeSoftmaxDone);
    // Tr::kEarlyOperandWait: the next iteration's operands are waited for here, before P V(it) is.
    // ptxas places the wgmma wait below as early as its dependencies allow, ahead of the softmax's
    // exponentials (out of the overlap with P V); the mbarrier wait loops are a boundary it keeps. But
    // V(it) is then released later, which costs D = 512 8% (run an).
    if constexpr (Tr::kEarlyOperandWait) wait_operands(it + 1);
    ptx::wgmma_wait_group<0>();  // P V(it) done: acc and pa are ours again
    if (ctid == 0) probe_stamp(it, kProbePvLanded);
    fence_regs(acc);
    fence_regs(pa);
    release_after_pv(it);
    rescale_acc<Tr::kSkipUnitRescale>(acc, alpha);
    pack_p();
  }
  if constexpr (!Tr::kEarlyOperandWait) wait_operands(n - 1);
  fence_regs(acc);
  fence_regs(pa);
  ptx::wgmma_fence();
  issue_pv(n - 1);
  ptx::wgmma_wait_group<0>();
  fence_regs(acc);
  release_after_pv(n - 1);

  float inv_l[2], lse[2];
  finalize_rows(st, inv_l, lse);
  store_output<Tr, kBf16>(ss, p, acc, inv_l, lse, b, kvh, row0, split, wg, tid_wg);
}

// ----------------------------------------------------------------------------
// D = 512: the two consumer warpgroups take turns (FMHA_SM90_D512_SEESAW)
// ----------------------------------------------------------------------------
// Warpgroup w owns the tiles it = w, w + 2, ... (ring positions): it computes their S = Q K^T over the
// whole head dim (the tile's K stage is read by it alone: empty_k counts its 4 warps) and their online
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
// reported the row state's stores and loads as races with bar.arrive (run fb), and mbarrier arrive
// (release) / wait (acquire) orders them in the PTX memory model for the tool and the hardware alike.
// A publish never runs a phase ahead of the wait: publishing it + 2 needs the other's P(it + 1), which
// it publishes after taking P(it).
// No wgmma group is in flight across the loop's back edge (ptxas would serialise them, perf/RESULTS.md).
// Buffer reuse: P(it) lives in buffer it % 4. It overwrites P(it-4), whose last reader, the other
// warpgroup's P V(it-4), completed in that warpgroup's trip before it published P(it-1), which the
// writer waited for (three buffers would do; four make two per box). The row state of tile it is in slot
// it % 2: it overwrites that of it-2, which the other warpgroup took before publishing it-1.
template <class Tr>
struct SeesawSmem {
  static_assert(Tr::kSeesaw, "seesaw only");
  // P(it): box kQSmemBoxes + (it / 2) % 2 of the Q array, columns 32 (it % 2) .. + 31 (bytes 64 (it % 2)
  // of each 128 B row), as the A operand of the P V wgmma (K-major, 128B-swizzled like Q).
  __device__ static uint16_t* p_box(SharedStorage<Tr>& ss, int it) { return ss.q[Tr::kQSmemBoxes + ((it >> 1) & 1)]; }
  __device__ static uint32_t p_in_row(int it) { return static_cast<uint32_t>(it & 1) * 64u; }
  // Row state after tile it, thread tid_wg's: (m_i[0], m_i[1], l_i[0], l_i[1]) and (alpha[0], alpha[1], -, -).
  __device__ static float4* state(SharedStorage<Tr>& ss, int it) { return ss.s_exchange + (it & 1) * 256; }
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
  const int unmasked_until = p.causal ? tr.L - p.T + 1 : tr.L;  // keys below are visible to every row

  auto wait_k = [&](int it) { wait_k_tile<Tr>(ss, it, ctid); };
  auto issue_qk = [&](int it) {  // S = Q K^T of ring position it (K landed), one group
    qk_gemm<Tr, kBf16>(s, ss, it % Tr::kStages, 0, &qr);
    ptx::wgmma_commit_group();
  };
  auto issue_pv = [&](int it) {  // O[:, own columns] += P(it) V(it), one group
    constexpr uint32_t kSbo = 8 * Tr::kRowBytes;
    const ptx::SmemDescSw128 dp(ptx::smem_addr(Sm::p_box(ss, it)), 16, kSbo);
    const ptx::SmemDescSw128 dv(ptx::smem_addr(&ss.v[it % Tr::kStagesV][wg * (Tr::kOutCols / Tr::kBoxCols)][0]),
                                Tr::kKvBoxBytes, kSbo);
#pragma unroll
    for (int kk = 0; kk < Tr::kBlockN / 16; ++kk)
      ptx::wgmma_ss_m64n256k16_mn_b<kBf16>(acc, dp.at(Sm::p_in_row(it) + kk * 32), dv.at(kk * 16 * Tr::kRowBytes), 1);
    ptx::wgmma_commit_group();
  };
  // V(it) landed. The owner of tile it also clears V's rows past the sequence (see zero_v_tail) for both
  // warpgroups, before it publishes P(it): the other one's P V(it) follows its p_full wait. (A barrier of
  // both warpgroups there would be reached from two different instructions, which bar.sync forbids.)
  auto wait_v = [&](int it, bool owner) { wait_v_tile<Tr, 128>(ss, tr, it, ctid, tid_wg, owner); };
  // Own tile it, S landed: free its K stage, masked online softmax (s becomes P), publish P and the state.
  auto softmax_publish = [&](int it, float (&alpha)[2]) {
    fence_regs(s);
    release_stage(&ss.empty_k[it % Tr::kStages], lane);
    fence_regs(s);  // keep the arrive ahead of the softmax
    softmax_ring_tile<Tr>(s, st, p, tr, it, limit_abs, unmasked_until, ql, alpha);
    // Element i = 4 c + 2 h + e: row 16 w + g + 8 h, column 8 c + 2 ql + e, i.e. 16 B chunk
    // 4 (it % 2) + c of the row, swizzled by the row's (16 w + g + 8 h) % 8 = g; conflict-free per store.
    uint8_t* box = reinterpret_cast<uint8_t*>(Sm::p_box(ss, it));
    const int chunk0 = 4 * (it & 1);
#pragma unroll
    for (int c = 0; c < Tr::kBlockN / 8; ++c)
#pragma unroll
      for (int h = 0; h < 2; ++h)
        *reinterpret_cast<uint32_t*>(box + (16 * w + g + 8 * h) * Tr::kRowBytes + ((chunk0 + c) ^ g) * 16 + 4 * ql) =
            pack2<kBf16>(s[4 * c + 2 * h], s[4 * c + 2 * h + 1]);
    wait_v(it, true);
    float4* state = Sm::state(ss, it);
    state[tid_wg] = make_float4(st.m_i[0], st.m_i[1], st.l_i[0], st.l_i[1]);
    state[128 + tid_wg] = make_float4(alpha[0], alpha[1], 0.f, 0.f);
    ptx::fence_proxy_async_shared();  // P: generic stores -> the other warpgroup's (and our) wgmma reads
    ptx::mbarrier_arrive(&ss.p_full[it & 1]);
  };
  // The other's tile it: wait until it published P(it), take the row state, O *= alpha, issue P V(it).
  auto take_issue_pv = [&](int it) {
    ptx::mbarrier_wait_parity(&ss.p_full[it & 1], static_cast<uint32_t>(it >> 1) & 1u);
    const float4* state = Sm::state(ss, it);
    const float4 ml = state[tid_wg], a = state[128 + tid_wg];
    st.m_i[0] = ml.x;
    st.m_i[1] = ml.y;
    st.l_i[0] = ml.z;
    st.l_i[1] = ml.w;
    const float alpha[2] = {a.x, a.y};
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
    release_stage(&ss.empty_v[it % Tr::kStagesV], lane);
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

  float inv_l[2], lse[2];
  finalize_rows(st, inv_l, lse);
  store_output<Tr, kBf16>(ss, p, acc, inv_l, lse, b, kvh, row0, split, wg, tid_wg);
}

// ----------------------------------------------------------------------------
// Narrow problems (at most 16 packed query rows: T = 1 with G <= 16, or T x G <= 16)
// ----------------------------------------------------------------------------
// The loops above put the packed rows in wgmma's M = 64, so at T = 1 with 4 query heads per KV
// head 60 of 64 rows are padding the tensor core multiplies anyway: 64 multiply-adds per cache
// byte, which keeps the GPU at its power cap (perf/RESULTS.md). Here the operands swap: keys and
// head-dim columns fill M, the 16 query rows are N.
//   S^T = K Q^T     per 64-key M block: wgmma m64n16k16, A = K tile (K-major), B = Q rows 0-15
//   softmax over the keys of each column (query row): within a thread (2 per M block), across the 8
//                   lanes of a column (shuffles), across the 4 warps (shared memory, kBarNarrowMax)
//   P^T -> shared  bf16/fp16, K-major rows of 64 keys, one stmatrix.trans per M block and warp (the
//                   accumulator's 16 x 16 is four m8n8 fragments); kBarNarrowP once every warp wrote its part
//   O^T += V^T P^T  per 64 head-dim columns: wgmma m64n16k16, A = V tile read transposed (MN-major)
// Accumulator fragments (see softmax.cuh): element i of a thread holds M row 16 w + g + 8 h and
// column n = 8 c + 2 q + e, h = (i >> 1) & 1, c = i >> 2, e = i & 1; column slot j = 2 c + e.
// Shared memory: rows 0-15 of Q's first box hold the 16 query rows' first 64 head-dim columns; rows
// 16-47 hold P^T (one 16-row, 1024 B aligned block per 64-key M block) and rows 48-49 the per-warp
// column reductions (64 floats), so no buffer is added. Both are single-buffered. The reductions
// are read before kBarNarrowP and written again after it. P^T is read by the P V wgmma, which each
// warp waits for before the next tile; a warp writes P^T again only after the next tile's
// kBarNarrowMax, which no warp passes before all have finished that wait. (A pipelined version
// that leaves P V in flight across that barrier would need two P^T buffers.)
template <class Tr>
struct NarrowSmem {
  static constexpr int kMBlocks = Tr::kBlockN / 64;
  static constexpr int kPRow0 = 16;   // first Q-box row used for P^T
  static constexpr int kRedRow = 48;  // Q-box rows 48-49: the cross-warp reductions (64 floats)
  static_assert(kPRow0 + 16 * kMBlocks <= kRedRow, "narrow: P^T blocks must fit below the reduction row");
  static_assert(Tr::kBlockM == 64, "narrow: spare rows of the 64-row Q box");
  __device__ static uint16_t* p_block(SharedStorage<Tr>& ss, int mb) { return &ss.q[0][(kPRow0 + 16 * mb) * Tr::kBoxCols]; }
  __device__ static float* red(SharedStorage<Tr>& ss) { return reinterpret_cast<float*>(&ss.q[0][kRedRow * Tr::kBoxCols]); }
};

// Column reduction across the 4 warps: lanes 0-3 (g = 0) of each warp hold the warp's values for
// columns 8 c + 2 q + e; every thread gets the combined value of its 4 columns.
template <class Tr, bool kMax>
__device__ __forceinline__ void narrow_cross_warp(SharedStorage<Tr>& ss, float (&v)[4], int w, int lane) {
  float* red = NarrowSmem<Tr>::red(ss);
  const int q = lane % 4;
  // columns 2 q, 2 q + 1 (slots j = 0, 1) and 8 + 2 q, 9 + 2 q (j = 2, 3): two 8-byte halves a warp row
  float2* mine = reinterpret_cast<float2*>(red + w * 16 + 2 * q);
  if (lane < 4) {
    mine[0] = make_float2(v[0], v[1]);
    mine[4] = make_float2(v[2], v[3]);
  }
  ptx::named_barrier_sync(kBarNarrowMax, Tr::kConsumerThreads);
  const float2* cols = reinterpret_cast<const float2*>(red + 2 * q);
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    float2 r = cols[4 * half];
#pragma unroll
    for (int ww = 1; ww < 4; ++ww) {
      const float2 o = cols[8 * ww + 4 * half];
      r = kMax ? make_float2(fmaxf(r.x, o.x), fmaxf(r.y, o.y)) : make_float2(r.x + o.x, r.y + o.y);
    }
    v[2 * half] = r.x;
    v[2 * half + 1] = r.y;
  }
}

// Reduce over the 8 lanes g = 0..7 that share a column (lane bits 2-4).
template <bool kMax>
__device__ __forceinline__ float narrow_lanes_reduce(float v) {
#pragma unroll
  for (int m = 4; m <= 16; m <<= 1) {
    const float o = __shfl_xor_sync(0xffffffffu, v, m);
    v = kMax ? fmaxf(v, o) : v + o;
  }
  return v;
}

template <class Tr, bool kBf16>
__device__ __forceinline__ void consumer_loop_narrow(SharedStorage<Tr>& ss, const DecodeParams& p,
                                                     const TileRange& tr, int b, int kvh, int split, int ctid) {
  using Ns = NarrowSmem<Tr>;
  static_assert(Tr::kConsumerThreads == 128, "narrow: one consumer warpgroup");
  constexpr int kMB = Ns::kMBlocks;
  constexpr int kDB = Tr::kHeadDim / 64;  // 64-column blocks of O^T
  constexpr uint32_t kSbo = 8 * Tr::kRowBytes;
  const int w = ctid / 32, lane = ctid % 32, g = lane / 4, q = lane % 4;

  // KV-head pairs (p.head_pairs): only the D = 128 stream instantiation serves them (capi.cu).
  // (No local variables for them: a dead one changed the register allocation of the other instantiations.)
  if constexpr (Tr::kHeadPairs) {
    if (p.head_pairs) load_q_tile_pairs<Tr>(ss, p, b, kvh, ctid);
    else load_q_tile<Tr>(ss, p, b, kvh, 0, ctid);
  } else {
    load_q_tile<Tr>(ss, p, b, kvh, 0, ctid);
  }
  ptx::fence_proxy_async_shared();
  ptx::named_barrier_sync(kBarQReady, Tr::kConsumerThreads);

  // Per column slot j (query row n = 8 (j >> 1) + 2 q + (j & 1)): visible-key limit and state.
  int limit_abs[4];
  float m_i[4], l_i[4];
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    if constexpr (Tr::kHeadPairs)
      limit_abs[j] = row_key_limit(p, tr, pair_row(p, p.head_pairs != 0, kvh, 8 * (j >> 1) + 2 * q + (j & 1)).row);
    else
      limit_abs[j] = row_key_limit(p, tr, 8 * (j >> 1) + 2 * q + (j & 1));
    m_i[j] = -INFINITY;
    l_i[j] = 0.f;
  }
  float acc[kDB][8];
#pragma unroll
  for (int db = 0; db < kDB; ++db)
#pragma unroll
    for (int i = 0; i < 8; ++i) acc[db][i] = 0.f;

  const ptx::SmemDescSw128 dq(ptx::smem_addr(&ss.q[0][0]), 16, kSbo);                  // Q rows 0-15 (B of S^T)
  const ptx::SmemDescSw128 dp(ptx::smem_addr(Ns::p_block(ss, 0)), 16, kSbo);          // P^T blocks (B of O^T)
  // stmatrix: lane 8 (2 c + h) + r stores column r of matrix (h, c), i.e. query row n = 8 c + r, keys
  // 16 w + 8 h .. + 7: the 16-byte chunk 2 w + h of row n, swizzled (chunk ^ n % 8); + 16 rows per M block.
  const int st_h = (lane >> 3) & 1, st_n = 8 * (lane >> 4) + (lane & 7);
  const uint32_t p_store = ptx::smem_addr(Ns::p_block(ss, 0)) + st_n * Tr::kRowBytes +
                           16 * ((2 * w + st_h) ^ (st_n % 8));
  // Keys below this are visible to every row (causal rows start at L - T + 1): no mask needed.
  const int unmasked_until = p.causal ? tr.L - p.T + 1 : tr.L;
  static_assert(Tr::kStagesV == Tr::kStages, "narrow: one ring position for K and V");
  int stage = 0;        // it % kStages, kept as a counter: the deep rings have 3 or 6 stages (no shift)
  uint32_t phase = 0;   // (it / kStages) & 1
  for (int tile = tr.begin, it = 0; tile < tr.end; ++tile, ++it) {
    // S^T = K Q^T
    float s[kMB][8];
    wait_full_stage(&ss.full_k[stage], phase, it, kProbeKFullWait, ctid);
    ptx::wgmma_fence();
    const ptx::SmemDescSw128 dk(ptx::smem_addr(&ss.k[stage][0][0]), 16, kSbo);
#pragma unroll
    for (int mb = 0; mb < kMB; ++mb)
#pragma unroll
      for (int kk = 0; kk < Tr::kHeadDim / 16; ++kk) {
        const uint32_t in_row = (kk % 4) * 32;
        ptx::wgmma_ss_m64n16k16<kBf16, false>(
            s[mb], dk.at((kk / 4) * Tr::kKvBoxBytes + mb * 64 * Tr::kRowBytes + in_row),
            dq.at((kk / 4) * Tr::kQBoxBytes + in_row), kk > 0 ? 1 : 0);
      }
    ptx::wgmma_commit_group();
    ptx::wgmma_wait_group<0>();
#pragma unroll
    for (int mb = 0; mb < kMB; ++mb) fence_regs(s[mb]);
    if constexpr (FMHA_SM90_SPLIT_RELEASE) {
      release_stage(&ss.empty_k[stage], lane);
#pragma unroll
      for (int mb = 0; mb < kMB; ++mb) fence_regs(s[mb]);  // keep the arrive ahead of the softmax (as in the overlapped loop)
    }

    // Online softmax down the columns. The column maxima are taken on the raw scores (qk_scale > 0,
    // so scaling after the max is the same), and P = 2^(s qk_scale - ref) is one FFMA and an ex2. Keys
    // past a row's limit are masked only in tiles that reach the first limit (uniform over the CTA).
    const int key0 = tile * Tr::kBlockN;
    float mx[4] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY};
    if (FMHA_SM90_EDGE_MASK_ONLY && key0 + Tr::kBlockN <= unmasked_until) {
#pragma unroll
      for (int mb = 0; mb < kMB; ++mb)
#pragma unroll
        for (int i = 0; i < 8; ++i) mx[2 * (i >> 2) + (i & 1)] = fmaxf(mx[2 * (i >> 2) + (i & 1)], s[mb][i]);
    } else {
#pragma unroll
      for (int mb = 0; mb < kMB; ++mb)
#pragma unroll
        for (int i = 0; i < 8; ++i) {
          const int j = 2 * (i >> 2) + (i & 1);
          const int key = key0 + mb * 64 + 16 * w + g + 8 * frag_row_half(i);
          s[mb][i] = key < limit_abs[j] ? s[mb][i] : -INFINITY;
          mx[j] = fmaxf(mx[j], s[mb][i]);
        }
    }
#pragma unroll
    for (int j = 0; j < 4; ++j) mx[j] = narrow_lanes_reduce<true>(mx[j]);
    narrow_cross_warp<Tr, true>(ss, mx, w, lane);
    float alpha[4], neg_ref[4], sum[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const float m_new = fmaxf(m_i[j], mx[j] * p.qk_scale);
      const float ref = m_new == -INFINITY ? 0.f : m_new;
      alpha[j] = exp2_approx(m_i[j] - ref);  // m_i = -inf -> 0
      neg_ref[j] = -ref;
      m_i[j] = m_new;
      sum[j] = 0.f;
    }
    // P^T into shared memory (row n = query row, 64 keys per M block, 128B-swizzled): per M block the
    // warp's 16 keys x 16 columns are four 8x8 matrices in the m8n8 fragment layout, stored transposed.
#pragma unroll
    for (int mb = 0; mb < kMB; ++mb) {
      uint32_t pk[4];
#pragma unroll
      for (int r = 0; r < 4; ++r) {  // matrix r = 2 c + h: elements 2 r, 2 r + 1 (slots j = 2 c, 2 c + 1)
        const float p0 = exp2_approx(fmaf(s[mb][2 * r], p.qk_scale, neg_ref[2 * (r >> 1)]));
        const float p1 = exp2_approx(fmaf(s[mb][2 * r + 1], p.qk_scale, neg_ref[2 * (r >> 1) + 1]));
        sum[2 * (r >> 1)] += p0;
        sum[2 * (r >> 1) + 1] += p1;
        pk[r] = pack2<kBf16>(p0, p1);
      }
      ptx::stmatrix_x4_trans(p_store + mb * 16 * Tr::kRowBytes, pk[0], pk[1], pk[2], pk[3]);
    }
#pragma unroll
    for (int j = 0; j < 4; ++j) l_i[j] = l_i[j] * alpha[j] + sum[j];
    ptx::fence_proxy_async_shared();  // generic P^T stores -> the PV wgmma's async-proxy reads
#pragma unroll
    for (int db = 0; db < kDB; ++db)
#pragma unroll
      for (int i = 0; i < 8; ++i) acc[db][i] *= alpha[2 * (i >> 2) + (i & 1)];
    ptx::named_barrier_sync(kBarNarrowP, Tr::kConsumerThreads);

    // O^T += V^T P^T
    wait_v_stage<Tr>(ss, tr, it, stage, phase, ctid);
#pragma unroll
    for (int db = 0; db < kDB; ++db) fence_regs(acc[db]);
    ptx::wgmma_fence();
    const ptx::SmemDescSw128 dv(ptx::smem_addr(&ss.v[stage][0][0]), Tr::kKvBoxBytes, kSbo);
#pragma unroll
    for (int db = 0; db < kDB; ++db)
#pragma unroll
      for (int kk = 0; kk < Tr::kBlockN / 16; ++kk)
        ptx::wgmma_ss_m64n16k16<kBf16, true>(acc[db], dv.at(db * Tr::kKvBoxBytes + kk * 16 * Tr::kRowBytes),
                                             dp.at((kk / 4) * 16 * Tr::kRowBytes + (kk % 4) * 32), 1);
    ptx::wgmma_commit_group();
    ptx::wgmma_wait_group<0>();
#pragma unroll
    for (int db = 0; db < kDB; ++db) fence_regs(acc[db]);
    release_stage(&ss.empty_v[stage], lane);
    if constexpr (!FMHA_SM90_SPLIT_RELEASE) release_stage(&ss.empty_k[stage], lane);
    if (++stage == Tr::kStages) {
      stage = 0;
      phase ^= 1u;
    }
  }

  // Row sums over all keys: this thread's, its column's 8 lanes, the 4 warps. The reduction row
  // is free: every warp passed the last kBarNarrowP (or none ran) after its last read of it.
  float l_tot[4];
#pragma unroll
  for (int j = 0; j < 4; ++j) l_tot[j] = narrow_lanes_reduce<false>(l_i[j]);
  narrow_cross_warp<Tr, false>(ss, l_tot, w, lane);
  float inv_l[4], lse[4];
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const bool empty = !(l_tot[j] > 0.f);
    inv_l[j] = empty ? 0.f : 1.f / l_tot[j];
    lse[j] = empty ? -INFINITY : (m_i[j] + __log2f(l_tot[j])) * kLn2;
  }

  // Epilogue: O^T element (d, n) -> out[b, t, hq, d] (or the split partials); the LSE once per column.
  const ClusterMerge<Tr> cm(ss, p, 0);
  const bool in_cluster = begin_cluster_push<Tr>(p);
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const int n = 8 * (j >> 1) + 2 * q + (j & 1);
    if (n >= p.rows) continue;  // padding column
    if constexpr (Tr::kHeadPairs) {
      if (p.head_pairs) {  // column n: its own head's 64 of the 128 O^T rows (head pairs are never split: capi.cu)
        const PairRow pr = pair_row(p, true, kvh, n);
        const OutRow r(p, b, pr.kvh, pr.row);
        uint16_t* dst = r.out(p, b);
#pragma unroll
        for (int db = 0; db < kDB; ++db)
#pragma unroll
          for (int h = 0; h < 2; ++h)
            if (db == pr.half) dst[16 * w + g + 8 * h] = half_bits<kBf16>(acc[db][4 * (j >> 1) + 2 * h + (j & 1)] * inv_l[j]);
        if (w == 0 && g == 0) p.lse[r.lse_idx] = lse[j];
        continue;
      }
    }
    const OutRow r(p, b, kvh, n);
    if (p.num_splits == 1) {
      uint16_t* dst = r.out(p, b);
#pragma unroll
      for (int db = 0; db < kDB; ++db)
#pragma unroll
        for (int h = 0; h < 2; ++h)
          dst[db * 64 + 16 * w + g + 8 * h] = half_bits<kBf16>(acc[db][4 * (j >> 1) + 2 * h + (j & 1)] * inv_l[j]);
      if (w == 0 && g == 0) p.lse[r.lse_idx] = lse[j];
    } else {
      const PartialRow<Tr> dst(p, r, b, split, n, cm, in_cluster);
#pragma unroll
      for (int db = 0; db < kDB; ++db)
#pragma unroll
        for (int h = 0; h < 2; ++h) dst.put(db * 64 + 16 * w + g + 8 * h, acc[db][4 * (j >> 1) + 2 * h + (j & 1)] * inv_l[j]);
      if (w == 0 && g == 0) dst.put_lse(lse[j]);
    }
  }
}

// ----------------------------------------------------------------------------
// Split-KV merge inside a cluster (p.cluster_merge), after the pushes (see ClusterMerge)
// ----------------------------------------------------------------------------
// This rank's rows, from its own receive buffer, with combine_splits_kernel's merge step (SplitMerge,
// common/combine.cuh) over chunks of kMergeChunk splits (the combine kernel takes 4 or 16 at a time, so
// beyond 4 splits the two paths round differently).
template <class Tr, bool kBf16>
__device__ __forceinline__ void merge_cluster_splits(SharedStorage<Tr>& ss, const DecodeParams& p, int b, int kvh,
                                                     int row0, int ctid) {
  constexpr int kChunksPerRow = Tr::kHeadDim / 4;
  constexpr int kMergeChunk = 4;
  const ClusterMerge<Tr> cm(ss, p, row0);
  const int rank = static_cast<int>(ptx::cluster_ctarank());
  const int first = rank * cm.rows_per_rank;  // local row index in the block
  const int n_rows = max(0, min(cm.rows_per_rank, min(Tr::kBlockM, p.rows - row0) - first));
  const float* buf = ss.merge_base();
  for (int c = ctid; c < n_rows * kChunksPerRow; c += Tr::kConsumerThreads) {
    const int lr = c / kChunksPerRow;
    const int col = (c % kChunksPerRow) * 4;
    const float* lse_s = buf + cm.ns * cm.rows_per_rank * SharedStorage<Tr>::kMergeStride + lr;
    SplitMerge merge;
    for (int s0 = 0; s0 < cm.ns; s0 += kMergeChunk) {
      float ls[kMergeChunk];
      float4 o[kMergeChunk];
#pragma unroll
      for (int j = 0; j < kMergeChunk; ++j) {
        const int s = s0 + j;
        ls[j] = s < cm.ns ? lse_s[s * cm.rows_per_rank] : -INFINITY;
        o[j] = s < cm.ns ? *reinterpret_cast<const float4*>(
                               buf + (s * cm.rows_per_rank + lr) * SharedStorage<Tr>::kMergeStride + col)
                         : make_float4(0.f, 0.f, 0.f, 0.f);
      }
      merge.add(ls, o);
    }
    const OutRow orow(p, b, kvh, row0 + first + lr);
    *reinterpret_cast<uint2*>(orow.out(p, b) + col) = merge.packed_out<kBf16>();  // 8 B: out's strides are multiples of 16 B
    if (col == 0) p.lse[orow.lse_idx] = merge.lse();
  }
}

// ----------------------------------------------------------------------------
// The kernel
// ----------------------------------------------------------------------------
template <int D, bool kBf16, int kVariant>
__global__ void __launch_bounds__(DecodeTraits<D, kVariant>::kThreads, DecodeTraits<D, kVariant>::kCtasPerSm)
    decode_kernel(const __grid_constant__ CUtensorMap tmap_k, const __grid_constant__ CUtensorMap tmap_v,
                  const DecodeParams p) {
  using Tr = DecodeTraits<D, kVariant>;
  static_assert(!Tr::kSetMaxNReg || Tr::kCtasPerSm == 1, "setmaxnreg budgets assume one CTA per SM");
  extern __shared__ uint8_t smem_raw[];
  // Round up on the shared-window address (what the swizzle and the descriptors see).
  const uint32_t pad = (1024u - (ptx::smem_addr(smem_raw) & 1023u)) & 1023u;
  SharedStorage<Tr>& ss = *reinterpret_cast<SharedStorage<Tr>*>(smem_raw + pad);

  const int split = blockIdx.x % p.num_splits;
  const int row_block = blockIdx.x / p.num_splits;
  const int kvh = blockIdx.y;
  const int b = blockIdx.z;
  const int row0 = row_block * Tr::kBlockM;
  if (threadIdx.x == 0) {
    probe_timeline(kTimelineEntry);
    probe_timeline(kTimelineSmId);  // the SM it runs on (not a time)
  }

  if (threadIdx.x == 0) {
#pragma unroll
    for (int s = 0; s < Tr::kStages; ++s) {
      ptx::mbarrier_init(&ss.full_k[s], kFullArrivals);
      // One arrival per consumer warp that reads the stage's K tile (the seesaw: one warpgroup's).
      ptx::mbarrier_init(&ss.empty_k[s], (Tr::kSeesaw ? 128 : Tr::kConsumerThreads) / 32);
    }
#pragma unroll
    for (int s = 0; s < Tr::kStagesV; ++s) {
      ptx::mbarrier_init(&ss.full_v[s], kFullArrivals);
      ptx::mbarrier_init(&ss.empty_v[s], Tr::kConsumerThreads / 32);
    }
    if (uses_pair_merge<Tr>(p)) ptx::mbarrier_init(&ss.pair_full, SharedStorage<Tr>::kPairSlots);  // the partner's pushers
    if constexpr (Tr::kSeesaw)
      for (int i = 0; i < 2; ++i) ptx::mbarrier_init(&ss.p_full[i], SharedStorage<Tr>::kPublishArrivals);
    ptx::fence_mbarrier_init();  // (release at cluster scope: the partner arrives on pair_full)
    // The descriptors are kernel parameters, never written by an earlier kernel: warm them before the wait.
    ptx::prefetch_tensormap(&tmap_k);
    ptx::prefetch_tensormap(&tmap_v);
  }
  if constexpr (FMHA_SM90_PDL) {
    // Programmatic dependent launch (capi.cu): this grid may start while the previous kernel on
    // the stream finishes; nothing global is read before that kernel's results are visible.
    ptx::griddep_wait();
    // The kernel behind this one (the split-KV combine, or the next call's decode) may be
    // scheduled now; it waits in griddepcontrol.wait for this grid's completion and memory.
    ptx::griddep_launch_dependents();
  }
  if (threadIdx.x == 0) probe_timeline(kTimelineGridDep);
  const bool pair_merge = uses_pair_merge<Tr>(p);
  if (pair_merge) ptx::cluster_sync();  // both CTAs' pair_full initialised before either pushes (and a CTA-wide barrier)
  else __syncthreads();
  const TileRange tr = tile_range<Tr>(p, b, row_block, split);

  const int warp = threadIdx.x / 32;
  const bool cluster_merge = uses_cluster_merge<Tr>(p);
  if (warp >= Tr::kProducerWarp) {
    // Producer
    if constexpr (Tr::kSetMaxNReg) ptx::setmaxnreg_dec<Tr::kProducerRegs>();
    if (warp == Tr::kProducerWarp && threadIdx.x % 32 == 0) producer_loop<Tr>(ss, &tmap_k, &tmap_v, tr, kvh, b, p.k_head_major, p.v_head_major);
    if (cluster_merge) {  // every thread of the cluster takes part in both cluster barriers (see ClusterMerge)
      ptx::cluster_sync();
      ptx::cluster_sync();
    }
    if (pair_merge) ptx::cluster_sync();  // the closing barrier (see below)
    return;
  }
  // Consumer
  if constexpr (Tr::kSetMaxNReg) ptx::setmaxnreg_inc<Tr::kConsumerRegs>();
  if constexpr (FMHA_SM90_PROBE_STREAM_ONLY) {
    const int lane = threadIdx.x % 32;
    for (int it = 0; it < tr.end - tr.begin; ++it) {
      const int stage = it % Tr::kStages;
      const uint32_t phase = static_cast<uint32_t>(it / Tr::kStages) & 1u;
      ptx::mbarrier_wait_parity(&ss.full_k[stage], phase);
      release_stage(&ss.empty_k[stage], lane);
      ptx::mbarrier_wait_parity(&ss.full_v[it % Tr::kStagesV], static_cast<uint32_t>(it / Tr::kStagesV) & 1u);
      release_stage(&ss.empty_v[it % Tr::kStagesV], lane);
    }
    if (cluster_merge) {
      ptx::cluster_sync();
      ptx::cluster_sync();
    }
    if (pair_merge) ptx::cluster_sync();
    return;
  }
  bool narrow = false;
  if constexpr (Tr::kNarrow) narrow = p.rows <= Tr::kNarrowRows;  // uniform over the grid (row_block is 0)
  if (narrow) {
    if constexpr (Tr::kNarrow) consumer_loop_narrow<Tr, kBf16>(ss, p, tr, b, kvh, split, threadIdx.x);
  } else if constexpr (Tr::kSeesaw) {
    consumer_loop_seesaw<Tr, kBf16>(ss, p, tr, b, kvh, row0, split, threadIdx.x);
  } else if constexpr (Tr::kOverlap) {
    consumer_loop_overlapped<Tr, kBf16>(ss, p, tr, b, kvh, row0, split, threadIdx.x);
  } else {
    consumer_loop<Tr, kBf16>(ss, p, tr, b, kvh, row0, split, threadIdx.x);
  }
  if (cluster_merge) {
    ptx::cluster_sync();  // (the second barrier; the first is in the epilogue) every push landed
    merge_cluster_splits<Tr, kBf16>(ss, p, b, kvh, row0, threadIdx.x);
  }
  // kMergePair: neither CTA exits before the other is done with the pair's shared memory.
  if (pair_merge) ptx::cluster_sync();
  if (threadIdx.x == 0) probe_timeline(kTimelineEnd);
}

}  // namespace sm90
}  // namespace fmha
