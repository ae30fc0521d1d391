#!/bin/bash
# Fourteenth session: D = 64 with 64-token tiles (cache112: FMHA_SM90_D64_TILE_N=64, both D = 64 instantiations; the
# wide one then holds 32 KB of K/V a CTA, 64 KB an SM at two CTAs) against the final library (cache111), where cuDNN
# still leads on D=64 B32 S8192 (256 CTAs, wide: 128 KB an SM) by 0.1-1%; plus D = 64 split shapes (deep). 5 rounds,
# back to back, with the peers.
export PYTHONPATH=. FMHA_CACHE_DIR=$PWD/.build/cache111
date -u; nvidia-smi --query-gpu=name,serial --format=csv,noheader
timeout 250 python -W ignore perf/variants.py --sustained --rounds 5 \
  --lib base=.build/cache111/libfmha_sm_90a_9be9b751c7e4a3ab_ba1db6eb.so --lib d64t64=.build/cache112/libfmha_sm_90a_8b4a5e82050858a1_ba1db6eb.so \
  --shape 32,1,32,8,8192,64 --shape 64,1,32,8,8192,64 --shape 16,1,32,8,65536,64 --shape 1,1,32,8,65536,64 --shape 4,1,32,8,512,64 2>&1 | grep -v Warn
date -u
