#!/bin/bash
# Run dg: why is cuda 12% slower than triton on B1 S8192 (run dc: 15.6 vs 13.7 us)? Forced launch plans
# (plan_probe.py), per-kernel durations under ncu (caches flushed), and the CTA timeline of the last of 20
# calls back to back (stream_probe.py).
export PYTHONPATH=. FMHA_CACHE_DIR=$PWD/.build/cache96
date -u; nvidia-smi --query-gpu=name,serial,power.limit --format=csv,noheader
timeout 240 python perf/results/nvidia-h200-2026-11-30/logs/plan_probe.py 5 2>&1 | tail -40
for be in cuda triton; do
  echo "== ncu $be B1 S8192"
  timeout 100 ncu --metrics gpu__time_duration.sum,dram__bytes_read.sum,sm__cycles_elapsed.avg.per_second -k regex:"decode|combine" \
    python perf/ncu_probe.py --shape 1,1,32,8,8192,128 --backend $be --iters 4 2>&1 | grep -E "decode|combine|duration|bytes_read|per_second" | tail -24
done
echo "== stream probe B1 S8192, last of 20 calls"
timeout 120 python perf/stream_probe.py --shape 1,1,32,8,8192,128 --repeat 20 2>&1 | tail -30
date -u
