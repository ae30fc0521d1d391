#!/bin/bash
# Fourteenth session: run eb's finding (B16 S32768: a 64 KB K/V ring, t64s2, 471.9 us against 480.1 with the 192 KB
# ring and cuDNN's 475.8; much slower on the split shapes) on more unsplit grids of 106-132 CTAs (deep, one CTA per
# SM), against the wide instantiation forced (@wide: 64-token tiles, two stages, 64 KB a CTA, the 64-row loop).
# 5 rounds, back to back, with the peers. base = cache106 (this commit's kernels), t64s2 = cache110.
export PYTHONPATH=. FMHA_CACHE_DIR=$PWD/.build/cache106
date -u; nvidia-smi --query-gpu=name,serial --format=csv,noheader
V="--lib base=.build/cache106/libfmha_sm_90a_d7a5d0392c674b5c_ba1db6eb.so
 --lib t64s2=.build/cache110/libfmha_sm_90a_d616915ad0996669_ba1db6eb.so --variant wide=@wide"
timeout 500 python -W ignore perf/variants.py --sustained --rounds 5 $V --shape 16,1,32,8,32768,128 \
  --shape 16,1,32,8,16384,128 --shape 16,1,32,8,65536,128 --shape 16,4,32,8,32768,128 --shape 16,1,32,8,65536,64 \
  --shape 16,1,16,8,16384,256 --shape 128,1,32,1,8192,128 2>&1 | grep -v Warn
date -u
