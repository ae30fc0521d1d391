#!/bin/bash
# Eighteenth session: D=64 B31/B32 S8192 in more splits (the block scheduler as a dynamic schedule; combine kernel).
export PYTHONPATH=. FMHA_CACHE_DIR=$PWD/.build/cache138
date -u; nvidia-smi --query-gpu=name,serial --format=csv,noheader
timeout 200 python perf/variants.py --rounds 6 --per-round --shape 32,1,32,8,8192,64 --shape 31,1,32,8,8192,64 \
  --variant cuda= --variant split4="@splits=4" --variant split8="@splits=8" --variant split16="@splits=16" \
  --variant deep8="@deep @splits=8" 2>&1 | grep -v "Warning\|return F.scaled" | cut -c1-1200
date -u
timeout 100 python perf/variants.py --rounds 6 --sustained --shape 32,1,32,8,8192,64 \
  --variant cuda= --variant split8="@splits=8" 2>&1 | grep -v "Warning\|return F.scaled" | cut -c1-1200
date -u
