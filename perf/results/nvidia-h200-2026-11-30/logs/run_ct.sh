#!/bin/bash
# Split-KV merge by the last CTA of each row block (merge counters, no combine kernel): tests of the new
# path, then interleaved A/B: lsm = the new default library, comb = the same sources with
# -DFMHA_SM90_LAST_SPLIT_MERGE=0 (combine kernel), head = the library of run cs (commit c89ab92).
export PYTHONPATH=. FMHA_CACHE_DIR=$PWD/.build/cache87
date -u; nvidia-smi --query-gpu=name,serial,power.limit --format=csv,noheader
timeout 200 python -m pytest -q -n 8 tests/test_cuda.py -k "last_split or merge_counters or combine or variant or deep_64 or deterministic or graph or forced_split or cluster" 2>&1 | tail -15
date -u
timeout 330 python -W ignore perf/variants.py --sustained --rounds 7 --no-peers --variant lsm= \
  --variant comb=-DFMHA_SM90_LAST_SPLIT_MERGE=0 --lib head=.build/cache86/libfmha_sm_90a_67cc6ecabb6d3ce1_ba1db6eb.so \
  --only 2,6,3,11,4 2>&1 | grep -v Warn
date -u
