// fmha: the host launch of the split-KV combine kernel (common/combine.cuh), one explicit instantiation
// per head dim and dtype (instantiations/combine.cu).
#pragma once

#include <cuda_runtime.h>

#include "params.h"

namespace fmha {

// Merges p.num_splits partials of p's workspace (p.balanced: the balanced schedule's pieces) into p.out and p.lse
// on `stream`, as a programmatic dependent of the kernel before it when `pdl`. 0 on success, else fail().
template <int D, bool kBf16>
int launch_combine(const DecodeParams& p, cudaStream_t stream, bool pdl);

}  // namespace fmha
