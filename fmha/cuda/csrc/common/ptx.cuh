// fmha: thin inline-PTX wrappers, one small function per PTX instruction.
//
// Each wrapper names the PTX ISA section that defines its instruction
// (PTX ISA 8.x/9.x, "Parallel Thread Execution ISA", NVIDIA). This header holds the
// instructions every supported architecture has (from sm_90 on: mbarriers, TMA, clusters,
// griddepcontrol), guarded by FMHA_SM90_BASE; each architecture's own (sm_90a's wgmma,
// sm_100a's tcgen05) live in its folder (sm90/ptx_sm90.cuh). Compiled for any other target the
// wrappers trap, so a wrong-arch build fails loudly instead of computing garbage.
#pragma once

#include <cstdint>

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define FMHA_SM90_BASE 1
#else
#define FMHA_SM90_BASE 0
#endif

#if defined(__CUDA_ARCH__)
#define FMHA_TRAP_UNSUPPORTED() __trap()
#else
#define FMHA_TRAP_UNSUPPORTED() ((void)0)
#endif

namespace fmha {
namespace ptx {

// Shared-window address of a generic pointer to shared memory (cvta.to.shared, PTX 9.7.9.22).
__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// ---------------------------------------------------------------------------
// mbarrier (PTX 9.7.13.15 "Parallel Synchronization and Communication
// Instructions: mbarrier")
// ---------------------------------------------------------------------------

// mbarrier.init (9.7.13.15.9): expected arrival count per phase.
__device__ __forceinline__ void mbarrier_init(uint64_t* bar, uint32_t count) {
#if FMHA_SM90_BASE
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(count) : "memory");
#else
  (void)bar; (void)count;
  FMHA_TRAP_UNSUPPORTED();
#endif
}

// fence.mbarrier_init (9.7.13.4 "membar/fence"): makes the inits visible to
// the async proxy (TMA complete_tx) and to other threads; follow with a CTA barrier.
__device__ __forceinline__ void fence_mbarrier_init() {
#if FMHA_SM90_BASE
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
#else
  FMHA_TRAP_UNSUPPORTED();
#endif
}

// mbarrier.arrive (9.7.13.15.13): one arrival, state discarded.
__device__ __forceinline__ void mbarrier_arrive(uint64_t* bar) {
#if FMHA_SM90_BASE
  asm volatile("mbarrier.arrive.release.cta.shared::cta.b64 _, [%0];\n" ::"r"(smem_addr(bar)) : "memory");
#else
  (void)bar;
  FMHA_TRAP_UNSUPPORTED();
#endif
}

// mbarrier.arrive.expect_tx (9.7.13.15.13 with .expect_tx, 9.7.13.15.11):
// one arrival that also raises the phase's transaction count by `bytes`.
__device__ __forceinline__ void mbarrier_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
#if FMHA_SM90_BASE
  asm volatile("mbarrier.arrive.expect_tx.release.cta.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_addr(bar)),
               "r"(bytes)
               : "memory");
#else
  (void)bar; (void)bytes;
  FMHA_TRAP_UNSUPPORTED();
#endif
}

// mbarrier.try_wait.parity (9.7.13.15.16): true once the phase with parity
// `parity` has completed (the barrier's current phase parity differs).
__device__ __forceinline__ bool mbarrier_try_wait_parity(uint64_t* bar, uint32_t parity) {
#if FMHA_SM90_BASE
  uint32_t done;
  asm volatile(
      "{\n.reg .pred p;\n"
      "mbarrier.try_wait.parity.acquire.cta.shared::cta.b64 p, [%1], %2;\n"
      "selp.u32 %0, 1, 0, p;\n}\n"
      : "=r"(done)
      : "r"(smem_addr(bar)), "r"(parity)
      : "memory");
  return done != 0;
#else
  (void)bar; (void)parity;
  FMHA_TRAP_UNSUPPORTED();
  return true;
#endif
}

// Spin on try_wait (which itself suspends for a hardware-chosen time).
__device__ __forceinline__ void mbarrier_wait_parity(uint64_t* bar, uint32_t parity) {
  while (!mbarrier_try_wait_parity(bar, parity)) {
  }
}

// ---------------------------------------------------------------------------
// Proxy fences and named barriers
// ---------------------------------------------------------------------------

// fence.proxy.async.shared::cta (9.7.13.4 "membar/fence", proxy fences):
// orders this thread's generic-proxy shared-memory writes before later
// async-proxy reads (wgmma operands, TMA stores).
__device__ __forceinline__ void fence_proxy_async_shared() {
#if FMHA_SM90_BASE
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#else
  FMHA_TRAP_UNSUPPORTED();
#endif
}

// bar.sync with a named barrier id and a thread count (9.7.13.1 "bar/barrier").
__device__ __forceinline__ void named_barrier_sync(uint32_t id, uint32_t num_threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(num_threads) : "memory");
}

// ---------------------------------------------------------------------------
// Thread-block clusters (sm_90+): the CTA's rank, the cluster barrier, and stores into another
// CTA's shared memory (distributed shared memory).
// ---------------------------------------------------------------------------

