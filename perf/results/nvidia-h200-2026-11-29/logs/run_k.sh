#!/bin/bash
# Conditional O rescale (skip when alpha == 1 for the whole warp), and probes of what limits D=512 Hq=128:
# halfqk = Q K^T over half the head dim (timing probe, wrong results), splitqk = the exchange variant.
export PYTHONPATH=. FMHA_CACHE_DIR=$PWD/.build/cache10
date -u
timeout 150 python -m pytest -q -n 8 tests/test_cuda.py -x -p no:cacheprovider 2>&1 | tail -1
timeout 400 python -W ignore perf/variants.py --rounds 3 --only 10,9,0,6,2,7 --variant base= --variant nocondres=-DFMHA_SM90_SKIP_UNIT_RESCALE=0 --variant halfqk=-DFMHA_SM90_PROBE_HALF_QK=1 --variant splitqk=-DFMHA_SM90_D512_SPLIT_QK=1 2>&1 | grep -v Warn | sed 's/maxdiff \([0-9.e-]*\)/md=\1/g'
date -u
