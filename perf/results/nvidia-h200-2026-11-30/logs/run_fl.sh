#!/bin/bash
# Eighteenth session: D=64 S8192 with each head's tokens contiguous (bhsd) against the default bshd (the heads
# of a token side by side): does the cache's layout set the per-CTA stream rates? Probe timelines by KV head.
export PYTHONPATH=. FMHA_CACHE_DIR=$PWD/.build/cache138
date -u; nvidia-smi --query-gpu=name,serial --format=csv,noheader
for L in bhsd bshd; do
timeout 100 python perf/variants.py --rounds 5 --kv-layout $L --shape 32,1,32,8,8192,64 --shape 31,1,32,8,8192,64 \
  --shape 33,1,32,8,8192,64 --variant cuda= 2>&1 | grep -v "Warning\|return F.scaled" | cut -c1-900
done
date -u
for L in bhsd bshd; do
  timeout 60 python -W ignore perf/stream_probe.py --kv-layout $L --shape 32,1,32,8,8192,64 --repeat 4 2>&1 | sed -n '/CTA timeline/,$p'
done
date -u
