#!/bin/bash
# The epilogue without a 24-byte stack frame (PartialRow takes ClusterMerge by reference): every D != 512
# kernel's SASS changed by register allocation. CUDA tests, then every D <= 256 shape against run ay's
# library (runay), timed --sustained.
export PYTHONPATH=. FMHA_CACHE_DIR=$PWD/.build/cache53
date -u
timeout 150 python -m pytest -q -n 8 tests/test_cuda.py -p no:cacheprovider 2>&1 | tail -2
date -u
timeout 240 python -W ignore perf/variants.py --sustained --rounds 3 --only 0,1,2,3,4,5,6,7,8,11,12,13 --no-peers --variant head= \
  --lib runay=$PWD/.build/cache53/runay.so 2>&1 | grep -v Warn | sed 's/maxdiff \([0-9.e-]*\)/md=\1/g'
date -u
