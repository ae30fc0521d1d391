// fmha: the timing probe's C functions (fmha_capi.h). Compiled only into the probe build, which is one
// translation unit (probe/unity.cu) so that every kernel writes the one g_probe_stamps buffer read here.
#include <cuda_runtime.h>

#include "../common/host.h"
#include "../common/probe.cuh"
#include "../fmha_capi.h"

#if !FMHA_PROBE
#error "probe_capi.cu belongs to the probe build (FMHA_PROBE=1)"
#endif

extern "C" {

int fmha_probe_layout(int* ctas, int* tiles, int* events) {
  if (!ctas || !tiles || !events) return fmha::fail("fmha_probe_layout: null argument");
  *ctas = fmha::kProbeCtas;
  *tiles = fmha::kProbeTiles;
  *events = fmha::kProbeEvents;
  return 0;
}

int fmha_probe_read(void* host_dst, size_t bytes, int clear) {
  using fmha::g_probe_stamps;
  if (host_dst != nullptr) {
    if (bytes != sizeof(g_probe_stamps))
      return fmha::fail("fmha_probe_read: %zu bytes asked, the stamps take %zu", bytes, sizeof(g_probe_stamps));
    if (fmha::check_cuda(cudaMemcpyFromSymbol(host_dst, g_probe_stamps, bytes), "cudaMemcpyFromSymbol(probe stamps)"))
      return 1;
  }
  if (clear) {
    void* addr = nullptr;
    if (fmha::check_cuda(cudaGetSymbolAddress(&addr, g_probe_stamps), "cudaGetSymbolAddress(probe stamps)")) return 1;
    if (fmha::check_cuda(cudaMemset(addr, 0, sizeof(g_probe_stamps)), "cudaMemset(probe stamps)")) return 1;
  }
  return 0;
}

}  // extern "C"
