// fmha sm_90a: the host side of one kernel instantiation, declared for the C API (capi.cu) and defined
// in sm90/launch.cuh, which only the instantiation files (instantiations/sm90_*.cu) include.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "../common/decode_launch.h"
#include "../common/params.h"

namespace fmha {
namespace sm90 {

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
  // Whether a launch of `row_blocks` row blocks a (KV head, sequence) in num_splits splits runs row blocks
  // 2i and 2i + 1 as a cluster of two, launched exclusive (exclusive_sms) or not.
  static bool pairs_row_blocks(int num_splits, long long row_blocks, bool exclusive);
  // Whether a launch whose partials a combine kernel merges (split partials or balanced pieces) leaves them in the
  // workspace as fp16 (DecodeParams::partials_f16) rather than fp32.
  static bool half_partials();
  // Whether a launch of `ctas` CTAs that asks for the balanced schedule (DecodeParams::balanced) deals its tiles
  // by cache length, given whether it has the lengths, reads Q by TMA and gathers its pages; where it does not,
  // it runs the static schedule. q_tma: as the launch sets DecodeParams::q_tma; q_box_tma(G) answers
  // it for a Q whose strides and base allow TMA.
  static bool deals_tiles(int B, int Hkv, int S, long long ctas, bool has_seqlens, bool q_tma, bool gather);
  static bool q_box_tma(int G);
};

}  // namespace sm90
}  // namespace fmha
