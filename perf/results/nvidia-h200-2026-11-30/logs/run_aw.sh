#!/bin/bash
# ncu kernel durations: T=16 with the in-cluster merge (cm64) vs the combine kernel (head); the Triton
# backend's kernels on the B1 shapes beside ours (it times 1 us faster there, run av).
export PYTHONPATH=. FMHA_CACHE_DIR=$PWD/.build/cache47
M=gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,dram__bytes_read.sum,launch__cluster_dim_x,sm__warps_active.avg.pct_of_peak_sustained_active
run() { timeout 100 ncu --clock-control none --metrics $M "$@" 2>&1 | grep -E "^  [a-z_]|duration|dram__|cluster|warps_active" | sed 's/(CUtensorMap_st, CUtensorMap_st, DecodeParams)//' | cut -c1-150 | tail -12; }
date -u
echo "== T=16 head"; run python perf/ncu_probe.py --shape 8,16,32,8,8192,128 --causal --iters 1
echo "== T=16 cm64"; FMHA_NVCC_FLAGS=-DFMHA_SM90_CLUSTER_MERGE_MAX_ROWS=64 run python perf/ncu_probe.py --shape 8,16,32,8,8192,128 --causal --iters 1
echo "== T=16 triton"; run python perf/ncu_probe.py --shape 8,16,32,8,8192,128 --causal --iters 1 --backend triton
echo "== B1 S65536 triton"; run python perf/ncu_probe.py --shape 1,1,32,8,65536,128 --iters 1 --backend triton
echo "== B1 S8192 head"; run python perf/ncu_probe.py --shape 1,1,32,8,8192,128 --iters 1
echo "== B1 S8192 triton"; run python perf/ncu_probe.py --shape 1,1,32,8,8192,128 --iters 1 --backend triton
date -u
