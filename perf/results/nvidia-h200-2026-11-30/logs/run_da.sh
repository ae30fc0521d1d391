#!/bin/bash
# Split-KV merge in the last CTA of a row block, second design (run cz: the first one's merge was ~6000
# dependent instructions a warp): the 64-row loop only, at most 4 splits; the last split to finish writes no
# partial, waits for the others' (a second counter), and merges them with its own registers in split order.
# Targeted tests, then interleaved A/B: lsm2 = default, comb = same sources with the combine kernel, head = run
# cs's library.
export PYTHONPATH=. FMHA_CACHE_DIR=$PWD/.build/cache92
date -u; nvidia-smi --query-gpu=name,serial --format=csv,noheader
timeout 200 python -m pytest -q -n 8 tests/test_cuda.py -k "last_split or merge_counters or combine or variant or deep_64 or deterministic or graph or forced_split or cluster" 2>&1 | tail -4
date -u
timeout 300 python -W ignore perf/variants.py --sustained --rounds 7 --no-peers --variant lsm2= \
  --variant comb=-DFMHA_SM90_LAST_SPLIT_MERGE=0 --lib head=.build/cache86/libfmha_sm_90a_67cc6ecabb6d3ce1_ba1db6eb.so \
  --only 6,2,5 2>&1 | grep -v Warn
date -u
