#!/bin/bash
# Softmax: skip the per-element key mask on tiles every key of which is visible (FMHA_MASK_EDGE_TILES_ONLY).
export PYTHONPATH=. FMHA_CACHE_DIR=$PWD/.build/cache13
date -u
timeout 150 python -m pytest -q -n 8 tests/test_cuda.py -x -p no:cacheprovider 2>&1 | tail -1
timeout 300 python -W ignore perf/variants.py --rounds 5 --only 5,1,0,7,6,2,10 --variant base= --variant maskall=-DFMHA_MASK_EDGE_TILES_ONLY=0 2>&1 | grep -v Warn | sed 's/maxdiff \([0-9.e-]*\)/md=\1/g'
date -u
