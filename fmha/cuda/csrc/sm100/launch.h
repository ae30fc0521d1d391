// fmha sm_100a: the host side of one kernel instantiation, declared for the C API (capi.cu) and defined
// in sm100/launch.cuh, which only the instantiation files (instantiations/sm100_*.cu) include.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "../common/decode_launch.h"
#include "../common/params.h"

namespace fmha {
namespace sm100 {

using KvCaches = ::fmha::KvCaches;  // common/decode_launch.h

template <int D, bool kBf16, int kConfig>
struct Instance {
  // Launches the decode kernel for p (and, where the splits merge through the workspace, the combine
  // kernel) on `stream`. 0 on success, else fail().
  static int launch(const DecodeParams& p, const KvCaches& kv, size_t workspace_size, cudaStream_t stream);
  // The ClusterMergeMode (params.h) of a split-KV launch of `clusters` x num_splits CTAs of `rows`
  // packed rows, launched exclusive (exclusive_sms) or not.
  static int merge_mode(int num_splits, long long clusters, int rows, bool exclusive);
  // How many clusters of `cluster` CTAs the current device holds at once (0: none, or the query failed).
  static int max_active_clusters(int cluster, bool exclusive);
  // Whether row blocks 2i and 2i + 1 launch as a cluster of two (sm90/launch.h): never on sm_100a.
  static bool pairs_row_blocks(int, long long, bool) { return false; }
  // Whether split partials are fp16 (sm90/launch.h): fp32 on sm_100a (traits.h).
  static bool half_partials() { return false; }
};

}  // namespace sm100
}  // namespace fmha
