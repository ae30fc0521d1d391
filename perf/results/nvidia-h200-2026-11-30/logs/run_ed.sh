#!/bin/bash
# Fourteenth session: is run ec's gain of the 64 KB ring (t64s2: D = 128 deep kernel 156 registers, ~97 KB of shared
# memory, so two CTAs fit an SM) the kernel's own stream, or the next call's CTAs made resident early by PDL? (1) the
# same shapes with a one-element add after every call (--separate: no overlap of consecutive calls); (2) ncu of
# the kernel alone (caches flushed, kernels serialised), base against t64s2, B16 S32768.
export PYTHONPATH=. FMHA_CACHE_DIR=$PWD/.build/cache106
date -u; nvidia-smi --query-gpu=name,serial --format=csv,noheader
V="--lib base=.build/cache106/libfmha_sm_90a_d7a5d0392c674b5c_ba1db6eb.so
 --lib t64s2=.build/cache110/libfmha_sm_90a_d616915ad0996669_ba1db6eb.so"
timeout 300 python -W ignore perf/variants.py --sustained --separate --rounds 5 $V --shape 16,1,32,8,32768,128 \
  --shape 16,1,32,8,65536,128 --shape 16,1,32,8,65536,64 2>&1 | grep -v Warn
M="gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,launch__registers_per_thread,launch__shared_mem_per_block_dynamic,launch__occupancy_limit_shared_mem,launch__occupancy_limit_registers"
for lib in cache106 cache110; do
  f=$(ls .build/$lib/libfmha_sm_90a_*.so | head -1); [ $lib = cache110 ] && f=.build/cache110/libfmha_sm_90a_d616915ad0996669_ba1db6eb.so
  echo "== $lib $f"
  FMHA_CACHE_DIR=$PWD/.build/$lib FMHA_NVCC_FLAGS="$([ $lib = cache110 ] && echo -DFMHA_SM90_DEEP_D128_TILE_N=64 -DFMHA_SM90_DEEP_SMALL_D_STAGES=2)" \
    timeout 100 ncu --metrics $M -k regex:decode_kernel python perf/ncu_probe.py --shape 16,1,32,8,32768,128 --iters 2 2>&1 \
    | grep -E "decode_kernel|duration|throughput|registers|shared_mem|occupancy" | head -24
done
date -u
