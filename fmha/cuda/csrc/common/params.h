// fmha: arguments of the decode kernels, shared by the host API and every
// architecture's kernel.
#pragma once

#include <cstdint>

// Feature flag of every architecture's kernels, compiled by a test (tests/test_cuda_build.py).
#ifndef FMHA_DISABLE_PDL  // 1: no programmatic dependent launch (no griddepcontrol, plain launches)
#define FMHA_DISABLE_PDL 0
#endif

namespace fmha {

constexpr bool kPdl = !FMHA_DISABLE_PDL;
constexpr float kLn2 = 0.693147180559945309f;
constexpr float kLog2e = 1.44269504088896341f;  // the kernels' scores are scaled by softmax_scale kLog2e (exp2)

// V's head dim: 512 for DeepSeek's 576-wide keys (V is their first 512 columns), else the keys'.
constexpr int head_dim_v(int D) { return D == 576 ? 512 : D; }

// Everything a decode CTA needs besides the K/V tensor maps.
// Strides are in elements. Packed query row r of a KV head kvh is
// (t = r / G, hq = kvh * G + r % G); rows = T * G.
struct DecodeParams {
  const void* q;           // [B, T, Hq, D], last stride 1
  void* out;               // [B, T, Hq, head_dim_v], last stride 1 (by the decode kernel unless the combine kernel merges)
  float* lse;              // [B, Hq, T] contiguous, natural log (written as out)
  const int* seqlens;      // [B] valid keys per sequence, nullptr = S; clamped to [0, S]
  float* o_partial;        // split-KV workspace (see workspace layout below; the balanced schedule's pieces), else nullptr
  float* lse_partial;
  int64_t q_b, q_t, q_h;
  int64_t o_b, o_t, o_h;
  int B, T, Hq, Hkv, S, G;
  int rows;                // T * G packed query rows per KV head
  int num_splits;
  float qk_scale;          // softmax_scale * log2(e): scores live in the log2 domain
  int causal;              // bottom-right aligned: query t sees keys j <= L - T + t
  // Dimension order of the K / V tensor maps: 0 = (D, S, Hkv, B), 1 = (D, Hkv, S, B).
  // The host picks the order whose byte strides increase (head_major_order, common/host.h).
  int k_head_major;
  int v_head_major;
  // Split-KV only (a ClusterMergeMode). Not kMergeByKernel: the num_splits CTAs of one (row block, KV
  // head, sequence) run as one thread-block cluster and merge their partials through distributed
  // shared memory (no combine kernel; the workspace, still passed, goes unused); kMergeByKernel:
  // partials go to the workspace and combine_splits_kernel merges them. Set by the host (sm90/launch.cuh),
  // which also launches the clusters.
  int cluster_merge;
  // 1: KV-head pairs (FMHA_CONFIG_KV_HEAD_PAIRS; the D = 128 narrow loop only). A D = 64 cache whose KV heads lie
  // side by side is read as a D = 128 cache of Hkv / 2 heads: CTA kvh serves heads 2 kvh and 2 kvh + 1, and
  // streams 256 contiguous bytes of each token's row instead of 128. Hkv is then the number of pairs, rows
  // 2 T G (the first T G rows head 2 kvh's, the rest head 2 kvh + 1's) and G the original group size.
  int head_pairs;
  // Paged caches (block_table != nullptr): K and V are pools of num_blocks pages of page_size tokens, and
  // logical token j of sequence b lives in page block_table[b * block_table_stride + j / page_size], row
  // j % page_size. S is then max_blocks_per_seq * page_size (sequence lengths are clamped to it) and the
  // tensor maps run over the pools (dims D, page_size, Hkv, num_blocks). Page ids are clamped into
  // [0, num_blocks): a wrong id reads a wrong page of the pool, never outside it.
  //   page_box_rows > 0: TMA path, tokens per box (a divisor of page_size and of the tile's TMA rows);
  //   page_box_rows = 0: gather path (the architecture's paged_gathers), the producer warps copy 16-byte
  //   chunks from k / v with the element strides below.
  const int* block_table;
  int64_t block_table_stride;
  int page_size;
  int max_blocks_per_seq;
  int num_blocks;
  int page_box_rows;
  const void* k;  // gather path only: the pools and their strides (page, token, head)
  const void* v;
  int64_t k_blk, k_tok, k_h;
  int64_t v_blk, v_tok, v_h;
  int head_dim_v;  // V's and the output's head dim (D, or 512 where D = 576)
  // Per-query-head sink logits (natural log) that join every row's softmax denominator, or nullptr. Joined
  // in the epilogue of unsplit launches (add_sink, softmax.cuh) and by the merge of split ones: the combine
  // kernel or the dealt-rows cluster merge (the host never sends a launch with sinks to the pair merge).
  const float* sinks;
  // 1: the producer of a shared-latent 64-key seesaw or narrow loop (DecodeTraits::kQByTma) loads Q by TMA
  // (load_q_boxes_tma) through the tensor map in the kernel's V-map slot (its V is the K stage's), set by the host
  // where the loop's rows (64, or the narrow loop's kNarrowRows) are one box (encode_q_map); 0: the consumers load Q.
  int q_tma;
  // 1: the balanced schedule (the shared latent's narrow loop or 64-key seesaw, split or not;
  // sm90/schedule_balanced.cuh): the cache's tiles are dealt over the CTAs in equal contiguous shares by sequence
  // length; a (sequence, KV head) shared by several CTAs leaves pieces in the workspace (balanced workspace
  // layout below; fp16 where partials_f16) that a combine kernel merges. Set by the host.
  int balanced;
  int* balanced_desc;  // [B * Hkv][4]: pieces, first CTA, whether the unit starts inside that CTA's share, 0
  // 1: the balanced pieces' rows are in fragment order by 8-row groups (balanced_piece_elem), set by the host for
  // the 64-key seesaw where rows % 8 == 0; 0: row-major.
  int pieces_by_fragment;
  // 1: the split partials (or the balanced schedule's pieces) are fp16 with a power-of-two scale (half-precision
  // workspace layouts below), set by the host for the bf16 launches of the shared latent's 64-key seesaw that the
  // combine kernel merges; 0: fp32.
  // (Last, so that no other field moves.)
  int partials_f16;
};

enum ClusterMergeMode : int {
  kMergeByKernel = 0,     // combine_splits_kernel
  kMergeDealtRows = 1,    // every split pushes each row to the rank that merges it, once all have finished (<= 16 rows; any in the 64-key seesaw)
  kMergePair = 2,         // two splits: each pushes the rows the other merges as soon as it has finished (64-row loop)
};

// Split-KV workspace, all fp32, written by the attention kernel and read by
// the combine kernel:
//   o_partial   [num_splits][B][T][Hq][head_dim_v]  o of one split, already divided by its own l
//   lse_partial [num_splits][B][Hq][T]     natural-log LSE of one split (-inf: no visible key)
inline int64_t workspace_o_elems(int B, int T, int Hq, int D, int num_splits) {
  return static_cast<int64_t>(num_splits) * B * T * Hq * D;
}
inline int64_t workspace_lse_elems(int B, int T, int Hq, int num_splits) {
  return static_cast<int64_t>(num_splits) * B * Hq * T;
}

// The same workspace with fp16 partials (DecodeParams::partials_f16, head_dim_v = 512), in the fp32 layout's bytes:
// o_partial holds [num_splits][B][T][Hq][512] fp16, each row's columns in half_partial_col's order, then from
// float offset half_partial_scales_offset the scales [num_splits][B][T][Hq][2] fp32, one for each warpgroup's 256
// columns (o = the fp16 value x its scale); lse_partial as above.
inline __host__ __device__ int64_t half_partial_scales_offset(int64_t total_rows, int num_splits) {
  return static_cast<int64_t>(num_splits) * total_rows * 256;  // (fp32 elements: 512 fp16 a row)
}
// The balanced schedule's pieces as fp16 (DecodeParams::partials_f16 with balanced): the values of slot row r at
// r x 512 fp16 from o_partial (as above), the scales [slots][rows][2] from this float offset, the second half of the
// pieces' fp32 region (balanced_desc_offset_bytes; 2 C rows-of-slots hold at most 2 num_splits B T Hq rows).
inline __host__ __device__ int64_t half_pieces_scales_offset(int64_t total_rows, int num_splits) {
  return static_cast<int64_t>(num_splits) * total_rows * 512;
}
// Columns of the fp16 values at row positions pos .. pos + 3 (pos % 4 == 0): c, c + 1, c + 8, c + 9, so that one
// 8-byte store of a fragment's two 8-column blocks writes each 16-column block's quad lane q at positions 4 q.
__host__ __device__ __forceinline__ int half_partial_col(int pos) {
  return (pos & ~15) + ((pos & 15) >> 1);
}

// The balanced schedule's workspace (fp32 pieces; the fp16 ones: half_pieces_scales_offset): two slots of pieces a CTA
// (C <= num_splits * B * Hkv CTAs), o_partial [2 C][rows][D_v] (each 8-row group in balanced_piece_elem's order where
// pieces_by_fragment) and lse_partial [2 C][rows] (the sizes of 2 num_splits splits' workspace), then from the next
// 16-byte boundary the units' descriptors, int32 [B * Hkv][4]. Slot of piece k of a unit whose pieces start at CTA
// first_cta (first_mid: the unit starts inside that CTA's share): 2c for the visit that starts CTA c's share, 2c + 1
// for one that starts inside it. The descriptors come from the running sums of the clamped lengths and the host never
// launches more than C CTAs (launch.cuh), so every slot a descriptor names lies below 2 C.
inline int64_t balanced_desc_offset_bytes(int B, int T, int Hq, int Dv, int num_splits) {
  const int64_t slots = 2 * static_cast<int64_t>(num_splits);
  const int64_t bytes = 4 * (workspace_o_elems(B, T, Hq, Dv, 1) + workspace_lse_elems(B, T, Hq, 1)) * slots;
  return (bytes + 15) / 16 * 16;
}
__host__ __device__ __forceinline__ int balanced_slot(int first_cta, int first_mid, int k) {
  return 2 * (first_cta + k) + (k == 0 ? first_mid : 0);
}
// Element (row n, column col) of the pieces in the slot whose first row is slot_row0: row-major [rows][D_v], or
// (by_fragment) each 8-row group's 8 x D_v values in the order the 64-key seesaw's fragments hold them, 8-column
// block by block, so that a warp's 32 float2 of one block are 256 contiguous bytes (lane 4 (n % 8) + (col % 8) / 2).
// Four columns 4q .. 4q + 3 of a row stay 16 contiguous bytes.
__host__ __device__ __forceinline__ int64_t balanced_piece_elem(bool by_fragment, int64_t slot_row0, int64_t n,
                                                                int col, int Dv) {
  if (!by_fragment) return (slot_row0 + n) * Dv + col;
  const int g = static_cast<int>(n % 8);
  return (slot_row0 + n - g) * Dv + 64 * (col / 8) + 8 * g + col % 8;
}

// Tokens per TMA box of a paged launch that the gather does not serve (each architecture's paged_gathers
// sends at least the pages of fewer than 8 rows, a box's 1024-byte swizzle group, to the gather): the largest
// power of two dividing the page size and the configuration's TMA rows.
constexpr int paged_box_rows(int page_size, int tma_rows) {
  const int low = page_size & -page_size, tma_low = tma_rows & -tma_rows;
  return low < tma_low ? low : tma_low;
}

// Whether the producer warps gather the tiles with cp.async: paged caches whose pages take no TMA boxes
// (the launch sets page_box_rows, see paged_box_rows). Read by the host launch and by every role of the kernel.
__host__ __device__ __forceinline__ bool kv_gather(const DecodeParams& p) {
  return p.block_table != nullptr && p.page_box_rows == 0;
}

}  // namespace fmha
