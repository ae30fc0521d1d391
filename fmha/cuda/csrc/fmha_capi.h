// fmha: the C API of the CUDA decode kernels (implemented in capi.cu).
//
// One library per architecture (fmha_arch() says which); the same entry points on every one.
// fmha_decode (and a probe build's fmha_probe_*) returns 0 on success; on failure a non-zero status
// and a thread-local message from fmha_last_error(). The queries return their answer, or -1 (0 for
// fmha_max_active_clusters and the workspace sizes) for arguments they cannot answer, and leave that
// message as it was. Nothing prints, exits, synchronises or allocates: launches go on the caller's
// stream and are safe under CUDA-graph capture. Tensors are raw device pointers with
// element strides; see fmha_decode for the layouts.
#pragma once

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif
// Exported from a library built with hidden visibility (fmha/cuda/loader.py): the C API only.
#pragma GCC visibility push(default)

// Configurations: a (ring, CTAs per SM, consumer loop) choice, named by what it is. Each head dim has
// some of them (fmha_config_tile_n() == 0: not that one):
//   WIDE           D = 64, 128, 256: a shallow K/V ring, several CTAs per SM where D <= 128
//                  (grids that fill the GPU)
//   DEEP           D = 64, 128, 256: one CTA per SM, a deeper ring (small grids, split-KV)
//   STREAM         D = 128: WIDE's ring with the narrow loop (grids of at most 16 packed rows
//                  that fill one wave, unsplit or split; paged, up to two CTAs per SM)
//   KV_HEAD_PAIRS  D = 64, unsplit, at most 8 packed rows a head, KV heads side by side in
//                  memory (in the cache or in each page): STREAM's D = 128 kernel reads KV heads 2i
//                  and 2i + 1 as one 128-wide head
//   SEESAW         D = 512: the two consumer warpgroups take turns over the tiles (more than 64 packed rows)
//   SPLIT_QK       D = 512: the two consumer warpgroups split Q K^T's head dim (one 64-row block)
//   LATENT_SEESAW, LATENT_SPLIT_QK, LATENT_NARROW
//                  D = 512 with V = K, and D = 576 with V = K's first 512 columns (DeepSeek's shared
//                  latent, v == k): SEESAW's and SPLIT_QK's loops over one ring, each tile read once;
//                  LATENT_NARROW: the narrow loop over that ring, at most 32 packed rows. sm_100a:
//                  LATENT_SEESAW and LATENT_SPLIT_QK are one kernel, the ring's stage serving both MMAs;
//                  LATENT_NARROW and LATENT_SEESAW64 are sm_90a's
//   LATENT_SEESAW64 LATENT_SEESAW over 64-key tiles: two ring stages that fill and free by halves
//   WIDE_GATHER    D = 64: WIDE with four gathering producer warps (paged launches that gather; sm_90a)
//   LATENT_SEESAW48 D = 512, 576: LATENT_SEESAW64's loop on three ring stages of 48-key tiles (sm_90a; at 576
//                  the rope columns in a ring of their own; paged launches read 16-row TMA boxes, slower than
//                  LATENT_SEESAW64's). What this header says of LATENT_SEESAW64 holds for it too
// A split grid of at most as many CTAs as SMs (one wave) is launched one CTA per SM whatever its
// configuration's shared memory.
enum FmhaConfig {
  FMHA_CONFIG_WIDE = 0,
  FMHA_CONFIG_DEEP = 1,
  FMHA_CONFIG_STREAM = 2,
  FMHA_CONFIG_KV_HEAD_PAIRS = 3,
  FMHA_CONFIG_SEESAW = 4,
  FMHA_CONFIG_SPLIT_QK = 5,
  FMHA_CONFIG_LATENT_SEESAW = 6,
  FMHA_CONFIG_LATENT_SPLIT_QK = 7,
  FMHA_CONFIG_LATENT_NARROW = 8,
  FMHA_CONFIG_LATENT_SEESAW64 = 9,
  FMHA_CONFIG_WIDE_GATHER = 10,
  FMHA_CONFIG_LATENT_SEESAW48 = 11,
};

const char* fmha_last_error(void);

// The architecture this library was built for, as compute capability x 10 (90: sm_90a).
int fmha_arch(void);

// KV tokens per tile and resident CTAs per SM of a configuration at head dim D (0: D has no such
// configuration), and the packed query rows (T x Hq/Hkv) up to which it runs the narrow loop (keys in
// the MMA's M dimension; 0: it has none).
int fmha_config_tile_n(int D, int config);
int fmha_config_ctas_per_sm(int D, int config);
int fmha_config_narrow_rows(int D, int config);
// 1 where a paged launch of page_size-token pages on this head dim and configuration, in a grid of `ctas`
// CTAs (splits included) on the current device, takes the gather path (cp.async by the producer warps), 0
// where TMA boxes inside each page serve it; -1 for a page size outside [1, 2^31 - 1] or a (D, config) without
// a kernel.
int fmha_paged_gather(int D, int config, long long page_size, long long ctas);

