#!/bin/bash
# Last-CTA split merge, run ct's T=16 loss (76.7 vs 68.6 us): more merge items in flight per thread (8 instead
# of 2; some spills, ptxas -v here) and one fence per CTA (thread 0, after the consumers' barrier, as CUTLASS's
# GenericBarrier does) instead of one per thread. comb = combine kernel, same sources.
export PYTHONPATH=. FMHA_CACHE_DIR=$PWD/.build/cache88
date -u; nvidia-smi --query-gpu=name,serial,power.limit --format=csv,noheader
timeout 400 python -W ignore perf/variants.py --sustained --rounds 7 --no-peers --variant comb=-DFMHA_SM90_LAST_SPLIT_MERGE=0 \
  --variant i8=-DFMHA_SM90_LSM_ITEMS=8 --variant i8f1="-DFMHA_SM90_LSM_ITEMS=8 -DFMHA_SM90_LSM_FENCE_ALL=0" \
  --only 6,2,3 2>&1 | grep -v Warn
date -u
