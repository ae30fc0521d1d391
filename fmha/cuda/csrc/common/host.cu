// fmha: host-side helpers (common/host.h).
#include "host.h"

#include <cudaTypedefs.h>  // PFN_cuTensorMapEncodeTiled

#include <algorithm>
#include <atomic>
#include <cstdarg>
#include <cstdio>
#include <mutex>

#include "params.h"

namespace fmha {
namespace {

thread_local char g_last_error[512] = "";

// cuTensorMapEncodeTiled from the driver, found at run time (no -lcuda).
PFN_cuTensorMapEncodeTiled_v12000 get_encode_fn() {
  static std::once_flag once;
  static PFN_cuTensorMapEncodeTiled_v12000 fn = nullptr;
  std::call_once(once, [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult qres = cudaDriverEntryPointSymbolNotFound;
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &qres) ==
            cudaSuccess &&
        qres == cudaDriverEntryPointSuccess)
      fn = reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(p);
    else
      (void)cudaGetLastError();  // do not leave a sticky-looking error behind
  });
  return fn;
}

// The tensor-map element type of fp16 (dtype 0) or bf16 (dtype 1).
CUtensorMapDataType tensor_map_dtype(int dtype) {
  return dtype == 1 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
}

}  // namespace

int fail(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(g_last_error, sizeof(g_last_error), fmt, ap);
  va_end(ap);
  return 1;
}

void clear_error() { g_last_error[0] = '\0'; }
const char* last_error() { return g_last_error; }

int check_cuda(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return 0;
  const int status = fail("%s: %s (%s)", what, cudaGetErrorString(e), cudaGetErrorName(e));
  (void)cudaGetLastError();  // reported here: the caller's next CUDA call (a torch kernel) must not see it again
  return status;
}

// The current device's SM count (cached per device; 0 when the query fails).
int sm_count() {
  static std::atomic<int> cached[kMaxDevices];
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess || device >= kMaxDevices) {
    (void)cudaGetLastError();
    return 0;
  }
  int n = cached[device].load(std::memory_order_relaxed);
  if (n > 0) return n;
  if (cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, device) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  cached[device].store(n, std::memory_order_relaxed);
  return n;
}

bool exclusive_sms(long long ctas, int num_splits) {
  if (num_splits < 2) return false;
  const int sms = sm_count();
  return sms > 0 && ctas <= sms;
}

int head_major_order(int64_t s_s, int64_t s_h, int Hkv) { return Hkv > 1 && s_h > s_s ? 0 : 1; }

void sanitize_kv_strides(int S, int Hkv, int D, int B, int64_t& s_b, int64_t& s_s, int64_t& s_h) {
  if (Hkv == 1) s_h = D;
  if (S == 1) s_s = static_cast<int64_t>(Hkv) * s_h;
  if (B == 1) s_b = std::max(static_cast<int64_t>(S) * s_s, static_cast<int64_t>(Hkv) * s_h);
}

