// fmha: the C API of the CUDA decode kernels (implemented in capi.cu).
//
// Every function returns 0 on success; on failure a non-zero status and a
// thread-local message from fmha_last_error(). Nothing prints, exits,
// synchronises or allocates: launches go on the caller's stream and are safe
// under CUDA-graph capture. Tensors are raw device pointers with element
// strides; see fmha_sm90_decode for the layouts.
#pragma once

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

const char* fmha_last_error(void);

// KV tokens per tile and resident CTAs per SM of the sm_90a kernel for head dim D and a variant
// (0: unsupported), for the host's choice of variant and split count.
// Variants: 0 = wide (several CTAs per SM where D <= 128, shallow K/V ring: grids that fill the GPU),
//           1 = deep (one CTA per SM, deeper ring: small grids and split-KV),
//           2 = stream (D = 128 only: wide's ring with the narrow loop, for grids of at most 16 packed
//               rows that fill one wave, unsplit or split). D = 512 has one configuration.
//           3 = KV-head pairs (D = 64 only, unsplit, at most 8 packed rows a head, KV heads side by side in
//               memory): the stream instantiation of D = 128 reads KV heads 2i and 2i + 1 as one 128-wide
//               head (fmha::DecodeParams::head_pairs); its tile_n / ctas_per_sm / narrow_rows are stream's.
// A split grid of at most as many CTAs as SMs (one wave) is launched one CTA per SM, whatever its variant's
// shared memory.
int fmha_sm90_tile_n(int D, int variant);
int fmha_sm90_ctas_per_sm(int D, int variant);
// Problems of at most this many packed query rows (T x Hq/Hkv) run that instantiation's narrow loop
// (keys in the MMA's M dimension); 0: it has none.
int fmha_sm90_narrow_rows(int D, int variant);

// How a split-KV launch of this head dim / dtype (0 = fp16, 1 = bf16) / variant with num_splits splits
// over `clusters` groups (row blocks x KV heads x sequences) of `rows` packed query rows (T x Hq/Hkv)
// merges on the current device: 0 through the workspace and the combine kernel; inside thread-block
// clusters (no combine kernel, no workspace) 1 with every split pushing each row to the rank that
// merges it once all have finished (at most 16 rows), 2 as pairs of CTAs that push as soon as each has
// finished (two splits). -1: D, dtype or variant invalid.
int fmha_sm90_cluster_merge(int D, int dtype, int variant, int num_splits, long long clusters, int rows);
// How many clusters of cluster_size CTAs of that kernel the current device holds at once (asked of the bf16
// instantiation; the fp16 one has the same shared memory and threads), launched with the kernel's own
// shared memory (a split grid of at most as many CTAs as SMs asks for more, so that its CTAs get an SM
// each). For probes: the plan asks fmha_sm90_cluster_merge.
int fmha_sm90_max_active_clusters(int D, int variant, int cluster_size);

// Bytes of workspace (fp32 partial outputs and LSEs) that num_splits > 1 needs where the splits merge
// through the combine kernel (fmha_sm90_cluster_merge() == 0); a launch merged in clusters needs none.
size_t fmha_sm90_workspace_bytes(int B, int T, int Hq, int D, int num_splits);

// Timing probe of a library built with -DFMHA_SM90_PROBE_TIMESTAMPS=1 (sm90/decode_kernel.cuh): the
// stamps' layout [ctas][tiles][events] of uint64, and a synchronous copy of them to host memory
// (host_dst may be NULL) followed, if clear, by zeroing them. Other builds: an error.
int fmha_sm90_probe_layout(int* ctas, int* tiles, int* events);
int fmha_sm90_probe_read(void* host_dst, size_t bytes, int clear);

// Decode attention. q [B, T, Hq, D], k/v [B, S, Hkv, D], out [B, T, Hq, D] (dtype 0 = fp16,
// 1 = bf16; strides in elements, last stride 1), lse [B, Hq, T] float32 contiguous,
// cache_seqlens int32 [B] or NULL (= S for every sequence), stream a cudaStream_t; workspace (16-byte
// aligned, fmha_sm90_workspace_bytes) where num_splits > 1 merges through the combine kernel, else NULL
// is accepted.
int fmha_sm90_decode(const void* q, const void* k, const void* v, void* out, float* lse, const int* cache_seqlens,
                     int B, int T, int Hq, int Hkv, int S, int D, int dtype, int64_t q_b, int64_t q_t, int64_t q_h,
                     int64_t k_b, int64_t k_s, int64_t k_h, int64_t v_b, int64_t v_s, int64_t v_h, int64_t o_b,
                     int64_t o_t, int64_t o_h, float softmax_scale, int causal, int num_splits, int variant,
                     void* workspace, size_t workspace_size, void* stream);

// The same call with its arguments in one struct of 8-byte fields: a binding packs it into
// one buffer (one FFI argument instead of 32, a few microseconds less per call from Python).
typedef struct FmhaDecodeArgs {
  uint64_t q, k, v, out, lse, cache_seqlens;        // device pointers (cache_seqlens may be 0)
  int64_t B, T, Hq, Hkv, S, D, dtype;
  int64_t q_b, q_t, q_h, k_b, k_s, k_h, v_b, v_s, v_h, o_b, o_t, o_h;
  double softmax_scale;
  int64_t causal, num_splits, variant;
  uint64_t workspace, workspace_bytes, stream;
} FmhaDecodeArgs;

int fmha_sm90_decode_packed(const FmhaDecodeArgs* args);

#ifdef __cplusplus
}  // extern "C"
#endif
