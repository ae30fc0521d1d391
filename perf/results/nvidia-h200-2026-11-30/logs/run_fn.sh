#!/bin/bash
# Eighteenth session: the aggregate K/V rate over the call (probe), D=64 B32 and B31 S8192, and the D = 128 shape
# of the same bytes and grid as a D = 64 head pair (B16 Hq16 Hkv8): does the rate fall in the tail?
export PYTHONPATH=. FMHA_CACHE_DIR=$PWD/.build/cache138
date -u; nvidia-smi --query-gpu=name,serial --format=csv,noheader
for S in 32,1,32,8,8192,64 31,1,32,8,8192,64 16,1,16,8,8192,128; do
  timeout 60 python -W ignore perf/stream_probe.py --shape $S --repeat 4 2>&1 | grep -v "^  [KV] \|^-- pos"
done
date -u
