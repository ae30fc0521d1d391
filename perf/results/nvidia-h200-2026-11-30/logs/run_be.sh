#!/bin/bash
# One merge step (SplitMerge, common/combine.cuh) shared by the combine kernel and the in-cluster merge:
# CUDA tests, both sanitizers, then the split-KV shapes (and one unsplit) against run bd's library, sustained.
export PYTHONPATH=. FMHA_CACHE_DIR=$PWD/.build/cache54
date -u
timeout 100 python -m pytest -q -n 8 tests/test_cuda.py -p no:cacheprovider 2>&1 | tail -1
timeout 45 compute-sanitizer --tool memcheck python tests/sanitize_subset.py 2>&1 | tail -1
timeout 45 compute-sanitizer --tool racecheck python tests/sanitize_subset.py 2>&1 | tail -1
date -u
timeout 80 python -W ignore perf/variants.py --sustained --rounds 3 --only 2,3,4,6,13,1 --no-peers --variant head= \
  --lib runbd=$PWD/.build/cache54/runbd.so 2>&1 | grep -v Warn | sed 's/maxdiff \([0-9.e-]*\)/md=\1/g'
date -u
