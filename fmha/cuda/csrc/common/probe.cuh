// fmha: the timing probe. Compiled in only by the probe build (python -m fmha.cuda.build --probe ...,
// which defines FMHA_PROBE=1); in the product library every function here is empty and no stamp, timer
// read or probe buffer reaches the SASS. tools/stream_probe.py reads the stamps through
// fmha_probe_layout / fmha_probe_read (csrc/probe/probe_capi.cu).
//
// Probe modes (probe build only; wrong results by design, for timing one part alone):
//   FMHA_PROBE_STREAM_ONLY=1  consumers release each stage as soon as it lands (no MMA, no softmax)
//   FMHA_PROBE_NO_COMBINE=1   split-KV partials are not merged
#pragma once

#include <cstdint>

#include "ptx.cuh"

#ifndef FMHA_PROBE
#define FMHA_PROBE 0
#endif
#ifndef FMHA_PROBE_STREAM_ONLY
#define FMHA_PROBE_STREAM_ONLY 0
#endif
#ifndef FMHA_PROBE_NO_COMBINE
#define FMHA_PROBE_NO_COMBINE 0
#endif
#if !FMHA_PROBE && (FMHA_PROBE_STREAM_ONLY || FMHA_PROBE_NO_COMBINE)
#error "FMHA_PROBE_STREAM_ONLY and FMHA_PROBE_NO_COMBINE are probe-build modes (FMHA_PROBE=1)"
#endif

namespace fmha {

constexpr bool kProbeNoCombine = FMHA_PROBE_NO_COMBINE;

// Stamps: for the first kProbeTiles ring positions of the first kProbeCtas CTAs (linear block index),
// the SM clock (clock64: one SM's counter, so only stamps of one
// CTA compare) when the producer lane starts waiting for a free stage and when it has issued the tile's
// TMA, and when consumer thread 0 starts waiting for the tile and has it. tools/stream_probe.py reads
// them (fmha_probe_read) and prints where a tile's time goes. The row after the ring positions is the CTA's timeline in %globaltimer nanoseconds (one clock for the whole GPU, so CTAs
// compare): entry, past griddepcontrol.wait, first K tile in, last V tile in, end, and the SM (%smid);
// then the 64-key seesaw's loop end per warpgroup and warpgroup 1's epilogue end (thread 128).
// consumer_loop_overlapped (the 64-row loop) also stamps its phases, filed under the iteration `it`: its
// operands waited for, wgmmas issued (Q K^T(it+1) and P V(it); Q K^T(it+1) alone with two consumer warpgroups),
// Q K^T(it+1) landed (consumer thread 0, and thread 128 of a second warpgroup), scores exchanged, softmax
// done, P V(it) landed.
enum ProbeEvent : int {
  kProbeKEmptyWait = 0, kProbeKIssued, kProbeVEmptyWait, kProbeVIssued,
  kProbeKFullWait, kProbeKFull, kProbeVFullWait, kProbeVFull,
  kProbeLoopIssued, kProbeQkLanded, kProbeQkLandedWg1, kProbeExchanged, kProbeSoftmaxDone, kProbePvLanded,
  kProbeOperandsReady,
  // The balanced schedule's visits, filed under the ring position of the visit's first tile: its Q load issued
  // (the producer, past q_empty), its Q landed, its epilogue begun and ended (consumer thread 0; 64-key seesaw).
  kProbeVisitQIssued, kProbeVisitQLanded, kProbeVisitEpilogue, kProbeVisitEnd,
  kProbeEvents
};
enum ProbeTimeline : int { kTimelineEntry = 0, kTimelineGridDep, kTimelineFirstK, kTimelineLastV, kTimelineEnd, kTimelineSmId,
                           kTimelineLoopDone, kTimelineLoopDoneWg1, kTimelineEpilogueDoneWg1 };
static_assert(static_cast<int>(kTimelineEpilogueDoneWg1) < static_cast<int>(kProbeEvents), "the timeline row holds kProbeEvents stamps");
constexpr int kProbeCtas = 256;
#ifndef FMHA_PROBE_RING_TILES  // ring positions stamped (more for CTAs that stream more tiles)
#define FMHA_PROBE_RING_TILES 64
#endif
#ifndef FMHA_PROBE_GLOBAL_TIMER  // 1: the ring stamps in %globaltimer ns instead of SM cycles, so that CTAs compare
#define FMHA_PROBE_GLOBAL_TIMER 0
#endif
constexpr int kProbeRingTiles = FMHA_PROBE_RING_TILES;
constexpr int kProbeTiles = kProbeRingTiles + 1;  // + the timeline row
#if FMHA_PROBE
__device__ unsigned long long g_probe_stamps[kProbeCtas * kProbeTiles * kProbeEvents];
#endif

#if FMHA_PROBE
namespace ptx {
// %globaltimer (PTX ISA, Special Registers: %globaltimer): a nanosecond timer common to the whole GPU
// (unlike clock64, one SM's cycle counter). Used by the timing probe only.
__device__ __forceinline__ uint64_t global_timer() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;\n" : "=l"(t));
  return t;
}

// %smid (PTX ISA, Special Registers: %smid): the SM this thread runs on (may change only across
// preemption). Used by the timing probe only.
__device__ __forceinline__ uint32_t sm_id() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%smid;\n" : "=r"(r));
  return r;
}

}  // namespace ptx

// The linear block index the probe files a CTA's stamps under.
__device__ __forceinline__ unsigned probe_cta() {
  return blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
}
#endif

// A no-op unless the probe is compiled in.
__device__ __forceinline__ void probe_stamp(int it, int event) {
#if FMHA_PROBE
  const unsigned cta = probe_cta();
  if (cta < kProbeCtas && it < kProbeRingTiles)
    g_probe_stamps[(cta * kProbeTiles + it) * kProbeEvents + event] =
        FMHA_PROBE_GLOBAL_TIMER ? ptx::global_timer() : static_cast<unsigned long long>(clock64());
#else
  (void)it;
  (void)event;
#endif
}

// A CTA timeline stamp (%globaltimer) under the probe, from the thread that calls it; a no-op without it.
__device__ __forceinline__ void probe_timeline(int event) {
#if FMHA_PROBE
  const unsigned cta = probe_cta();
  if (cta < kProbeCtas)
    g_probe_stamps[(cta * kProbeTiles + kProbeRingTiles) * kProbeEvents + event] =
        event == kTimelineSmId ? ptx::sm_id() : ptx::global_timer();
#else
  (void)event;
#endif
}

}  // namespace fmha
