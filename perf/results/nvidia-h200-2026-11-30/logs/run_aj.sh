#!/bin/bash
# Warp-uniform warpgroup index (descriptors in uniform registers) and the overlapped loop's wait placement
# (P V(it)'s wait no longer hoisted above the exponentials). CUDA tests, then every shape against run ai's
# head (descriptor advance only) in one process.
export PYTHONPATH=. FMHA_CACHE_DIR=$PWD/.build/cache35
date -u
timeout 150 python -m pytest -q -n 8 tests/test_cuda.py -p no:cacheprovider 2>&1 | tail -2
date -u
timeout 200 python -W ignore perf/variants.py --rounds 3 --no-peers --variant head= --lib ai=$(ls $PWD/.build/prev/libfmha_sm_90a_cbbdb31879dfb184_*.so) 2>&1 | grep -v Warn | sed 's/maxdiff \([0-9.e-]*\)/md=\1/g'
date -u
