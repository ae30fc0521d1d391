#!/bin/bash
# Consumer warps whose 16 rows are all padding skip the softmax (FMHA_SM90_SKIP_PAD_WARPS).
export PYTHONPATH=. FMHA_CACHE_DIR=$PWD/.build/cache15
date -u
timeout 150 python -m pytest -q -n 8 tests/test_cuda.py -x -p no:cacheprovider 2>&1 | tail -1
timeout 300 python -W ignore perf/variants.py --rounds 3 --only 0,1,2,3,7,9,10,5 --variant base= --variant nopadskip=-DFMHA_SM90_SKIP_PAD_WARPS=0 2>&1 | grep -v Warn | sed 's/maxdiff \([0-9.e-]*\)/md=\1/g'
for f in "" "-DFMHA_SM90_SKIP_PAD_WARPS=0"; do
  FMHA_NVCC_FLAGS="$f" timeout 30 python perf/ncu_probe.py --shape 128,1,32,8,8192,128 --iters 1 --clocks --seconds 3 2>&1 | tail -1
done
date -u
