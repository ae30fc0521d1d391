#!/bin/bash
# Split Q K^T on by default at D=512: CUDA tests. ncu side by side with cuDNN on D=64 (4.5% behind it),
# and the split-KV shape's decode vs combine kernel times.
export PYTHONPATH=. FMHA_CACHE_DIR=$PWD/.build/cache12
date -u
timeout 150 python -m pytest -q -n 8 tests/test_cuda.py -x -p no:cacheprovider 2>&1 | tail -1
M=gpu__time_duration.sum,dram__bytes_read.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,lts__t_sector_hit_rate.pct,sm__cycles_elapsed.avg.per_second,launch__grid_size,launch__registers_per_thread,sm__warps_active.avg.pct_of_peak_sustained_active
for be in cuda sdpa-cudnn triton; do
  echo "=== ncu D=64 B32 S8192: $be"
  timeout 60 ncu --clock-control none --metrics $M -s 2 -c 3 python perf/ncu_probe.py --shape 32,1,32,8,8192,64 --iters 2 --backend $be 2>&1 | grep -E "^  [a-zA-Z_]|gpu__time|dram__|lts__|sm__|launch__" | cut -c1-140
done
echo "=== ncu B1 S65536 (split-KV): cuda"
timeout 60 ncu --clock-control none --metrics $M -s 2 -c 2 python perf/ncu_probe.py --shape 1,1,32,8,65536,128 --iters 2 2>&1 | grep -E "^  [a-zA-Z_]|gpu__time|dram__|sm__cycles|launch__grid" | cut -c1-140
date -u
