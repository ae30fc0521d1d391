#!/bin/bash
# Skipping O *= alpha when no row of a warp changed its max, at D = 128 too (-DFMHA_SM90_SKIP_UNIT_RESCALE_MIN_D=128;
# default 256): less work per tile on the 64-row loop at the power cap (T=16)? head = the final library.
export PYTHONPATH=. FMHA_CACHE_DIR=$PWD/.build/cache85
date -u; nvidia-smi --query-gpu=name,serial --format=csv,noheader
timeout 300 python -W ignore perf/variants.py --sustained --rounds 7 --no-peers --variant head= \
  --variant skip128=-DFMHA_SM90_SKIP_UNIT_RESCALE_MIN_D=128 --only 6,5,1,0 2>&1 | grep -v Warn
date -u
