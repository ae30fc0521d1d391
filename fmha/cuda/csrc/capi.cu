// fmha: extern "C" entry points of the CUDA decode kernels (no ATen, no
// pybind11). Every function reports failure by a non-zero return value and a
// thread-local message readable through fmha_last_error(); nothing prints,
// nothing exits, nothing synchronises, nothing allocates: the launches are
// safe under CUDA-graph capture on the caller's stream. The first launch of a
// kernel on a device also sets its function attributes and, for split-KV, asks
// the driver how many clusters fit (cached; see max_active_clusters).
#include <cuda.h>
#include <cudaTypedefs.h>  // PFN_cuTensorMapEncodeTiled
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <type_traits>

#include "fmha_capi.h"
#include "common/combine.cuh"
#include "common/params.h"
#include "sm90/decode_kernel.cuh"

namespace {

thread_local char g_last_error[512] = "";

int fail(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(g_last_error, sizeof(g_last_error), fmt, ap);
  va_end(ap);
  return 1;
}

int check_cuda(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return 0;
  return fail("%s: %s (%s)", what, cudaGetErrorString(e), cudaGetErrorName(e));
}

// L2 promotion of the K/V tensor maps (FMHA_SM90_L2_PROMOTION = 0, 64, 128 or 256 bytes).
// 128 B matches one box row; 256 B cost 9-11% of bandwidth on long decode on an H200
// (perf/RESULTS.md, "CUDA kernel tuning").
#ifndef FMHA_SM90_L2_PROMOTION
#define FMHA_SM90_L2_PROMOTION 128
#endif
constexpr CUtensorMapL2promotion kKvL2Promotion =
    FMHA_SM90_L2_PROMOTION == 0     ? CU_TENSOR_MAP_L2_PROMOTION_NONE
    : FMHA_SM90_L2_PROMOTION == 64  ? CU_TENSOR_MAP_L2_PROMOTION_L2_64B
    : FMHA_SM90_L2_PROMOTION == 128 ? CU_TENSOR_MAP_L2_PROMOTION_L2_128B
                                    : CU_TENSOR_MAP_L2_PROMOTION_L2_256B;

#ifndef FMHA_SM90_CLUSTER_MERGE  // 1: split-KV launches merge their partials inside thread-block clusters when they can
// (decode_kernel.cuh, merge_cluster_splits); 0: always through the workspace and combine_splits_kernel
#define FMHA_SM90_CLUSTER_MERGE 1
#endif
#ifndef FMHA_SM90_ONE_WAVE_EXCLUSIVE  // 1: a split-KV grid of at most as many CTAs as SMs is launched with enough
// dynamic shared memory that no two of its CTAs share an SM (see exclusive_sms)
#define FMHA_SM90_ONE_WAVE_EXCLUSIVE 1
#endif
#ifndef FMHA_SM90_CLUSTER_MERGE_MAX_ROWS  // packed query rows (T x Hq/Hkv) up to which the cluster merge is used
#define FMHA_SM90_CLUSTER_MERGE_MAX_ROWS 16
#endif
#ifndef FMHA_SM90_PROBE_NO_COMBINE  // timing probe only (wrong results by design): split-KV partials are not merged
#define FMHA_SM90_PROBE_NO_COMBINE 0
#endif

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

// A 4-D tiled map over one whole cache [B, S, Hkv, D], innermost first:
//   head_major = 0: dims (D, S, Hkv, B), box (64, box_rows, 1, 1)
//   head_major = 1: dims (D, Hkv, S, B), box (64, 1, box_rows, 1)
// 128B swizzle, OOB -> zeros. The order is chosen so that byte strides
// increase with the dimension (the usual [B, S, Hkv, D] cache is head_major = 1,
// a [B, Hkv, S, D] cache viewed as [B, S, Hkv, D] is head_major = 0).
int head_major_order(int64_t s_s, int64_t s_h, int Hkv) { return Hkv > 1 && s_h > s_s ? 0 : 1; }

// The stride of a size-1 dimension is never used to address anything, but
// torch may report any value for it; replace it by a legal, ordered one.
void sanitize_kv_strides(int S, int Hkv, int D, int B, int64_t& s_b, int64_t& s_s, int64_t& s_h) {
  if (Hkv == 1) s_h = D;
  if (S == 1) s_s = static_cast<int64_t>(Hkv) * s_h;
  if (B == 1) s_b = std::max(static_cast<int64_t>(S) * s_s, static_cast<int64_t>(Hkv) * s_h);
}

int encode_kv_map(CUtensorMap* map, const void* base, int dtype, int B, int S, int Hkv, int D, int64_t s_b,
                  int64_t s_s, int64_t s_h, int box_rows, int head_major, const char* name) {
  auto encode = get_encode_fn();
  if (encode == nullptr) return fail("cuTensorMapEncodeTiled is not available from the CUDA driver");
  const int64_t eb = 2;  // bytes per element (fp16 / bf16)
  const cuuint64_t d1 = head_major ? Hkv : S, d2 = head_major ? S : Hkv;
  const int64_t st1 = head_major ? s_h : s_s, st2 = head_major ? s_s : s_h;
  cuuint64_t dims[4] = {static_cast<cuuint64_t>(D), d1, d2, static_cast<cuuint64_t>(B)};
  cuuint64_t strides[3] = {static_cast<cuuint64_t>(st1 * eb), static_cast<cuuint64_t>(st2 * eb),
                           static_cast<cuuint64_t>(s_b * eb)};
  const char* stride_names[3] = {"S", "Hkv", "B"};
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
  const CUtensorMapDataType dt = dtype == 1 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
  CUresult r = encode(map, dt, 4, const_cast<void*>(base), dims, strides, box, elem_strides,
                      CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, kKvL2Promotion,
                      CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS)
    return fail("%s: cuTensorMapEncodeTiled failed with CUresult %d (dims D=%d S=%d Hkv=%d B=%d, byte strides "
                "%llu %llu %llu)",
                name, static_cast<int>(r), D, S, Hkv, B, (unsigned long long)strides[0],
                (unsigned long long)strides[1], (unsigned long long)strides[2]);
  return 0;
}

// KV tokens per tile and resident CTAs per SM of one instantiation (the host's choice of variant
// and split count depends on them); {0, 0}: no such head dim or variant.
struct InstanceShape {
  int tile_n;
  int ctas_per_sm;
  int narrow_rows;  // packed rows served by the narrow loop (0: none)
};

template <class Tr>
InstanceShape instance_shape_of_traits() {
  return InstanceShape{Tr::kBlockN, Tr::kCtasPerSm, Tr::kNarrow ? Tr::kNarrowRows : 0};
}

template <int D>
InstanceShape instance_shape(int variant) {
  using fmha::sm90::DecodeTraits;
  if (variant == fmha::sm90::kStream) {
    if constexpr (D == 128) return instance_shape_of_traits<DecodeTraits<D, fmha::sm90::kStream>>();
    return {0, 0, 0};  // instantiated for D = 128 only
  }
  return variant == fmha::sm90::kDeep ? instance_shape_of_traits<DecodeTraits<D, fmha::sm90::kDeep>>()
                                      : instance_shape_of_traits<DecodeTraits<D, fmha::sm90::kWide>>();
}

// Variant 3 of the C API (fmha_capi.h): a D = 64 problem served as KV-head pairs by the D = 128 stream
// instantiation (DecodeParams::head_pairs), not an instantiation of its own.
constexpr int kHeadPairs = 3;

bool valid_variant(int variant) {
  return variant == fmha::sm90::kWide || variant == fmha::sm90::kDeep || variant == fmha::sm90::kStream ||
         variant == kHeadPairs;
}

InstanceShape instance_shape_of(int D, int variant) {
  if (!valid_variant(variant)) return {0, 0, 0};
  if (variant == kHeadPairs) return D == 64 ? instance_shape<128>(fmha::sm90::kStream) : InstanceShape{0, 0, 0};
  switch (D) {
    case 64: return instance_shape<64>(variant);
    case 128: return instance_shape<128>(variant);
    case 256: return instance_shape<256>(variant);
    case 512: return instance_shape<512>(variant);
    default: return {0, 0, 0};
  }
}

constexpr int kMaxDevices = 64;

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

// Whether a split grid of `ctas` CTAs in all runs one CTA per SM (FMHA_SM90_ONE_WAVE_EXCLUSIVE): it fits one
// wave. Two of its CTAs on one SM share that SM's bandwidth while another SM idles; the block scheduler does
// that to a kernel whose shared memory leaves room for two when it places clusters, or while the previous
// kernel (PDL) still holds SMs. H200 (perf/RESULTS.md, runs ek, el): the stream instantiation on B1 S65536 (128
// CTAs in 16 splits) ran 46 SMs with two CTAs and 36 with one, 74.4 us; one CTA per SM 65.4 us (D = 64: 40.6 ->
// 36.6). Unsplit grids keep the kernel's own shared memory: packed, they measured 0.3-0.6% faster (B16 S32768
// 462.7 vs 464.4 us one CTA per SM), and still ran one CTA on each SM, the next call's CTAs (PDL) waiting resident
// beside the running ones (run en), which one CTA per SM would forbid.
bool exclusive_sms(long long ctas, int num_splits) {
  if (!FMHA_SM90_ONE_WAVE_EXCLUSIVE || num_splits < 2) return false;
  const int sms = sm_count();
  return sms > 0 && ctas <= sms;
}

// Dynamic shared memory of a decode launch: the kernel's storage, or for an exclusive launch (exclusive_sms) at
// least half an SM's (two such CTAs with their reserved 1 KB each exceed kSmemPerSm).
template <class Tr>
constexpr size_t launch_smem_bytes(bool exclusive) {
  constexpr size_t own = fmha::sm90::smem_bytes<Tr>();
  constexpr size_t half_sm = fmha::sm90::kSmemPerSm / 2;
  return exclusive && own < half_sm ? half_sm : own;
}

// Sets the decode kernel's function attributes once per device: the dynamic shared memory it needs,
// and cluster sizes above the portable 8 (the cluster merge uses up to kMaxClusterSplits CTAs).
template <int D, bool kBf16, int kVariant>
int configure_kernel() {
  using Tr = fmha::sm90::DecodeTraits<D, kVariant>;
  auto kernel = fmha::sm90::decode_kernel<D, kBf16, kVariant>;
  constexpr size_t smem = launch_smem_bytes<Tr>(true);  // the most a launch asks for
  // The attributes are per function and per device (one static per instantiation). Remember which
  // devices are done so the hot path skips the driver calls; setting them twice (a race between
  // threads) is harmless.
  static std::atomic<uint64_t> configured_devices{0};
  int device = 0;
  if (check_cuda(cudaGetDevice(&device), "cudaGetDevice")) return 1;
  const uint64_t device_bit = device < kMaxDevices ? (uint64_t{1} << device) : 0;
  if (device_bit == 0 || !(configured_devices.load(std::memory_order_relaxed) & device_bit)) {
    if (check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)),
                   "cudaFuncSetAttribute(decode, max dynamic smem)"))
      return 1;
    if (cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1) != cudaSuccess)
      (void)cudaGetLastError();  // then only portable cluster sizes (<= 8) can merge in clusters
    configured_devices.fetch_or(device_bit, std::memory_order_relaxed);
  }
  return 0;
}