// How a split-KV launch of this head dim / dtype (0 = fp16, 1 = bf16) / configuration with num_splits
// splits over `clusters` groups (row blocks x KV heads x sequences) of `rows` packed query rows merges
// on the current device: 0 through the workspace and the combine kernel; inside thread-block clusters
// (no combine kernel, no workspace) 1 with every split pushing each row to the rank that merges it
// once all have finished (at most 16 rows; any number in LATENT_SEESAW64), 2 as pairs of CTAs that push as
// soon as each has finished (two splits). -1: D, dtype or configuration invalid, or a count out of range (num_splits
// in [1, 1024], clusters in [1, 2^31 - 1], rows in [1, 2^30]). A paged launch on the
// gather path (fmha_paged_gather) takes 0 where this answers 1; a launch with sinks takes 0 where this
// answers 2 (the pair merge has no sinks; the dealt rows and the combine kernel add them).
int fmha_cluster_merge(int D, int dtype, int config, int num_splits, long long clusters, int rows);
// How many clusters of cluster_size CTAs of that kernel the current device holds at once (asked of the
// bf16 kernel; the fp16 one has the same shared memory and threads), launched with the kernel's own
// shared memory. For probes: the plan asks fmha_cluster_merge.
int fmha_max_active_clusters(int D, int config, int cluster_size);
// 1 where a launch of this head dim / configuration in num_splits splits, of `row_blocks` blocks of 64
// packed rows per (KV head, sequence) and `ctas` CTAs in all (splits included), runs row blocks 2i and 2i + 1
// as a thread-block cluster of two (unsplit LATENT_SEESAW64 grids of an even number of row blocks, so that
// both readers of a sequence's latent start together), 0 where it does not; -1: D or configuration invalid,
// or a count below 1. `ctas` decides the shared memory the launch asks for, and with it the cluster occupancy.
int fmha_row_block_pairs(int D, int config, int num_splits, long long row_blocks, long long ctas);
// 1 where a launch of this head dim, dtype and configuration leaves the partials a combine kernel merges (its splits'
// where fmha_cluster_merge() == 0, or a balanced launch's pieces) in the workspace as fp16, each row scaled by a
// power of two; 0 where it leaves fp32. -1: an argument it has no kernel for.
int fmha_half_partials(int D, int dtype, int config);

// Bytes of workspace (partial outputs, fp32 or fp16 with scales, and LSEs) that num_splits > 1 needs where the splits
// merge through the combine kernel (fmha_cluster_merge() == 0); a launch merged in clusters needs none.
size_t fmha_workspace_bytes(int B, int T, int Hq, int D, int num_splits);  // D: V's head dim; 0 for a count below 1
// 1 where a launch with balanced = 1 (below) and cache_seqlens, of B sequences of capacity S (paged: max_blocks_per_seq
// x page_size tokens; page_size 0: a contiguous cache) in `ctas` CTAs (splits included) on the current device,
// deals its tiles by cache length; 0 where it runs the static schedule instead (pages its producer warps gather,
// a Q box that does not fit Hq / Hkv heads, more than 4096 sequences, tile positions past 2^31); -1 for an invalid
// argument or a configuration other than LATENT_NARROW and LATENT_SEESAW64, for which fmha_decode refuses
// balanced = 1 (every configuration on sm_100a). The answer assumes a Q whose strides are nonzero where its
// dimension has more than one element (a Q broadcast over a dimension is read without TMA, and its launch runs
// static). It does not see T: a launch of more than 65535 packed rows (T x Hq / Hkv) also runs static.
int fmha_balanced_deals(int D, int config, int B, int Hq, int Hkv, int S, long long page_size, long long ctas);
// Bytes of workspace a balanced launch needs (FmhaDecodeArgs::balanced; Dv: V's head dim), 0 for a count below 1.
size_t fmha_balanced_workspace_bytes(int B, int T, int Hq, int Hkv, int Dv, int num_splits);