int encode_kv_map(CUtensorMap* map, const void* base, int dtype, int B, int S, int Hkv, int D, int64_t s_b,
                  int64_t s_s, int64_t s_h, int box_rows, int head_major, const char* name, bool paged) {
  auto encode = get_encode_fn();
  if (encode == nullptr) return fail("cuTensorMapEncodeTiled is not available from the CUDA driver");
  const int64_t eb = 2;  // bytes per element (fp16 / bf16)
  const cuuint64_t d1 = head_major ? Hkv : S, d2 = head_major ? S : Hkv;
  const int64_t st1 = head_major ? s_h : s_s, st2 = head_major ? s_s : s_h;
  cuuint64_t dims[4] = {static_cast<cuuint64_t>(D), d1, d2, static_cast<cuuint64_t>(B)};
  cuuint64_t strides[3] = {static_cast<cuuint64_t>(st1 * eb), static_cast<cuuint64_t>(st2 * eb),
                           static_cast<cuuint64_t>(s_b * eb)};
  const char* s_name = paged ? "page_size" : "S";  // (token within a page, page)
  const char* b_name = paged ? "num_blocks" : "B";
  const char* stride_names[3] = {paged ? "token-in-page" : "S", "Hkv", paged ? "page" : "B"};
  const int64_t elem_strides_in[3] = {s_s, s_h, s_b};
  for (int i = 0; i < 3; ++i) {
    const int64_t st = elem_strides_in[i] * eb;
    if (st <= 0 || st % 16 != 0 || st >= (int64_t(1) << 40))
      return fail("%s: the %s stride is %lld bytes; TMA needs a positive multiple of 16 below 2^40", name,
                  stride_names[i], static_cast<long long>(st));
  }
  cuuint32_t box[4] = {64u, head_major ? 1u : static_cast<cuuint32_t>(box_rows),
                       head_major ? static_cast<cuuint32_t>(box_rows) : 1u, 1u};
  cuuint32_t elem_strides[4] = {1u, 1u, 1u, 1u};
  // L2 promotion of 128 B, one box row (256 B cost bandwidth).
  CUresult r = encode(map, tensor_map_dtype(dtype), 4, const_cast<void*>(base), dims, strides, box, elem_strides,
                      CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
                      CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS)
    return fail("%s: cuTensorMapEncodeTiled failed with CUresult %d (dims D=%d %s=%d Hkv=%d %s=%d, byte strides "
                "%llu %llu %llu)",
                name, static_cast<int>(r), D, s_name, S, Hkv, b_name, B, (unsigned long long)strides[0],
                (unsigned long long)strides[1], (unsigned long long)strides[2]);
  return 0;
}

bool encode_q_map(CUtensorMap* map, const void* q, int dtype, int B, int T, int Hq, int D, int G, int64_t q_b,
                  int64_t q_t, int64_t q_h, int rows) {
  auto encode = get_encode_fn();
  if (encode == nullptr || !q_box_fits(G, rows)) return false;
  sanitize_kv_strides(T, Hq, D, B, q_b, q_t, q_h);  // (token, head) in the place of (S, Hkv)
  const int64_t eb = 2;  // bytes per element (fp16 / bf16)
  for (int64_t st : {q_h, q_t, q_b})
    if (st <= 0 || (st * eb) % 16 != 0 || st * eb >= (int64_t(1) << 40)) return false;
  if (reinterpret_cast<uintptr_t>(q) % 16 != 0) return false;
  cuuint64_t dims[4] = {static_cast<cuuint64_t>(D), static_cast<cuuint64_t>(Hq), static_cast<cuuint64_t>(T),
                        static_cast<cuuint64_t>(B)};
  cuuint64_t strides[3] = {static_cast<cuuint64_t>(q_h * eb), static_cast<cuuint64_t>(q_t * eb),
                           static_cast<cuuint64_t>(q_b * eb)};
  const cuuint32_t heads = static_cast<cuuint32_t>(G % rows == 0 ? rows : G);
  cuuint32_t box[4] = {64u, heads, static_cast<cuuint32_t>(rows) / heads, 1u};
  cuuint32_t elem_strides[4] = {1u, 1u, 1u, 1u};
  return encode(map, tensor_map_dtype(dtype), 4, const_cast<void*>(q), dims, strides, box, elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
                CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
                CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

size_t workspace_bytes(int B, int T, int Hq, int D, int num_splits) {
  if (num_splits <= 1) return 0;
  // (num_splits x B x T x Hq x (D + 1) floats; SIZE_MAX where that does not fit, which no workspace satisfies)
  size_t n = sizeof(float);
  for (const int f : {num_splits, B, T, Hq, D + 1})
    if (f < 0 || __builtin_mul_overflow(n, static_cast<size_t>(f), &n)) return SIZE_MAX;
  return n;
}

}  // namespace fmha
