#!/bin/bash
# Fourth session, first call: where do the split-KV shapes lose time? Stream-only probe (consumers
# release each stage on arrival), deep D=128 with 64-token tiles, ncu of decode + combine (ours vs Triton).
export PYTHONPATH=. FMHA_CACHE_DIR=$PWD/.build/cache20
date -u
timeout 240 python -W ignore perf/variants.py --rounds 3 --only 2,6,11,3,0 --variant base= --variant stream=-DFMHA_SM90_PROBE_STREAM_ONLY=1 --variant t64=-DFMHA_SM90_DEEP_D128_TILE_N=64 2>&1 | grep -v Warn | sed 's/maxdiff \([0-9.e-]*\)/md=\1/g'
M=gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,sm__cycles_elapsed.avg.per_second,launch__grid_size,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,sm__inst_issued.avg.pct_of_peak_sustained_active
for sh in 1,1,32,8,65536,128 8,16,32,8,8192,128; do
  c=""; [ $sh = 8,16,32,8,8192,128 ] && c=--causal
  for be in cuda triton; do
    echo "=== ncu $sh $be"
    timeout 60 ncu --clock-control none --metrics $M -s 2 -c 4 python perf/ncu_probe.py --shape $sh $c --iters 2 --backend $be 2>&1 | grep -E "^  [a-zA-Z_]|gpu__time|dram__|sm__|launch__" | cut -c1-130
  done
done
date -u
