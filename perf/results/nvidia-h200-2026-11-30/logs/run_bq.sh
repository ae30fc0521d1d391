#!/bin/bash
# Combine kernel: the row's (b, t, hq) from 32-bit divisions (three 64-bit division subroutine calls stood
# ahead of its first load; ncu: our combine 3.4-4.0 us vs Triton's 2.4-3.0, runs bn, bo). CUDA tests that
# go through the combine kernel, then the split-KV shapes against run bl's library (prev), sustained.
export PYTHONPATH=. FMHA_CACHE_DIR=$PWD/.build/cache61
date -u
timeout 90 python -m pytest -q -n 8 tests/test_cuda.py -p no:cacheprovider -k "variant or split or matches or determin or graph or lse" 2>&1 | tail -1
timeout 80 python -W ignore perf/variants.py --sustained --rounds 5 --only 2,3,6 --no-peers --variant head= \
  --lib prev=$PWD/.build/cache61/prev.so 2>&1 | grep -v Warn | sed 's/maxdiff \([0-9.e-]*\)/md=\1/g'
date -u