// How many clusters of `cluster` CTAs of the decode kernel the current device holds at once (0 when
// it cannot launch them, or the query failed), launched exclusive (exclusive_sms) or not. A driver query:
// answers are cached per instantiation, device, launch kind and cluster size; failures are not (a later
// call asks again). The query may run during stream capture (the first launch of a shape inside
// torch.cuda.graph): the thread's capture mode is relaxed around it so that capture is never invalidated by it.
template <int D, bool kBf16, int kVariant>
int max_active_clusters(int cluster, bool exclusive) {
  using Tr = fmha::sm90::DecodeTraits<D, kVariant>;
  auto kernel = fmha::sm90::decode_kernel<D, kBf16, kVariant>;
  const size_t smem = launch_smem_bytes<Tr>(exclusive);
  static std::atomic<int> cached[kMaxDevices][2][fmha::sm90::kMaxClusterSplits + 1];  // answer + 1; 0: not known
  if (cluster < 1 || cluster > fmha::sm90::kMaxClusterSplits) return 0;
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  if (device >= kMaxDevices) return 0;
  const int known = cached[device][exclusive][cluster].load(std::memory_order_relaxed);
  if (known > 0) return known - 1;
  if (configure_kernel<D, kBf16, kVariant>()) {
    (void)cudaGetLastError();
    return 0;
  }
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = static_cast<unsigned>(cluster);
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(static_cast<unsigned>(cluster));
  cfg.blockDim = dim3(static_cast<unsigned>(Tr::kThreads));
  cfg.dynamicSmemBytes = smem;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  const bool exchanged = cudaThreadExchangeStreamCaptureMode(&mode) == cudaSuccess;
  int n = 0;
  const cudaError_t e = cudaOccupancyMaxActiveClusters(&n, reinterpret_cast<const void*>(kernel), &cfg);
  if (exchanged) (void)cudaThreadExchangeStreamCaptureMode(&mode);  // back to the caller's mode
  else (void)cudaGetLastError();
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  cached[device][exclusive][cluster].store(n + 1, std::memory_order_relaxed);
  return n;
}