// %cluster_ctarank (PTX "Special Registers: %cluster_ctarank"): this CTA's rank in its cluster.
__device__ __forceinline__ uint32_t cluster_ctarank() {
  uint32_t r = 0;
#if FMHA_SM90_BASE
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
#else
  FMHA_TRAP_UNSUPPORTED();
#endif
  return r;
}

// barrier.cluster.arrive.release + barrier.cluster.wait.acquire (9.7.13.3 "barrier.cluster"):
// every thread of every CTA in the cluster arrives; shared-memory writes before the arrive are
// visible to the cluster's readers after the wait.
__device__ __forceinline__ void cluster_sync() {
#if FMHA_SM90_BASE
  asm volatile("barrier.cluster.arrive.release;\n" ::: "memory");
  asm volatile("barrier.cluster.wait.acquire;\n" ::: "memory");
#else
  FMHA_TRAP_UNSUPPORTED();
#endif
}

// mapa.shared::cluster (PTX "Data Movement and Conversion Instructions: mapa"): the address of the
// same shared-memory offset in the CTA of cluster rank `rank`.
__device__ __forceinline__ uint32_t map_shared_rank(uint32_t smem_address, uint32_t rank) {
  uint32_t r = 0;
#if FMHA_SM90_BASE
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(r) : "r"(smem_address), "r"(rank));
#else
  (void)smem_address; (void)rank;
  FMHA_TRAP_UNSUPPORTED();
#endif
  return r;
}

// stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 (PTX ISA 7.8+, "Warp-level matrix store instruction:
// stmatrix", sm_90): four 8x8 matrices of
// 16-bit elements, register j of each thread holding matrix j's elements (row lane / 4, columns
// 2 (lane % 4) and + 1; the lower column in the low half), stored transposed: lane 8 j + i gives the
// shared address of the 16 contiguous bytes that receive column i of matrix j.
__device__ __forceinline__ void stmatrix_x4_trans(uint32_t address, uint32_t r0, uint32_t r1, uint32_t r2,
                                                  uint32_t r3) {
#if FMHA_SM90_BASE
  asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(address), "r"(r0),
               "r"(r1), "r"(r2), "r"(r3)
               : "memory");
#else
  (void)address; (void)r0; (void)r1; (void)r2; (void)r3;
  FMHA_TRAP_UNSUPPORTED();
#endif
}

// st.shared::cluster (9.7.9.9 "st"): stores through a mapa address (another CTA's shared memory);
// visible to that CTA after a cluster barrier (arrive.release / wait.acquire).
__device__ __forceinline__ void st_shared_cluster_f32(uint32_t address, float x) {
#if FMHA_SM90_BASE
  asm volatile("st.shared::cluster.f32 [%0], %1;\n" ::"r"(address), "f"(x) : "memory");
#else
  (void)address; (void)x;
  FMHA_TRAP_UNSUPPORTED();
#endif
}
__device__ __forceinline__ void st_shared_cluster_v2f32(uint32_t address, float x, float y) {
#if FMHA_SM90_BASE
  asm volatile("st.shared::cluster.v2.f32 [%0], {%1, %2};\n" ::"r"(address), "f"(x), "f"(y) : "memory");
#else
  (void)address; (void)x; (void)y;
  FMHA_TRAP_UNSUPPORTED();
#endif
}

__device__ __forceinline__ void st_shared_cluster_v4f32(uint32_t address, float4 v) {
#if FMHA_SM90_BASE
  asm volatile("st.shared::cluster.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"r"(address), "f"(v.x), "f"(v.y), "f"(v.z),
               "f"(v.w)
               : "memory");
#else
  (void)address; (void)v;
  FMHA_TRAP_UNSUPPORTED();
#endif
}

// mbarrier.arrive.release.cluster.shared::cluster (9.7.13.15.13): arrive on an mbarrier in another CTA
// of the cluster (a mapa address); this thread's earlier writes, its stores into that CTA's shared
// memory included, are visible to a thread that then waits on the barrier with cluster-scope acquire.
__device__ __forceinline__ void mbarrier_arrive_remote_release_cluster(uint32_t remote_bar) {
#if FMHA_SM90_BASE
  asm volatile("mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0];\n" ::"r"(remote_bar) : "memory");
#else
  (void)remote_bar;
  FMHA_TRAP_UNSUPPORTED();
#endif
}

// mbarrier.try_wait.parity.acquire.cluster (9.7.13.15.16): as mbarrier_wait_parity, with cluster-scope
// acquire (the arrivals came from other CTAs of the cluster, with their stores).
__device__ __forceinline__ void mbarrier_wait_parity_acquire_cluster(uint64_t* bar, uint32_t parity) {
#if FMHA_SM90_BASE
  uint32_t done = 0;
  while (!done) {
    asm volatile(
        "{\n.reg .pred p;\n"
        "mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], %2;\n"
        "selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(smem_addr(bar)), "r"(parity)
        : "memory");
  }
#else
  (void)bar; (void)parity;
  FMHA_TRAP_UNSUPPORTED();
#endif
}

