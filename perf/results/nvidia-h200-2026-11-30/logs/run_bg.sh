#!/bin/bash
# Split-KV partials merged by the last CTA of each group (FMHA_SM90_LAST_SPLIT_MERGE=1, new default):
# CUDA tests, test_cluster_merge alone (the fixed helper), both sanitizers, then the split shapes
# interleaved, sustained: head (last-split merge) vs lsm0 (combine kernel, as before) vs lsm2 (last-split
# merge also where clusters would merge) vs run bd's library.
export PYTHONPATH=. FMHA_CACHE_DIR=$PWD/.build/cache56
date -u; nvidia-smi --query-gpu=name,serial,power.limit --format=csv,noheader
timeout 150 python -m pytest -q -n 8 tests/test_cuda.py tests/test_api.py -p no:cacheprovider 2>&1 | tail -3
timeout 60 python -m pytest -q tests/test_cuda.py -k "cluster_merge or each_kernel_variant or determinis" -p no:cacheprovider 2>&1 | tail -2
timeout 90 compute-sanitizer --tool memcheck python tests/sanitize_subset.py 2>&1 | tail -1
timeout 90 compute-sanitizer --tool racecheck python tests/sanitize_subset.py 2>&1 | tail -1
timeout 90 compute-sanitizer --tool synccheck python tests/sanitize_subset.py 2>&1 | tail -1
date -u
timeout 200 python -W ignore perf/variants.py --sustained --rounds 5 --only 2,3,4,6,11,13,1 --variant head= \
  --variant lsm0=-DFMHA_SM90_LAST_SPLIT_MERGE=0 --variant lsm2=-DFMHA_SM90_LAST_SPLIT_MERGE=2 \
  --lib runbd=$PWD/.build/cache56/runbd.so 2>&1 | grep -v Warn | sed 's/maxdiff \([0-9.e-]*\)/md=\1/g'
date -u