// f(d, v) with d, v std::integral_constant of the decode kernel's instantiation that serves head dim D
// and variant (D = 512: wide runs the seesaw loop, deep the split-Q K^T loop; kStream exists at D = 128 only);
// `fallback` for any other D or variant.
template <class F>
int with_instance(int D, int variant, int fallback, F&& f) {
  using fmha::sm90::kDeep;
  using fmha::sm90::kStream;
  using fmha::sm90::kWide;
  // (KV-head pairs have no instantiation of their own: fmha_sm90_decode launches the D = 128 stream kernel.)
  if (instance_shape_of(D, variant).tile_n == 0 || variant == kHeadPairs) return fallback;
  const bool deep = variant == kDeep;
  switch (D) {
    case 64: return deep ? f(std::integral_constant<int, 64>{}, std::integral_constant<int, kDeep>{})
                         : f(std::integral_constant<int, 64>{}, std::integral_constant<int, kWide>{});
    case 128:
      if (variant == kStream) return f(std::integral_constant<int, 128>{}, std::integral_constant<int, kStream>{});
      return deep ? f(std::integral_constant<int, 128>{}, std::integral_constant<int, kDeep>{})
                  : f(std::integral_constant<int, 128>{}, std::integral_constant<int, kWide>{});
    case 256: return deep ? f(std::integral_constant<int, 256>{}, std::integral_constant<int, kDeep>{})
                          : f(std::integral_constant<int, 256>{}, std::integral_constant<int, kWide>{});
    case 512: return deep ? f(std::integral_constant<int, 512>{}, std::integral_constant<int, kDeep>{})
                          : f(std::integral_constant<int, 512>{}, std::integral_constant<int, kWide>{});
    default: return fallback;
  }
}