// Decode attention, all arguments in one struct of 8-byte fields (one FFI argument).
// q [B, T, Hq, D], k/v [B, S, Hkv, D], out [B, T, Hq, head_dim_v] (dtype 0 = fp16, 1 = bf16; strides in
// elements, last stride 1; q and out 16-byte aligned with strides of 16 bytes below 2^40 elements, out's rows
// distinct), lse [B, Hq, T] float32 contiguous, cache_seqlens int32 [B] or 0 (= S for every sequence; clamped to
// [0, S] on the device; both 4-byte aligned), stream a cudaStream_t; workspace (16-byte aligned,
// fmha_workspace_bytes) where num_splits > 1 merges through the combine kernel, else 0 is accepted (and a
// workspace given is not read). B and Hkv at most 65535 (grid dimensions).
// Paged caches: block_table int32 [B, max_blocks_per_seq] (rows block_table_stride elements apart) of
// page ids; k and v are then pools [num_blocks, page_size, Hkv, D] (any 16-byte strides: k_b/v_b between
// pages, k_s/v_s between a page's tokens, k_h/v_h between heads), logical token j of sequence b at page
// block_table[b][j / page_size], row j % page_size, and S is ignored: sequences hold at most
// max_blocks_per_seq * page_size tokens (cache_seqlens is clamped to that on the device). Page ids are
// device data: the kernels clamp each into [0, num_blocks), so a wrong id reads a wrong page, never
// memory outside the pool. Any page size from 1 up; TMA boxes or a gather serve them
// (fmha_paged_gather).
// Head dims: D (the keys', q's) 64, 128, 256, 512 or 576; head_dim_v (0: D) is V's and out's, D or, at
// D = 576, 512. A shared latent: v == k with k's strides (V is then the first head_dim_v columns of each
// key row, so v[..., :512] of a 576-wide cache is passed as k itself); the LATENT configurations read it
// once and require it, D = 576 requires a LATENT configuration.
// sinks: 0, or float32 [Hq] on the device: one logit per query head that joins every row's softmax
// denominator (lse is then the log of the whole denominator; a row that sees no key gets out = 0 and
// lse = sinks[hq]); finite or -inf, never checked (device data).
// balanced (config LATENT_NARROW or LATENT_SEESAW64): the cache's tiles are dealt over the grid's num_splits x B x Hkv
// CTAs (LATENT_SEESAW64: that many for each 64-row block of the T x Hq / Hkv packed rows, all dealt alike; at most as
// many as the SMs hold at once) in equal shares by cache_seqlens, each (sequence, KV head) weighing one tile more
// than it holds (LATENT_SEESAW64: four) and an empty one nothing (CTAs write those in turn), so that a batch of mixed
// lengths is not as slow as its longest sequence. A (sequence, KV head)
// shared by several CTAs leaves pieces in the workspace (fp32, or fp16 with a scale a row for a bf16 output of
// LATENT_SEESAW64; fmha_balanced_workspace_bytes, nothing to initialise)
// that a combine kernel, launched after it on the stream, merges in a fixed order: the result is the same on every
// run on a given device (the shares depend on its SM count). Where the launch cannot deal the tiles (no
// cache_seqlens, where fmha_balanced_deals answers 0, or past 65535 packed rows) it runs as with balanced = 0, its
// workspace still required.
typedef struct FmhaDecodeArgs {
  uint64_t q, k, v, out, lse, cache_seqlens;  // device pointers (cache_seqlens may be 0)
  int64_t B, T, Hq, Hkv, S, D, dtype;
  int64_t q_b, q_t, q_h, k_b, k_s, k_h, v_b, v_s, v_h, o_b, o_t, o_h;
  double softmax_scale;
  int64_t causal, num_splits, config;  // config: an FmhaConfig
  uint64_t workspace, workspace_bytes, stream;
  uint64_t block_table;       // int32 [B, max_blocks_per_seq] of page ids, or 0: contiguous caches
  int64_t block_table_stride;  // elements between two sequences' rows of block_table
  int64_t page_size;           // tokens per page (0: contiguous caches)
  int64_t head_dim_v;          // V's head dim (0: D)
  int64_t num_blocks;          // pages in each pool (paged caches)
  int64_t max_blocks_per_seq;  // columns of block_table (paged caches)
  uint64_t sinks;              // float32 [Hq] of per-head sink logits, or 0: none
  int64_t balanced;            // 1: the balanced schedule (above), 0: num_splits CTAs a (sequence, KV head)
} FmhaDecodeArgs;

int fmha_decode(const FmhaDecodeArgs* args);

// Only in a library built with the timing probe (python -m fmha.cuda.build --probe ...;
// csrc/common/probe.cuh): the stamps' layout [ctas][tiles][events] of uint64, and a synchronous copy of
// them to host memory (host_dst may be NULL) followed, if clear, by zeroing them. The product library
// does not export these.
int fmha_probe_layout(int* ctas, int* tiles, int* events);
int fmha_probe_read(void* host_dst, size_t bytes, int clear);

#pragma GCC visibility pop

#ifdef __cplusplus
}  // extern "C"
#endif