// ---------------------------------------------------------------------------
// Programmatic dependent launch (PTX 9.7.13.13 "griddepcontrol", sm_90+)
// ---------------------------------------------------------------------------

// griddepcontrol.launch_dependents: lets a grid launched after this one with
// the programmatic-stream-serialization attribute start once every CTA of this
// grid has issued it (or exited). No memory ordering is implied.
__device__ __forceinline__ void griddep_launch_dependents() {
#if FMHA_SM90_BASE
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

// griddepcontrol.wait: blocks until the grids this one depends on have
// completed and their memory operations are visible. A no-op when the grid
// was launched without a programmatic dependency.
__device__ __forceinline__ void griddep_wait() {
#if FMHA_SM90_BASE
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

// ---------------------------------------------------------------------------
// TMA (cp.async.bulk.tensor, PTX 9.7.9.25.5.1) and tensor-map prefetch
// ---------------------------------------------------------------------------

// prefetch.tensormap (9.7.9.15 "prefetch, prefetchu"): warm the descriptor.
__device__ __forceinline__ void prefetch_tensormap(const void* tmap) {
#if FMHA_SM90_BASE
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(tmap)) : "memory");
#else
  (void)tmap;
  FMHA_TRAP_UNSUPPORTED();
#endif
}

// createpolicy.fractional.L2::evict_first (9.7.9.17 "createpolicy"): an L2
// cache policy for data read once (streamed K/V).
__device__ __forceinline__ uint64_t create_policy_evict_first() {
#if FMHA_SM90_BASE
  uint64_t policy;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(policy));
  return policy;
#else
  FMHA_TRAP_UNSUPPORTED();
  return 0;
#endif
}

// cp.async.bulk.tensor.4d global -> shared, completion through an mbarrier's
// transaction count (9.7.9.25.5.1). Coordinates are element indices,
// innermost dimension first. Issued by one thread.
__device__ __forceinline__ void tma_load_4d(void* smem_dst, const void* tmap, uint64_t* bar, int c0, int c1,
                                            int c2, int c3) {
#if FMHA_SM90_BASE
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3, %4, %5}], [%6];\n" ::"r"(smem_addr(smem_dst)),
      "l"(reinterpret_cast<uint64_t>(tmap)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(smem_addr(bar))
      : "memory");
#else
  (void)smem_dst; (void)tmap; (void)bar; (void)c0; (void)c1; (void)c2; (void)c3;
  FMHA_TRAP_UNSUPPORTED();
#endif
}

// Same with .L2::cache_hint and a policy from createpolicy (9.7.9.25.5.1).
__device__ __forceinline__ void tma_load_4d_hint(void* smem_dst, const void* tmap, uint64_t* bar, int c0, int c1,
                                                 int c2, int c3, uint64_t policy) {
#if FMHA_SM90_BASE
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.L2::cache_hint"
      " [%0], [%1, {%2, %3, %4, %5}], [%6], %7;\n" ::"r"(smem_addr(smem_dst)),
      "l"(reinterpret_cast<uint64_t>(tmap)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(smem_addr(bar)),
      "l"(policy)
      : "memory");
#else
  (void)smem_dst; (void)tmap; (void)bar; (void)c0; (void)c1; (void)c2; (void)c3; (void)policy;
  FMHA_TRAP_UNSUPPORTED();
#endif
}

// ---------------------------------------------------------------------------
// Non-bulk asynchronous copies (cp.async, PTX 9.7.9.25.3), for gathers TMA cannot serve
// ---------------------------------------------------------------------------

// cp.async.cg.shared.global (9.7.9.25.3.1): 16 bytes global -> shared, bypassing L1; src_bytes = 0
// reads nothing and fills the 16 bytes with zeros.
__device__ __forceinline__ void cp_async_16(uint32_t smem_dst, const void* src, uint32_t src_bytes) {
#if FMHA_SM90_BASE
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_dst), "l"(src), "r"(src_bytes)
               : "memory");
#else
  (void)smem_dst; (void)src; (void)src_bytes;
  FMHA_TRAP_UNSUPPORTED();
#endif
}

// cp.async.mbarrier.arrive.noinc (9.7.9.25.3.5): one arrival on *bar once every cp.async this thread
// issued before it has completed; .noinc: the arrival counts against the barrier's expected count
// (initialise it with one per arriving thread). The thread does not wait.
__device__ __forceinline__ void cp_async_mbarrier_arrive_noinc(uint64_t* bar) {
#if FMHA_SM90_BASE
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(smem_addr(bar)) : "memory");
#else
  (void)bar;
  FMHA_TRAP_UNSUPPORTED();
#endif
}

// ---------------------------------------------------------------------------
// Register fences
// ---------------------------------------------------------------------------

// Keeps the compiler from moving reads/writes of an accumulator register
// across wgmma fence/commit/wait (they are asm volatile with a memory clobber,
// which does not cover registers).
__device__ __forceinline__ void reg_fence(float& r) { asm volatile("" : "+f"(r)::"memory"); }
__device__ __forceinline__ void reg_fence(uint32_t& r) { asm volatile("" : "+r"(r)::"memory"); }

}  // namespace ptx
}  // namespace fmha
