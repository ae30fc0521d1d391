#!/bin/bash
# Eighteenth session: the D = 128 kernel on the same bytes and grid a D = 64 head pair would give (a CTA reading
# 256 B of each token's row instead of 128 B): D=128 B16 Hq16 Hkv8 S8192 (128 CTAs) against D=64 B32 S8192.
export PYTHONPATH=. FMHA_CACHE_DIR=$PWD/.build/cache138
date -u; nvidia-smi --query-gpu=name,serial --format=csv,noheader
timeout 150 python perf/variants.py --rounds 6 --per-round --shape 32,1,32,8,8192,64 --shape 16,1,16,8,8192,128 \
  --shape 31,1,32,8,8192,64 --shape 16,1,16,8,7936,128 --shape 32,1,32,4,8192,128 --variant cuda= 2>&1 | grep -v "Warning\|return F.scaled" | cut -c1-900
date -u
