// fmha: the probe build as one translation unit (the kernels and the probe's C functions share one
// g_probe_stamps buffer). The loader compiles it with -DFMHA_PROBE=1 and a probe mode.
#include "../capi.cu"
#include "../common/host.cu"
#include "../instantiations/all.inc"
#include "probe_capi.cu"
