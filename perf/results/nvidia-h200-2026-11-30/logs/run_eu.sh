#!/bin/bash
# Sixteenth session: the timing probe on D = 64 B32 S8192 (wide, 256 CTAs; 0.2-1.0% behind cuDNN in the
# suite): start-up, stream and tail over the grid, one call alone and the last of 8 back to back.
export PYTHONPATH=. FMHA_CACHE_DIR=$PWD/.build/cache124
date -u; nvidia-smi --query-gpu=name,serial,power.limit --format=csv,noheader
timeout 120 python -W ignore perf/stream_probe.py --shape 32,1,32,8,8192,64 2>&1 | tail -40
date -u
timeout 120 python -W ignore perf/stream_probe.py --shape 32,1,32,8,8192,64 --repeat 8 2>&1 | tail -40
date -u