size_t workspace_bytes(int B, int T, int Hq, int D, int num_splits) {
  if (num_splits <= 1) return 0;
  return static_cast<size_t>(fmha::workspace_o_elems(B, T, Hq, D, num_splits) +
                             fmha::workspace_lse_elems(B, T, Hq, num_splits)) *
         sizeof(float);
}

// Whether a split-KV grid of `clusters` groups of num_splits CTAs merges in clusters: only when the
// GPU holds every cluster at once (a second wave would cost more than the combine kernel saves), and
// for at most FMHA_SM90_CLUSTER_MERGE_MAX_ROWS packed rows. H200 (run ac, us): B8 S8192 T1 (4 rows)
// 68.8 -> 65.4, B4 S512 8.5 -> 7.4; but T=16 (64 rows) 73.4 -> 73.9 (and 74.2 -> 75.4 with the
// first, pull-based merge), so 64-row problems take the pair merge below (two splits) or the combine kernel.
// `exclusive`: the launch runs one CTA per SM (exclusive_sms), so the occupancy query asks as the launch will.
template <int D, bool kBf16, int kVariant>
bool use_cluster_merge(int num_splits, long long clusters, int rows, bool exclusive) {
  using Tr = fmha::sm90::DecodeTraits<D, kVariant>;
  if (!Tr::kClusterMerge || !FMHA_SM90_CLUSTER_MERGE || FMHA_SM90_PROBE_NO_COMBINE || num_splits < 2 || rows > FMHA_SM90_CLUSTER_MERGE_MAX_ROWS ||
      num_splits > fmha::sm90::kMaxClusterSplits || !fmha::sm90::merge_fits<Tr>(num_splits, rows))
    return false;
  return max_active_clusters<D, kBf16, kVariant>(num_splits, exclusive) >= clusters;
}

// Whether a split-KV grid merges as cluster pairs (kMergePair, store_output_pair): two splits on the 64-row
// loop, every pair resident at once.
template <int D, bool kBf16, int kVariant>
bool use_pair_merge(int num_splits, long long clusters, int rows, bool exclusive) {
  using Tr = fmha::sm90::DecodeTraits<D, kVariant>;
  const bool narrow = Tr::kNarrow && rows <= Tr::kNarrowRows;  // the narrow loop has its own epilogue
  if (!Tr::kPairMerge || FMHA_SM90_PROBE_NO_COMBINE || num_splits != 2 || narrow) return false;
  return max_active_clusters<D, kBf16, kVariant>(2, exclusive) >= clusters;
}

// The ClusterMergeMode of a split-KV launch (params.h) of `clusters` x num_splits CTAs, exclusive or not.
template <int D, bool kBf16, int kVariant>
int cluster_merge_mode(int num_splits, long long clusters, int rows, bool exclusive) {
  if (use_cluster_merge<D, kBf16, kVariant>(num_splits, clusters, rows, exclusive)) return fmha::kMergeDealtRows;
  if (use_pair_merge<D, kBf16, kVariant>(num_splits, clusters, rows, exclusive)) return fmha::kMergePair;
  return fmha::kMergeByKernel;
}

