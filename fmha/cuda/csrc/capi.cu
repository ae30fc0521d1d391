// fmha: the C API (fmha_capi.h) of the CUDA decode kernels: argument checks, the choice of the
// instantiation, and the configuration queries. No ATen, no pybind11. fmha_decode reports failure by
// a non-zero return value and a thread-local message readable through fmha_last_error() (the queries
// by -1, or 0 bytes, alone); nothing prints, exits, synchronises or allocates: the launches are safe under CUDA-graph capture on the
// caller's stream. The first launch of a kernel on a device also sets its function attributes and,
// for split-KV, asks the driver how many clusters fit (cached; sm90/launch.cuh).
//
// The kernels live in one translation unit each (instantiations/); this file holds no device code.
#include <cuda_runtime.h>

#include <cfloat>
#include <cmath>
#include <initializer_list>
#include <cstdint>
#include <type_traits>

#include "common/host.h"
#include "common/params.h"
#include "fmha_capi.h"

// The architecture a library is built for (the loader defines FMHA_TARGET_SM for every unit): 90 is
// sm_90a's kernels (sm90/), 100 sm_100a's (sm100/).
#ifndef FMHA_TARGET_SM
#define FMHA_TARGET_SM 90
#endif
#if FMHA_TARGET_SM == 100
#include "sm100/config.h"
#include "sm100/launch.h"
#include "sm100/traits.h"
namespace arch = fmha::sm100;
#elif FMHA_TARGET_SM == 90
#include "sm90/config.h"
#include "sm90/launch.h"
#include "sm90/traits.h"
namespace arch = fmha::sm90;
#else
#error "FMHA_TARGET_SM: 90 or 100"
#endif

