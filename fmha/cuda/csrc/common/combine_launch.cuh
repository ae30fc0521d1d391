// fmha: definition of launch_combine (common/combine_launch.h); included by its instantiations only.
#pragma once

#include "combine.cuh"
#include "combine_launch.h"
#include "host.h"

namespace fmha {

template <int D, bool kBf16>
int launch_combine(const DecodeParams& p, cudaStream_t stream, bool pdl) {
  const long long rows = static_cast<long long>(p.B) * p.T * p.Hq;
  const bool few_splits = p.num_splits <= 4;  // the splits kernel's chunk, which sets its rows a CTA
  const int rows_per_cta = kCombineThreads / (few_splits ? combine_lanes<D, 4>() : combine_lanes<D, 16>());
  const long long ctas = (rows + rows_per_cta - 1) / rows_per_cta;
  if (ctas > 0x7fffffffLL) return fail("combine grid too large (%lld CTAs)", ctas);
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(static_cast<unsigned>(ctas));
  cfg.blockDim = dim3(kCombineThreads);
  cfg.dynamicSmemBytes = 0;
  cfg.stream = stream;
  cfg.attrs = attr;
  cfg.numAttrs = pdl ? 1 : 0;
  // The balanced schedule's pieces (the shared latent's, D_v = 512) by their own kernel; splits merged 4 at a time
  // up to 4 splits (a grid of many rows keeps its occupancy), else 16.
  if constexpr (D == 512) {
    if (p.balanced) {  // (grid: units x row blocks; B <= 4096, the launch checked)
      constexpr int kLanes = 64, kRowsPerCta = kCombineThreads / kLanes;  // (combine_balanced_kernel)
      const bool by_row = p.num_splits > 1;  // units split by the plan: many pieces, a row a CTA
      cfg.gridDim = dim3(static_cast<unsigned>(p.B * p.Hkv),
                         static_cast<unsigned>(by_row ? p.rows : (p.rows + kRowsPerCta - 1) / kRowsPerCta));
      if constexpr (kBf16) {
        if (p.partials_f16) {  // fp16 pieces
          const cudaError_t e = by_row ? cudaLaunchKernelEx(&cfg, combine_balanced_half_kernel<kBf16, D / 4>, p)
                                       : cudaLaunchKernelEx(&cfg, combine_balanced_half_kernel<kBf16, kLanes>, p);
          return check_cuda(e, "combine kernel launch");
        }
      }
      const cudaError_t e = by_row ? cudaLaunchKernelEx(&cfg, combine_balanced_kernel<D, kBf16, D / 4>, p)
                                   : cudaLaunchKernelEx(&cfg, combine_balanced_kernel<D, kBf16, kLanes>, p);
      return check_cuda(e, "combine kernel launch");
    }
    if constexpr (kBf16) {
      if (p.partials_f16) {  // (four rows a CTA)
        cfg.gridDim = dim3(static_cast<unsigned>((rows + 3) / 4));
        return check_cuda(cudaLaunchKernelEx(&cfg, combine_half_splits_kernel<kBf16>, p), "combine kernel launch");
      }
    }
  }
  const cudaError_t e = few_splits ? cudaLaunchKernelEx(&cfg, combine_splits_kernel<D, kBf16, 4>, p)
                                    : cudaLaunchKernelEx(&cfg, combine_splits_kernel<D, kBf16, 16>, p);
  return check_cuda(e, "combine kernel launch");
}

}  // namespace fmha