template <int D, bool kBf16, int kVariant>
int launch(const fmha::DecodeParams& p, const void* k, const void* v, int64_t k_b, int64_t k_s, int64_t k_h,
           int64_t v_b, int64_t v_s, int64_t v_h, size_t workspace_size, cudaStream_t stream) {
  using Tr = fmha::sm90::DecodeTraits<D, kVariant>;
  CUtensorMap tmap_k, tmap_v;
  const int dtype = kBf16 ? 1 : 0;
  if (encode_kv_map(&tmap_k, k, dtype, p.B, p.S, p.Hkv, D, k_b, k_s, k_h, Tr::kTmaRows, p.k_head_major, "k_cache"))
    return 1;
  if (encode_kv_map(&tmap_v, v, dtype, p.B, p.S, p.Hkv, D, v_b, v_s, v_h, Tr::kTmaRows, p.v_head_major, "v_cache"))
    return 1;

  auto kernel = fmha::sm90::decode_kernel<D, kBf16, kVariant>;
  constexpr size_t smem = fmha::sm90::smem_bytes<Tr>();
  static_assert(smem <= 227 * 1024, "decode kernel shared memory exceeds the sm_90 limit");
  static_assert(fmha::sm90::fits_ctas_per_sm<Tr>(), "shared memory of kCtasPerSm CTAs exceeds one SM");
  static_assert(fmha::sm90::merge_capacity_floats<Tr>() > 0, "cluster merge: the K and V rings must be adjacent");
  if (configure_kernel<D, kBf16, kVariant>()) return 1;

  const int row_blocks = (p.rows + Tr::kBlockM - 1) / Tr::kBlockM;
  const long long grid_x = static_cast<long long>(row_blocks) * p.num_splits;
  if (grid_x > 0x7fffffffLL || p.Hkv > 65535 || p.B > 65535)
    return fail("grid too large: row_blocks*num_splits=%lld Hkv=%d B=%d (limits 2^31-1, 65535, 65535)", grid_x,
                p.Hkv, p.B);
  dim3 grid(static_cast<unsigned>(grid_x), static_cast<unsigned>(p.Hkv), static_cast<unsigned>(p.B));
  const long long clusters = static_cast<long long>(row_blocks) * p.Hkv * p.B;  // one per split group
  // Decided once: the shared memory the launch asks for and the cluster occupancy the merge mode reads.
  const bool exclusive = exclusive_sms(clusters * p.num_splits, p.num_splits);
  fmha::DecodeParams lp = p;
  lp.cluster_merge = cluster_merge_mode<D, kBf16, kVariant>(p.num_splits, clusters, p.rows, exclusive);
  if (p.num_splits > 1 && lp.cluster_merge == fmha::kMergeByKernel) {  // partials go through the workspace
    const size_t need = workspace_bytes(p.B, p.T, p.Hq, D, p.num_splits);
    if (p.o_partial == nullptr || workspace_size < need)
      return fail("workspace of %zu bytes is too small: num_splits=%d merged by the combine kernel needs %zu",
                  p.o_partial == nullptr ? size_t{0} : workspace_size, p.num_splits, need);
  } else {
    lp.o_partial = nullptr;  // merged in clusters (or unsplit): the kernel never touches a workspace
    lp.lse_partial = nullptr;
  }
  // Programmatic stream serialization (PDL): the grid may be scheduled before the previous kernel
  // on the stream has finished; the kernel waits (griddepcontrol.wait) before reading or writing
  // global memory. Without a PDL-aware predecessor it behaves like a plain launch.
  cudaLaunchAttribute attr[2];
  int n_attr = 0;
  if (FMHA_SM90_PDL) {
    attr[n_attr].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[n_attr++].val.programmaticStreamSerializationAllowed = 1;
  }
  const int n_attr_combine = n_attr;
  if (lp.cluster_merge != fmha::kMergeByKernel) {  // the splits of one (row block, KV head, sequence): blockIdx.x = row_block * num_splits + split
    attr[n_attr].id = cudaLaunchAttributeClusterDimension;
    attr[n_attr].val.clusterDim.x = static_cast<unsigned>(p.num_splits);
    attr[n_attr].val.clusterDim.y = 1;
    attr[n_attr++].val.clusterDim.z = 1;
  }
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = dim3(Tr::kThreads);
  cfg.dynamicSmemBytes = launch_smem_bytes<Tr>(exclusive);
  cfg.stream = stream;
  cfg.attrs = attr;
  cfg.numAttrs = n_attr;
  if (check_cuda(cudaLaunchKernelEx(&cfg, kernel, tmap_k, tmap_v, lp), "decode kernel launch")) return 1;

  if (p.num_splits > 1 && lp.cluster_merge == fmha::kMergeByKernel && !FMHA_SM90_PROBE_NO_COMBINE) {
    using Ct = fmha::CombineTraits<D>;
    const long long rows = static_cast<long long>(p.B) * p.T * p.Hq;
    const long long ctas = (rows + Ct::kRowsPerCta - 1) / Ct::kRowsPerCta;
    if (ctas > 0x7fffffffLL) return fail("combine grid too large (%lld CTAs)", ctas);
    cudaLaunchConfig_t ccfg = {};
    ccfg.gridDim = dim3(static_cast<unsigned>(ctas));
    ccfg.blockDim = dim3(fmha::kCombineThreads);
    ccfg.dynamicSmemBytes = 0;
    ccfg.stream = stream;
    ccfg.attrs = attr;
    ccfg.numAttrs = n_attr_combine;  // PDL only (FMHA_SM90_PDL: sm90/decode_kernel.cuh)
    const cudaError_t e = p.num_splits <= 4
                              ? cudaLaunchKernelEx(&ccfg, fmha::combine_splits_kernel<D, kBf16, 4>, lp)
                              : cudaLaunchKernelEx(&ccfg, fmha::combine_splits_kernel<D, kBf16, 16>, lp);
    if (check_cuda(e, "combine kernel launch")) return 1;
  }
  return 0;
}

