#!/bin/bash
# Final check after the review fixes (K-stage arrive no longer sunk below the softmax; refactor).
export PYTHONPATH=. FMHA_CACHE_DIR=$PWD/.build/cache8
timeout 120 python -m pytest -q -n 8 tests/test_cuda.py tests/test_api.py -x -p no:cacheprovider 2>&1 | tail -1
timeout 90 python -W ignore perf/variants.py --rounds 3 --only 0,2,6,10 --variant base= --variant nosplitrel=-DFMHA_SM90_SPLIT_RELEASE=0 2>&1 | grep -v Warn | sed 's/maxdiff \([0-9.e-]*\)/md=\1/g'
