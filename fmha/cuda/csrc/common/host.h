// fmha: host-side helpers shared by the C API and every architecture's launcher: the error message,
// CUDA status checks, the SM count, the K/V tensor maps and the split-KV workspace layout. Defined in
// common/host.cu (one translation unit).
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace fmha {

// Sets the thread's last error (fmha_last_error) and returns 1.
int fail(const char* fmt, ...);
// 0 on success, else fail() naming `what`.
int check_cuda(cudaError_t e, const char* what);
// Clears the thread's last error message (at the start of every C API call).
void clear_error();
const char* last_error();

// Devices whose per-device answers are cached (SM counts, configured kernels, cluster occupancy).
constexpr int kMaxDevices = 64;

// The current device's SM count (cached per device; 0 when the query fails).
int sm_count();

// Whether a split grid of `ctas` CTAs in all is launched one CTA per SM: it fits one wave. Two of its
// CTAs on one SM share that SM's bandwidth while another SM idles; the block scheduler does that to a
// kernel whose shared memory leaves room for two when it places clusters, or while the previous kernel
// (PDL) still holds SMs. Unsplit grids keep the kernel's own shared memory (packed, they measured
// slightly faster, and the next call's CTAs may then wait resident beside the running ones).
bool exclusive_sms(long long ctas, int num_splits);

// Dimension order of a K/V tensor map (DecodeParams::k_head_major): the one whose byte strides increase.
int head_major_order(int64_t s_s, int64_t s_h, int Hkv);

// The stride of a size-1 dimension is never used to address anything, but torch may report any value
// for it; replace it by a legal, ordered one.
void sanitize_kv_strides(int S, int Hkv, int D, int B, int64_t& s_b, int64_t& s_s, int64_t& s_h);

// A 4-D tiled TMA map over one whole cache [B, S, Hkv, D], innermost first:
//   head_major = 0: dims (D, S, Hkv, B), box (64, box_rows, 1, 1)
//   head_major = 1: dims (D, Hkv, S, B), box (64, 1, box_rows, 1)
// 128B swizzle, OOB -> zeros, 128 B L2 promotion (one box row; 256 B cost bandwidth). The order is
// chosen so that byte strides increase with the dimension (the usual [B, S, Hkv, D] cache is
// head_major = 1, a [B, Hkv, S, D] cache viewed as [B, S, Hkv, D] is head_major = 0). dtype: 0 fp16,
// 1 bf16. `name` names the tensor in errors; `paged`: B and S are a page pool's num_blocks and
// page_size (errors name them so).
int encode_kv_map(CUtensorMap* map, const void* base, int dtype, int B, int S, int Hkv, int D, int64_t s_b,
                  int64_t s_s, int64_t s_h, int box_rows, int head_major, const char* name, bool paged = false);

// Whether a Q box of `rows` packed rows is whole heads of one token or whole tokens' heads (encode_q_map's shape
// condition; its strides and base are the caller's to check).
inline bool q_box_fits(int G, int rows) {
  return G > 0 && rows > 0 && rows <= 256 && (G % rows == 0 || rows % G == 0);
}

// A 4-D tiled TMA map over Q [B, T, Hq, D] whose box is `rows` packed rows (a row block's, 64, or the narrow loop's
// kNarrowRows) of 64 columns (DecodeParams::q_tma, load_q_boxes_tma): dims (D, Hq, T, B), box (64, rows, 1, 1) where
// G % rows == 0, else (64, G, rows / G, 1). 128B swizzle, OOB -> zeros. False, with no error set, where Q cannot be
// read so (rows % G != 0 and G % rows != 0, a zero stride (Q broadcast over a dimension), a stride or the base not
// a multiple of 16 bytes, no driver entry point, the encode failing): the consumers then load it.
bool encode_q_map(CUtensorMap* map, const void* q, int dtype, int B, int T, int Hq, int D, int G, int64_t q_b,
                  int64_t q_t, int64_t q_h, int rows);

// Bytes of split-KV workspace (params.h) for num_splits > 1 merged by the combine kernel; 0 unsplit.
size_t workspace_bytes(int B, int T, int Hq, int D, int num_splits);

}  // namespace fmha
