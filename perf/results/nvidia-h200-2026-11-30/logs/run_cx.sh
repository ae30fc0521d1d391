#!/bin/bash
# The last-CTA merge's 10 us on T=16 (run cw): lsm (default), comb (combine kernel), nomerge (the last CTA
# arrives but does not merge: wrong results, the cost of the arrival alone), plain (merge loads through L1:
# ld.global instead of ld.global.cg; an experiment, not a correct protocol).
export PYTHONPATH=. FMHA_CACHE_DIR=$PWD/.build/cache91
date -u
timeout 400 python -W ignore perf/variants.py --sustained --rounds 7 --no-peers --variant lsm= --variant comb=-DFMHA_SM90_LAST_SPLIT_MERGE=0 \
  --variant nomerge=-DFMHA_SM90_LSM_PROBE=1 --variant plain=-DFMHA_SM90_LSM_PROBE=2 --only 6,2 2>&1 | grep -v Warn
date -u