namespace {

using fmha::fail;
using arch::DecodeTraits;
using arch::Instance;

using fmha::kLog2e;

// The configurations with a balanced schedule (sm90/schedule_balanced.cuh).
bool balanced_config(int config) {
  return config == FMHA_CONFIG_LATENT_NARROW || config == FMHA_CONFIG_LATENT_SEESAW64 ||
         config == FMHA_CONFIG_LATENT_SEESAW48;
}

template <int kConfig>
using Cfg = std::integral_constant<int, kConfig>;
template <int D>
using Dim = std::integral_constant<int, D>;

// f(Dim<D>, Cfg) for the decode kernel instantiated for head dim D and `config` (KV_HEAD_PAIRS has none
// of its own: the D = 128 STREAM kernel serves it); `fallback` for any other pair.
template <class F>
int with_instance(int D, int config, int fallback, F&& f) {
#if FMHA_TARGET_SM == 100
  // One kernel per head dim and ring (sm100/config.h): STREAM runs WIDE's, SEESAW SPLIT_QK's, LATENT_SEESAW
  // LATENT_SPLIT_QK's.
  switch (D) {
    case 64:
    case 128:
    case 256:
      if (config == FMHA_CONFIG_WIDE || (D == 128 && config == FMHA_CONFIG_STREAM)) {
        if (D == 64) return f(Dim<64>{}, Cfg<FMHA_CONFIG_WIDE>{});
        if (D == 128) return f(Dim<128>{}, Cfg<FMHA_CONFIG_WIDE>{});
        return f(Dim<256>{}, Cfg<FMHA_CONFIG_WIDE>{});
      }
      if (config == FMHA_CONFIG_DEEP) {
        if (D == 64) return f(Dim<64>{}, Cfg<FMHA_CONFIG_DEEP>{});
        if (D == 128) return f(Dim<128>{}, Cfg<FMHA_CONFIG_DEEP>{});
        return f(Dim<256>{}, Cfg<FMHA_CONFIG_DEEP>{});
      }
      return fallback;
    case 512:
      if (config == FMHA_CONFIG_SEESAW || config == FMHA_CONFIG_SPLIT_QK)
        return f(Dim<512>{}, Cfg<FMHA_CONFIG_SPLIT_QK>{});
      if (config == FMHA_CONFIG_LATENT_SEESAW || config == FMHA_CONFIG_LATENT_SPLIT_QK)
        return f(Dim<512>{}, Cfg<FMHA_CONFIG_LATENT_SPLIT_QK>{});
      return fallback;
    case 576:
      if (config == FMHA_CONFIG_LATENT_SEESAW || config == FMHA_CONFIG_LATENT_SPLIT_QK)
        return f(Dim<576>{}, Cfg<FMHA_CONFIG_LATENT_SPLIT_QK>{});
      return fallback;
    default:
      return fallback;
  }
#else
  switch (D) {
    case 64:
      if (config == FMHA_CONFIG_WIDE) return f(Dim<64>{}, Cfg<FMHA_CONFIG_WIDE>{});
      if (config == FMHA_CONFIG_DEEP) return f(Dim<64>{}, Cfg<FMHA_CONFIG_DEEP>{});
      if (config == FMHA_CONFIG_WIDE_GATHER) return f(Dim<64>{}, Cfg<FMHA_CONFIG_WIDE_GATHER>{});
      return fallback;
    case 128:
      if (config == FMHA_CONFIG_WIDE) return f(Dim<128>{}, Cfg<FMHA_CONFIG_WIDE>{});
      if (config == FMHA_CONFIG_DEEP) return f(Dim<128>{}, Cfg<FMHA_CONFIG_DEEP>{});
      if (config == FMHA_CONFIG_STREAM) return f(Dim<128>{}, Cfg<FMHA_CONFIG_STREAM>{});
      return fallback;
    case 256:
      if (config == FMHA_CONFIG_WIDE) return f(Dim<256>{}, Cfg<FMHA_CONFIG_WIDE>{});
      if (config == FMHA_CONFIG_DEEP) return f(Dim<256>{}, Cfg<FMHA_CONFIG_DEEP>{});
      return fallback;
    case 512:
      if (config == FMHA_CONFIG_SEESAW) return f(Dim<512>{}, Cfg<FMHA_CONFIG_SEESAW>{});
      if (config == FMHA_CONFIG_SPLIT_QK) return f(Dim<512>{}, Cfg<FMHA_CONFIG_SPLIT_QK>{});
      if (config == FMHA_CONFIG_LATENT_SEESAW) return f(Dim<512>{}, Cfg<FMHA_CONFIG_LATENT_SEESAW>{});
      if (config == FMHA_CONFIG_LATENT_SPLIT_QK) return f(Dim<512>{}, Cfg<FMHA_CONFIG_LATENT_SPLIT_QK>{});
      if (config == FMHA_CONFIG_LATENT_NARROW) return f(Dim<512>{}, Cfg<FMHA_CONFIG_LATENT_NARROW>{});
      if (config == FMHA_CONFIG_LATENT_SEESAW64) return f(Dim<512>{}, Cfg<FMHA_CONFIG_LATENT_SEESAW64>{});
      if (config == FMHA_CONFIG_LATENT_SEESAW48) return f(Dim<512>{}, Cfg<FMHA_CONFIG_LATENT_SEESAW48>{});
      return fallback;
    case 576:
      if (config == FMHA_CONFIG_LATENT_SEESAW) return f(Dim<576>{}, Cfg<FMHA_CONFIG_LATENT_SEESAW>{});
      if (config == FMHA_CONFIG_LATENT_SPLIT_QK) return f(Dim<576>{}, Cfg<FMHA_CONFIG_LATENT_SPLIT_QK>{});
      if (config == FMHA_CONFIG_LATENT_NARROW) return f(Dim<576>{}, Cfg<FMHA_CONFIG_LATENT_NARROW>{});
      if (config == FMHA_CONFIG_LATENT_SEESAW64) return f(Dim<576>{}, Cfg<FMHA_CONFIG_LATENT_SEESAW64>{});
      if (config == FMHA_CONFIG_LATENT_SEESAW48) return f(Dim<576>{}, Cfg<FMHA_CONFIG_LATENT_SEESAW48>{});
      return fallback;
    default:
      return fallback;
  }
#endif
}

// KV tokens per tile, resident CTAs per SM and narrow-loop rows of a configuration; {0, 0, 0}: none.
struct ConfigShape {
  int tile_n, ctas_per_sm, narrow_rows;
};

ConfigShape config_shape(int D, int config) {
  if (config == FMHA_CONFIG_KV_HEAD_PAIRS)  // sm_90a's D = 128 STREAM kernel; no sm_100a kernel serves pairs
    return D == 64 && FMHA_TARGET_SM == 90 ? config_shape(128, FMHA_CONFIG_STREAM) : ConfigShape{0, 0, 0};
  ConfigShape none{0, 0, 0};
  with_instance(D, config, 0, [&](auto d, auto c) {
    using Tr = DecodeTraits<decltype(d)::value, decltype(c)::value>;
    none = ConfigShape{Tr::kBlockN, Tr::kCtasPerSm, Tr::kNarrow ? Tr::kNarrowRows : 0};
    return 0;
  });
  return none;
}

const char* kConfigHelp =
    "0 = WIDE (D = 64, 128, 256), 1 = DEEP (D = 64, 128, 256), 2 = STREAM (D = 128), 3 = KV_HEAD_PAIRS (D = 64), "
    "4 = SEESAW (D = 512), 5 = SPLIT_QK (D = 512), 6 = LATENT_SEESAW (D = 512, 576), "
    "7 = LATENT_SPLIT_QK (D = 512, 576), 8 = LATENT_NARROW (D = 512, 576, at most 32 packed rows; sm_90a), "
    "9 = LATENT_SEESAW64 (D = 512, 576; sm_90a), 10 = WIDE_GATHER (D = 64; sm_90a), 11 = LATENT_SEESAW48 (D = 512, "
    "576; sm_90a)";

bool misaligned(uint64_t p) { return (p & 15u) != 0; }
// Strides in 16-bit elements: non-negative multiples of 16 bytes below 2^40 elements (no address wraps).
bool bad_stride(int64_t s) { return s < 0 || s >= (int64_t(1) << 40) || (s * 2) % 16 != 0; }

// Whether out's rows share memory: over the dimensions of more than one element, sorted by stride, each stride
// must step past everything the smaller ones span (Dv contiguous elements innermost).
bool out_rows_overlap(int B, int T, int Hq, int Dv, int64_t o_b, int64_t o_t, int64_t o_h) {
  struct Dim { int64_t n, stride; } dims[3] = {{Hq, o_h}, {T, o_t}, {B, o_b}};
  for (int i = 0; i < 3; ++i)  // (insertion sort of three)
    for (int j = i; j > 0 && dims[j].stride < dims[j - 1].stride; --j) {
      const Dim t = dims[j];
      dims[j] = dims[j - 1];
      dims[j - 1] = t;
    }
  int64_t extent = Dv;  // elements the inner dimensions span
  for (const Dim& d : dims) {
    if (d.n <= 1) continue;
    if (d.stride < extent) return true;
    int64_t span;  // (a span past 2^63 elements counts as sharing: no such tensor exists)
    if (__builtin_mul_overflow(d.n - 1, d.stride, &span) || __builtin_add_overflow(span, extent, &extent)) return true;
  }
  return false;
}
bool out_of_int(int64_t v) { return v < 1 || v > INT32_MAX; }

}  // namespace

