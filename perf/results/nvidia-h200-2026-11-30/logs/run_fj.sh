#!/bin/bash
# Eighteenth session: is D=64 B32 S8192's gap to cuDNN the grid's imbalance (256 CTAs on 264 slots, 2 a SM)?
# B33 fills every slot; @splits=2 is the existing 2-split grid + combine kernel. Then the probe's timelines.
export PYTHONPATH=. FMHA_CACHE_DIR=$PWD/.build/cache138
date -u; nvidia-smi --query-gpu=name,serial --format=csv,noheader
timeout 150 python perf/variants.py --rounds 8 --per-round --shape 32,1,32,8,8192,64 --shape 33,1,32,8,8192,64 \
  --shape 31,1,32,8,8192,64 --variant cuda= --variant split2="@splits=2" 2>&1 | grep -v "Warning\|return F.scaled" | cut -c1-900
date -u
for B in 32 33; do
  timeout 60 python -W ignore perf/stream_probe.py --shape $B,1,32,8,8192,64 --repeat 4 2>&1 | sed -n '/CTA timeline/,$p'
done
date -u