bool misaligned(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) != 0; }
bool bad_stride(int64_t s) { return s < 0 || (s * 2) % 16 != 0; }

}  // namespace

extern "C" {

const char* fmha_last_error(void) { return g_last_error; }

int fmha_sm90_tile_n(int D, int variant) { return instance_shape_of(D, variant).tile_n; }

int fmha_sm90_ctas_per_sm(int D, int variant) { return instance_shape_of(D, variant).ctas_per_sm; }

int fmha_sm90_narrow_rows(int D, int variant) { return instance_shape_of(D, variant).narrow_rows; }

int fmha_sm90_max_active_clusters(int D, int variant, int cluster_size) {
  return with_instance(D, variant, 0, [&](auto d, auto v) {
    return max_active_clusters<decltype(d)::value, true, decltype(v)::value>(cluster_size, false);
  });
}

int fmha_sm90_cluster_merge(int D, int dtype, int variant, int num_splits, long long clusters, int rows) {
  if ((dtype != 0 && dtype != 1) || !valid_variant(variant)) return -1;
  return with_instance(D, variant, -1, [&](auto d, auto v) {
    constexpr int kD = decltype(d)::value, kV = decltype(v)::value;
    const bool exclusive = exclusive_sms(clusters * num_splits, num_splits);  // as the launch will decide
    return dtype == 1 ? cluster_merge_mode<kD, true, kV>(num_splits, clusters, rows, exclusive)
                      : cluster_merge_mode<kD, false, kV>(num_splits, clusters, rows, exclusive);
  });
}

size_t fmha_sm90_workspace_bytes(int B, int T, int Hq, int D, int num_splits) {
  return workspace_bytes(B, T, Hq, D, num_splits);
}

int fmha_sm90_probe_layout(int* ctas, int* tiles, int* events) {
  if (!ctas || !tiles || !events) return fail("fmha_sm90_probe_layout: null argument");
  *ctas = fmha::sm90::kProbeCtas;
  *tiles = fmha::sm90::kProbeTiles;
  *events = fmha::sm90::kProbeEvents;
  return 0;
}

int fmha_sm90_probe_read(void* host_dst, size_t bytes, int clear) {
#if FMHA_SM90_PROBE_TIMESTAMPS
  using fmha::sm90::g_probe_stamps;
  if (host_dst != nullptr) {
    if (bytes != sizeof(g_probe_stamps))
      return fail("fmha_sm90_probe_read: %zu bytes asked, the stamps take %zu", bytes, sizeof(g_probe_stamps));
    if (check_cuda(cudaMemcpyFromSymbol(host_dst, g_probe_stamps, bytes), "cudaMemcpyFromSymbol(probe stamps)"))
      return 1;
  }
  if (clear) {
    void* addr = nullptr;
    if (check_cuda(cudaGetSymbolAddress(&addr, g_probe_stamps), "cudaGetSymbolAddress(probe stamps)")) return 1;
    if (check_cuda(cudaMemset(addr, 0, sizeof(g_probe_stamps)), "cudaMemset(probe stamps)")) return 1;
  }
  return 0;
#else
  (void)host_dst; (void)bytes; (void)clear;
  return fail("this library was built without the timing probe (FMHA_NVCC_FLAGS=-DFMHA_SM90_PROBE_TIMESTAMPS=1)");
#endif
}

int fmha_sm90_decode(const void* q, const void* k, const void* v, void* out, float* lse, const int* cache_seqlens,
                     int B, int T, int Hq, int Hkv, int S, int D, int dtype, int64_t q_b, int64_t q_t, int64_t q_h,
                     int64_t k_b, int64_t k_s, int64_t k_h, int64_t v_b, int64_t v_s, int64_t v_h, int64_t o_b,
                     int64_t o_t, int64_t o_h, float softmax_scale, int causal, int num_splits, int variant,
                     void* workspace, size_t workspace_size, void* stream) {
  g_last_error[0] = '\0';
  if (B < 1 || T < 1 || Hq < 1 || Hkv < 1 || S < 1)
    return fail("invalid shape B=%d T=%d Hq=%d Hkv=%d S=%d (all must be >= 1)", B, T, Hq, Hkv, S);
  if (Hq % Hkv != 0) return fail("Hq=%d is not a multiple of Hkv=%d", Hq, Hkv);
  if (S > INT32_MAX - 1024) return fail("S=%d too large: token indices must stay below 2^31 - 1024", S);
  if (instance_shape_of(D, fmha::sm90::kWide).tile_n == 0)
    return fail("head dim D=%d not supported (64, 128, 256, 512)", D);
  if (dtype != 0 && dtype != 1) return fail("dtype code %d invalid (0 = float16, 1 = bfloat16)", dtype);
  if (!q || !k || !v || !out || !lse) return fail("null tensor pointer (q, k, v, out, lse are required)");
  if (misaligned(q) || misaligned(k) || misaligned(v) || misaligned(out))
    return fail("q, k_cache, v_cache and out must start on 16-byte boundaries");
  if (bad_stride(q_b) || bad_stride(q_t) || bad_stride(q_h) || bad_stride(o_b) || bad_stride(o_t) ||
      bad_stride(o_h))
    return fail("q/out strides must be non-negative multiples of 16 bytes (q %lld %lld %lld, out %lld %lld %lld)",
                (long long)q_b, (long long)q_t, (long long)q_h, (long long)o_b, (long long)o_t, (long long)o_h);
  if (!(softmax_scale > 0.f) || !std::isfinite(softmax_scale))
    return fail("softmax_scale %g must be finite and positive", (double)softmax_scale);
  if (num_splits < 1 || num_splits > 1024) return fail("num_splits=%d out of range [1, 1024]", num_splits);
  if (instance_shape_of(D, variant).tile_n == 0)
    return fail("variant=%d invalid for D=%d (0 = wide: several CTAs per SM; 1 = deep: one CTA per SM, deeper ring; "
                "2 = stream: D = 128 only, the wide ring with the narrow loop; 3 = KV-head pairs: D = 64 only)",
                variant, D);
  const int G = Hq / Hkv;
  if (static_cast<long long>(T) * G > (1LL << 30)) return fail("T * Hq / Hkv too large");
  const bool pairs = variant == kHeadPairs;
  if (pairs) {
    const int max_rows = instance_shape_of(D, variant).narrow_rows;
    if (num_splits != 1) return fail("variant 3 (KV-head pairs) runs unsplit, got num_splits=%d", num_splits);
    if (Hkv % 2 != 0) return fail("variant 3 (KV-head pairs) needs an even Hkv, got Hkv=%d", Hkv);
    if (2LL * T * G > max_rows)
      return fail("variant 3 (KV-head pairs) serves at most %d packed rows a pair, got 2 x T x Hq/Hkv = %lld",
                  max_rows, 2LL * T * G);
  }

  fmha::DecodeParams p{};
  p.q = q;
  p.out = out;
  p.lse = lse;
  p.seqlens = cache_seqlens;
  p.q_b = q_b; p.q_t = q_t; p.q_h = q_h;
  p.o_b = o_b; p.o_t = o_t; p.o_h = o_h;
  p.B = B; p.T = T; p.Hq = Hq; p.Hkv = Hkv; p.S = S; p.G = G;
  p.rows = T * G;
  p.num_splits = num_splits;
  p.qk_scale = softmax_scale * fmha::kLog2e;
  p.causal = causal != 0 && T > 1;
  sanitize_kv_strides(S, Hkv, D, B, k_b, k_s, k_h);
  sanitize_kv_strides(S, Hkv, D, B, v_b, v_s, v_h);
  if (pairs) {  // read the cache as D = 128 with Hkv / 2 heads (DecodeParams::head_pairs)
    if (k_h != D || v_h != D)
      return fail("variant 3 (KV-head pairs) needs the KV heads of a token side by side (head stride %d elements); "
                  "k_cache has %lld, v_cache %lld", D, (long long)k_h, (long long)v_h);
    p.head_pairs = 1;
    p.Hkv = Hkv / 2;
    p.rows = 2 * T * G;
    k_h = v_h = 2 * D;
  }
  p.k_head_major = head_major_order(k_s, k_h, p.Hkv);
  p.v_head_major = head_major_order(v_s, v_h, p.Hkv);
  if (num_splits > 1 && workspace != nullptr) {  // required (and its size checked) where launch() merges by kernel
    if (misaligned(workspace)) return fail("workspace must be 16-byte aligned");
    p.o_partial = static_cast<float*>(workspace);
    p.lse_partial = p.o_partial + fmha::workspace_o_elems(B, T, Hq, D, num_splits);
  }
  cudaStream_t st = static_cast<cudaStream_t>(stream);
  if (pairs) {
    using fmha::sm90::kStream;
    return dtype == 1 ? launch<128, true, kStream>(p, k, v, k_b, k_s, k_h, v_b, v_s, v_h, workspace_size, st)
                      : launch<128, false, kStream>(p, k, v, k_b, k_s, k_h, v_b, v_s, v_h, workspace_size, st);
  }
  // (D, variant) were validated above, so with_instance finds the instantiation (-1 is unreachable).
  const int status = with_instance(D, variant, -1, [&](auto dim, auto instance) {  // (v is v_cache here)
    constexpr int kD = decltype(dim)::value, kV = decltype(instance)::value;
    return dtype == 1 ? launch<kD, true, kV>(p, k, v, k_b, k_s, k_h, v_b, v_s, v_h, workspace_size, st)
                      : launch<kD, false, kV>(p, k, v, k_b, k_s, k_h, v_b, v_s, v_h, workspace_size, st);
  });
  return status >= 0 ? status : fail("no decode kernel for D=%d variant=%d", D, variant);
}

int fmha_sm90_decode_packed(const FmhaDecodeArgs* a) {
  if (a == nullptr) return fail("fmha_sm90_decode_packed: null argument struct");
  const int64_t dims[6] = {a->B, a->T, a->Hq, a->Hkv, a->S, a->D};
  for (int64_t d : dims)
    if (d < 1 || d > INT32_MAX) return fail("fmha_sm90_decode_packed: a shape value (%lld) is out of range", (long long)d);
  if (a->dtype < 0 || a->dtype > 1 || a->causal < 0 || a->causal > 1 || a->num_splits < 1 ||
      a->num_splits > INT32_MAX || a->variant < INT32_MIN || a->variant > INT32_MAX ||
      !valid_variant(static_cast<int>(a->variant)))
    return fail("fmha_sm90_decode_packed: dtype=%lld causal=%lld num_splits=%lld variant=%lld out of range (dtype 0 "
                "or 1, causal 0 or 1, num_splits >= 1, variant 0 = wide, 1 = deep, 2 = stream, 3 = KV-head pairs)",
                (long long)a->dtype, (long long)a->causal, (long long)a->num_splits, (long long)a->variant);
  return fmha_sm90_decode(reinterpret_cast<const void*>(a->q), reinterpret_cast<const void*>(a->k),
                          reinterpret_cast<const void*>(a->v), reinterpret_cast<void*>(a->out),
                          reinterpret_cast<float*>(a->lse), reinterpret_cast<const int*>(a->cache_seqlens),
                          static_cast<int>(a->B), static_cast<int>(a->T), static_cast<int>(a->Hq),
                          static_cast<int>(a->Hkv), static_cast<int>(a->S), static_cast<int>(a->D),
                          static_cast<int>(a->dtype), a->q_b, a->q_t, a->q_h, a->k_b, a->k_s, a->k_h, a->v_b, a->v_s,
                          a->v_h, a->o_b, a->o_t, a->o_h, static_cast<float>(a->softmax_scale),
                          static_cast<int>(a->causal), static_cast<int>(a->num_splits), static_cast<int>(a->variant),
                          reinterpret_cast<void*>(a->workspace), static_cast<size_t>(a->workspace_bytes),
                          reinterpret_cast<void*>(a->stream));
}

}  // extern "C"