extern "C" {

const char* fmha_last_error(void) { return fmha::last_error(); }

int fmha_arch(void) { return FMHA_TARGET_SM; }

int fmha_config_tile_n(int D, int config) { return config_shape(D, config).tile_n; }

int fmha_config_ctas_per_sm(int D, int config) { return config_shape(D, config).ctas_per_sm; }

int fmha_config_narrow_rows(int D, int config) { return config_shape(D, config).narrow_rows; }

int fmha_paged_gather(int D, int config, long long page_size, long long ctas) {
  if (page_size < 1 || page_size > INT32_MAX || config_shape(D, config).tile_n == 0) return -1;
  if (config == FMHA_CONFIG_KV_HEAD_PAIRS) {  // answered for the kernel that runs them (D = 128 STREAM)
    D = 128;
    config = FMHA_CONFIG_STREAM;
  }
  return arch::paged_gathers(D, config, static_cast<int>(page_size), ctas, fmha::sm_count()) ? 1 : 0;
}

int fmha_max_active_clusters(int D, int config, int cluster_size) {
  return with_instance(D, config, 0, [&](auto d, auto c) {
    return Instance<decltype(d)::value, true, decltype(c)::value>::max_active_clusters(cluster_size, false);
  });
}

int fmha_cluster_merge(int D, int dtype, int config, int num_splits, long long clusters, int rows) {
  if ((dtype != 0 && dtype != 1) || num_splits < 1 || num_splits > 1024 || clusters < 1 || clusters > INT32_MAX ||
      rows < 1 || rows > (1 << 30))
    return -1;
  return with_instance(D, config, -1, [&](auto d, auto c) {
    constexpr int kD = decltype(d)::value, kC = decltype(c)::value;
    const bool exclusive = fmha::exclusive_sms(clusters * num_splits, num_splits);  // as the launch will decide
    return dtype == 1 ? Instance<kD, true, kC>::merge_mode(num_splits, clusters, rows, exclusive)
                      : Instance<kD, false, kC>::merge_mode(num_splits, clusters, rows, exclusive);
  });
}

int fmha_row_block_pairs(int D, int config, int num_splits, long long row_blocks, long long ctas) {
  if (num_splits < 1 || row_blocks < 1 || ctas < 1) return -1;
  return with_instance(D, config, -1, [&](auto d, auto c) {
    const bool exclusive = fmha::exclusive_sms(ctas, num_splits);  // as the launch will decide
    return Instance<decltype(d)::value, true, decltype(c)::value>::pairs_row_blocks(num_splits, row_blocks, exclusive)
               ? 1 : 0;
  });
}

int fmha_half_partials(int D, int dtype, int config) {
  if (dtype != 0 && dtype != 1) return -1;
  return with_instance(D, config, -1, [&](auto d, auto c) {
    constexpr int kD = decltype(d)::value, kC = decltype(c)::value;
    const bool half = dtype == 1 ? Instance<kD, true, kC>::half_partials() : Instance<kD, false, kC>::half_partials();
    return half ? 1 : 0;
  });
}

int fmha_balanced_deals(int D, int config, int B, int Hq, int Hkv, int S, long long page_size, long long ctas) {
  if (B < 1 || Hq < 1 || Hkv < 1 || Hq % Hkv != 0 || S < 1 || S > INT32_MAX - 1024 || page_size < 0 ||
      page_size > INT32_MAX || ctas < 1 || !balanced_config(config))
    return -1;
#if FMHA_TARGET_SM == 90
  return with_instance(D, config, -1, [&](auto d, auto c) {
    using I = Instance<decltype(d)::value, true, decltype(c)::value>;
    const bool gather = page_size > 0 && arch::paged_gathers(D, config, static_cast<int>(page_size), ctas,
                                                             fmha::sm_count());
    return I::deals_tiles(B, Hkv, S, ctas, true, I::q_box_tma(Hq / Hkv), gather) ? 1 : 0;
  });
#else
  return -1;  // no balanced schedule on sm_100a
#endif
}

size_t fmha_workspace_bytes(int B, int T, int Hq, int D, int num_splits) {
  if (B < 1 || T < 1 || Hq < 1 || D < 1) return 0;
  return fmha::workspace_bytes(B, T, Hq, D, num_splits);
}

size_t fmha_balanced_workspace_bytes(int B, int T, int Hq, int Hkv, int Dv, int num_splits) {
  if (B < 1 || T < 1 || Hq < 1 || Hkv < 1 || Dv < 1 || num_splits < 1) return 0;
  if (num_splits > INT32_MAX / 2) return SIZE_MAX;  // (before 2 num_splits is formed)
  // 2 num_splits splits' partials (fmha::workspace_bytes saturates at SIZE_MAX, which no workspace satisfies),
  // rounded to 16 bytes as balanced_desc_offset_bytes, then the descriptors
  const size_t partials = fmha::workspace_bytes(B, T, Hq, Dv, 2 * num_splits);
  const size_t desc = 16u * static_cast<size_t>(B) * static_cast<size_t>(Hkv);
  if (partials > SIZE_MAX - desc - 15) return SIZE_MAX;
  return (partials + 15) / 16 * 16 + desc;
}

int fmha_decode(const FmhaDecodeArgs* a) {
  fmha::clear_error();
  if (a == nullptr) return fail("fmha_decode: null argument struct");
  const bool paged = a->block_table != 0;
  if (paged) {
    if ((a->block_table & 3u) != 0) return fail("block_table must be 4-byte aligned (int32)");
    if (a->page_size < 1 || a->num_blocks < 1 || a->max_blocks_per_seq < 1 ||
        a->page_size > INT32_MAX || a->num_blocks > INT32_MAX || a->max_blocks_per_seq > INT32_MAX)
      return fail("page_size=%lld num_blocks=%lld max_blocks_per_seq=%lld: each must be in [1, 2^31 - 1]",
                  (long long)a->page_size, (long long)a->num_blocks, (long long)a->max_blocks_per_seq);
    if (a->page_size * a->max_blocks_per_seq > INT32_MAX - 1024)
      return fail("max_blocks_per_seq=%lld x page_size=%lld tokens too many: token indices must stay below 2^31 - 1024",
                  (long long)a->max_blocks_per_seq, (long long)a->page_size);
    if (a->block_table_stride < a->max_blocks_per_seq)
      return fail("block_table_stride=%lld is below max_blocks_per_seq=%lld", (long long)a->block_table_stride,
                  (long long)a->max_blocks_per_seq);
    if (a->block_table_stride >= (int64_t(1) << 40))
      return fail("block_table_stride=%lld too large: at most 2^40 - 1 elements", (long long)a->block_table_stride);
  } else if (a->page_size != 0 || a->num_blocks != 0 || a->max_blocks_per_seq != 0 || a->block_table_stride != 0) {
    return fail("page_size=%lld num_blocks=%lld max_blocks_per_seq=%lld block_table_stride=%lld without a "
                "block_table (all must be 0 for contiguous caches)", (long long)a->page_size,
                (long long)a->num_blocks, (long long)a->max_blocks_per_seq, (long long)a->block_table_stride);
  }
  if (out_of_int(a->B) || out_of_int(a->T) || out_of_int(a->Hq) || out_of_int(a->Hkv) || (!paged && out_of_int(a->S)))
    return fail("invalid shape B=%lld T=%lld Hq=%lld Hkv=%lld S=%lld (all must be in [1, 2^31 - 1])",
                (long long)a->B, (long long)a->T, (long long)a->Hq, (long long)a->Hkv, (long long)a->S);
  const int B = static_cast<int>(a->B), T = static_cast<int>(a->T), Hq = static_cast<int>(a->Hq),
            Hkv = static_cast<int>(a->Hkv);
  // Paged caches: the capacity of a sequence.
  const int S = static_cast<int>(paged ? a->max_blocks_per_seq * a->page_size : a->S);
  if (Hq % Hkv != 0) return fail("Hq=%d is not a multiple of Hkv=%d", Hq, Hkv);
  if (S > INT32_MAX - 1024) return fail("S=%d too large: token indices must stay below 2^31 - 1024", S);
  if (a->D != 64 && a->D != 128 && a->D != 256 && a->D != 512 && a->D != 576)
    return fail("head dim D=%lld not supported (64, 128, 256, 512, 576)", (long long)a->D);
  const int D = static_cast<int>(a->D);
  if (a->dtype != 0 && a->dtype != 1) return fail("dtype code %lld invalid (0 = float16, 1 = bfloat16)", (long long)a->dtype);
  const int Dv = a->head_dim_v == 0 ? D : static_cast<int>(a->head_dim_v);
  if (a->head_dim_v != 0 && !(a->head_dim_v == D || (D == 576 && a->head_dim_v == 512)))
    return fail("head_dim_v=%lld invalid for D=%d (D itself, or 512 where D = 576)", (long long)a->head_dim_v, D);
  if (D == 576 && Dv != 512) return fail("D=576 needs head_dim_v=512 (DeepSeek's latent: V is K's first 512 columns)");
  for (int64_t s : {a->k_b, a->k_s, a->k_h, a->v_b, a->v_s, a->v_h})
    if (s < 0 || s >= (int64_t(1) << 40))
      return fail("k/v strides must be non-negative and below 2^40 elements (k %lld %lld %lld, v %lld %lld %lld)",
                  (long long)a->k_b, (long long)a->k_s, (long long)a->k_h, (long long)a->v_b, (long long)a->v_s,
                  (long long)a->v_h);
  arch::KvCaches kv{reinterpret_cast<const void*>(a->k), reinterpret_cast<const void*>(a->v),
                    a->k_b, a->k_s, a->k_h, a->v_b, a->v_s, a->v_h};
  // The tensor maps run over the cache, or over the page pools: (S, B) or (page_size, num_blocks); the strides of
  // dimensions of one element are set to what the others imply (torch reports any stride for them).
  const int map_s = paged ? static_cast<int>(a->page_size) : S, map_b = paged ? static_cast<int>(a->num_blocks) : B;
  fmha::sanitize_kv_strides(map_s, Hkv, D, map_b, kv.k_b, kv.k_s, kv.k_h);
  fmha::sanitize_kv_strides(map_s, Hkv, D, map_b, kv.v_b, kv.v_s, kv.v_h);
  // A shared latent: V is K's memory, element for element (v == k, the same strides).
  const bool shared_kv = a->v == a->k && kv.k_b == kv.v_b && kv.k_s == kv.v_s && kv.k_h == kv.v_h;
  const bool latent_config = a->config == FMHA_CONFIG_LATENT_SEESAW || a->config == FMHA_CONFIG_LATENT_SPLIT_QK ||
                             a->config == FMHA_CONFIG_LATENT_NARROW || a->config == FMHA_CONFIG_LATENT_SEESAW64 ||
                             a->config == FMHA_CONFIG_LATENT_SEESAW48;
  if (latent_config && !shared_kv)
    return fail("config=%lld reads K and V as one latent: v must be k itself (the same pointer and strides)",
                (long long)a->config);
  if (D == 576 && !latent_config)
    return fail("D=576: only the LATENT configurations (6, 7, 8, 9, 11) serve it, got config=%lld",
                (long long)a->config);
  const struct { uint64_t ptr; const char* name; } required[5] = {
      {a->q, "q"}, {a->k, "k"}, {a->v, "v"}, {a->out, "out"}, {a->lse, "lse"}};
  for (const auto& r : required)
    if (r.ptr == 0) return fail("%s: null pointer (q, k, v, out and lse are required)", r.name);
  if (misaligned(a->q) || misaligned(a->k) || misaligned(a->v) || misaligned(a->out))
    return fail("q, k, v and out must start on 16-byte boundaries (q %#llx, k %#llx, v %#llx, out %#llx)",
                (unsigned long long)a->q, (unsigned long long)a->k, (unsigned long long)a->v,
                (unsigned long long)a->out);
  if ((a->lse & 3u) != 0 || (a->cache_seqlens & 3u) != 0)
    return fail("lse (float32) and cache_seqlens (int32) must be 4-byte aligned");
  if (bad_stride(a->q_b) || bad_stride(a->q_t) || bad_stride(a->q_h) || bad_stride(a->o_b) || bad_stride(a->o_t) ||
      bad_stride(a->o_h))
    return fail("q/out strides must be non-negative multiples of 16 bytes below 2^40 elements (q %lld %lld %lld, "
                "out %lld %lld %lld)", (long long)a->q_b, (long long)a->q_t, (long long)a->q_h, (long long)a->o_b,
                (long long)a->o_t, (long long)a->o_h);
  // (the kernels scale by softmax_scale * log2(e) in float32: that product must be a normal float; the double is
  // bounded first, its conversion being undefined out of float's range)
  const bool scale_fits = a->softmax_scale > 0.0 && a->softmax_scale < FLT_MAX;
  const float softmax_scale = scale_fits ? static_cast<float>(a->softmax_scale) : 0.f;
  if (!scale_fits || !std::isfinite(softmax_scale * kLog2e) || softmax_scale * kLog2e < FLT_MIN)
    return fail("softmax_scale %g must be positive with softmax_scale * log2(e) a normal float32", a->softmax_scale);
  if (a->causal != 0 && a->causal != 1) return fail("causal=%lld invalid (0 or 1)", (long long)a->causal);
  if (a->num_splits < 1 || a->num_splits > 1024) return fail("num_splits=%lld out of range [1, 1024]", (long long)a->num_splits);
  const int num_splits = static_cast<int>(a->num_splits);
  if (a->config < 0 || a->config > FMHA_CONFIG_LATENT_SEESAW48 ||
      config_shape(D, static_cast<int>(a->config)).tile_n == 0)
    return fail("config=%lld invalid for D=%d (%s)", (long long)a->config, D, kConfigHelp);
  const int config = static_cast<int>(a->config);
  const int G = Hq / Hkv;
  if (static_cast<long long>(T) * G > (1LL << 30))
    return fail("T x Hq / Hkv = %lld packed rows: at most 2^30", static_cast<long long>(T) * G);
  if (out_rows_overlap(B, T, Hq, Dv, a->o_b, a->o_t, a->o_h))
    return fail("out strides %lld %lld %lld make rows of [B=%d, T=%d, Hq=%d, %d] share memory", (long long)a->o_b,
                (long long)a->o_t, (long long)a->o_h, B, T, Hq, Dv);
  if (config == FMHA_CONFIG_LATENT_NARROW && static_cast<long long>(T) * G > config_shape(D, config).narrow_rows)
    return fail("config LATENT_NARROW serves at most %d packed rows, got T x Hq/Hkv = %lld",
                config_shape(D, config).narrow_rows, static_cast<long long>(T) * G);
  if (a->balanced != 0 && a->balanced != 1) return fail("balanced=%lld invalid (0 or 1)", (long long)a->balanced);
  if (a->balanced) {
    const size_t balanced_need = fmha_balanced_workspace_bytes(B, T, Hq, Hkv, Dv, num_splits);
    if (!balanced_config(config))
      return fail("balanced=1 needs config LATENT_NARROW (%d), LATENT_SEESAW64 (%d) or LATENT_SEESAW48 (%d), got "
                  "config=%d", FMHA_CONFIG_LATENT_NARROW, FMHA_CONFIG_LATENT_SEESAW64, FMHA_CONFIG_LATENT_SEESAW48,
                  config);
    if (a->workspace == 0 || misaligned(a->workspace) || a->workspace_bytes < balanced_need)
      return fail("workspace of %llu bytes%s: balanced=1 needs %zu, 16-byte aligned",
                  (unsigned long long)(a->workspace == 0 ? 0 : a->workspace_bytes),
                  a->workspace != 0 && misaligned(a->workspace) ? " misaligned" : " too small", balanced_need);
  }
  const bool pairs = config == FMHA_CONFIG_KV_HEAD_PAIRS;
  if (pairs) {
    const int max_rows = config_shape(D, config).narrow_rows;
    if (num_splits != 1) return fail("config KV_HEAD_PAIRS runs unsplit, got num_splits=%d", num_splits);
    if (Hkv % 2 != 0) return fail("config KV_HEAD_PAIRS needs an even Hkv, got Hkv=%d", Hkv);
    if (2LL * T * G > max_rows)
      return fail("config KV_HEAD_PAIRS serves at most %d packed rows a pair, got 2 x T x Hq/Hkv = %lld", max_rows,
                  2LL * T * G);
  }

  fmha::DecodeParams p{};
  p.q = reinterpret_cast<const void*>(a->q);
  p.out = reinterpret_cast<void*>(a->out);
  p.lse = reinterpret_cast<float*>(a->lse);
  p.seqlens = reinterpret_cast<const int*>(a->cache_seqlens);
  p.q_b = a->q_b; p.q_t = a->q_t; p.q_h = a->q_h;
  p.o_b = a->o_b; p.o_t = a->o_t; p.o_h = a->o_h;
  p.B = B; p.T = T; p.Hq = Hq; p.Hkv = Hkv; p.S = S; p.G = G;
  p.rows = T * G;
  p.num_splits = num_splits;
  p.qk_scale = softmax_scale * kLog2e;
  p.causal = a->causal != 0 && T > 1;
  p.head_dim_v = Dv;
  p.sinks = reinterpret_cast<const float*>(a->sinks);
  if ((a->sinks & 3u) != 0) return fail("sinks must be 4-byte aligned (float32)");
  if (pairs) {  // read the cache (or the pools) as D = 128 with Hkv / 2 heads (DecodeParams::head_pairs)
    if (kv.k_h != D || kv.v_h != D)
      return fail("config KV_HEAD_PAIRS needs the KV heads of a token side by side (head stride %d elements); "
                  "k_cache has %lld, v_cache %lld", D, (long long)kv.k_h, (long long)kv.v_h);
    p.head_pairs = 1;
    p.Hkv = Hkv / 2;
    p.rows = 2 * T * G;
    kv.k_h = kv.v_h = 2 * D;
  }
  if (paged) {
    p.block_table = reinterpret_cast<const int*>(a->block_table);
    p.block_table_stride = a->block_table_stride;
    p.page_size = map_s;
    p.num_blocks = map_b;
    p.max_blocks_per_seq = static_cast<int>(a->max_blocks_per_seq);
    p.k = kv.k;
    p.v = kv.v;
    p.k_blk = kv.k_b; p.k_tok = kv.k_s; p.k_h = kv.k_h;
    p.v_blk = kv.v_b; p.v_tok = kv.v_s; p.v_h = kv.v_h;
  }
  p.k_head_major = fmha::head_major_order(kv.k_s, kv.k_h, p.Hkv);
  p.v_head_major = fmha::head_major_order(kv.v_s, kv.v_h, p.Hkv);
  if (num_splits > 1 && a->workspace != 0) {  // required, sized and aligned where the launch merges by kernel
    p.o_partial = reinterpret_cast<float*>(a->workspace);
    p.lse_partial = p.o_partial + fmha::workspace_o_elems(B, T, Hq, Dv, num_splits);
  }
  if (a->balanced) {  // the launch may still run the static schedule (Instance::launch says where)
    p.balanced = 1;
    p.o_partial = reinterpret_cast<float*>(a->workspace);
    p.lse_partial = p.o_partial + fmha::workspace_o_elems(B, T, Hq, Dv, 2 * num_splits);
    const int64_t desc_offset = fmha::balanced_desc_offset_bytes(B, T, Hq, Dv, num_splits);
    p.balanced_desc = reinterpret_cast<int*>(a->workspace + desc_offset);
  }
  const size_t workspace_size = static_cast<size_t>(a->workspace_bytes);
  cudaStream_t st = reinterpret_cast<cudaStream_t>(a->stream);
  const bool bf16 = a->dtype == 1;
#if FMHA_TARGET_SM == 90
  if (pairs)
    return bf16 ? Instance<128, true, FMHA_CONFIG_STREAM>::launch(p, kv, workspace_size, st)
                : Instance<128, false, FMHA_CONFIG_STREAM>::launch(p, kv, workspace_size, st);
#endif
  // (D, config) were validated above, so with_instance finds the instantiation (-1 is unreachable).
  const int status = with_instance(D, config, -1, [&](auto d, auto c) {
    constexpr int kD = decltype(d)::value, kC = decltype(c)::value;
    return bf16 ? Instance<kD, true, kC>::launch(p, kv, workspace_size, st)
                : Instance<kD, false, kC>::launch(p, kv, workspace_size, st);
  });
  return status >= 0 ? status : fail("no decode kernel for D=%d config=%d", D, config);
}

}  // extern "C"
