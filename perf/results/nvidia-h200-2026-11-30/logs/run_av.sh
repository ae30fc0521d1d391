#!/bin/bash
# Split-KV shapes, timed --sustained: head vs the in-cluster merge allowed up to 64 rows (cm64: T=16)
# vs 64-token tiles on the deep D=128 instantiation (t64, 6 stages), beside triton and cuDNN.
export PYTHONPATH=. FMHA_CACHE_DIR=$PWD/.build/cache47
date -u
timeout 200 python -W ignore perf/variants.py --sustained --rounds 5 --only 6,2,3,13,4 --per-round --variant head= \
  --variant cm64=-DFMHA_SM90_CLUSTER_MERGE_MAX_ROWS=64 --variant t64=-DFMHA_SM90_DEEP_D128_TILE_N=64 2>&1 | grep -v Warn | sed 's/maxdiff \([0-9.e-]*\)/md=\1/g'
date -u
