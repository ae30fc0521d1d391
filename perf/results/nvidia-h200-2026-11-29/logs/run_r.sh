#!/bin/bash
# Clocks and power under steady load (eager loop, 3 s each): final kernels against the peers on the missed shapes.
export PYTHONPATH=. FMHA_CACHE_DIR=$PWD/.build/cache14
date -u
for spec in "64,1,128,1,4096,512 cuda" "64,1,128,1,4096,512 triton" "1,1,32,8,65536,128 cuda" "1,1,32,8,65536,128 triton" "1,1,32,8,65536,128 sdpa-cudnn" "32,1,32,8,8192,64 cuda" "32,1,32,8,8192,64 triton" "32,1,32,8,8192,64 sdpa-cudnn"; do
  set -- $spec
  timeout 40 python perf/ncu_probe.py --shape $1 --backend $2 --iters 1 --clocks --seconds 3 2>&1 | tail -1
done
date -u
