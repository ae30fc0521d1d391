#!/bin/bash
# Narrow (swap-AB) consumer for <= 16 packed query rows: keys / head-dim columns in wgmma M, query rows in N.
export PYTHONPATH=. FMHA_CACHE_DIR=$PWD/.build/cache16
date -u
timeout 150 python -m pytest -q -n 8 tests/test_cuda.py -x -p no:cacheprovider 2>&1 | tail -15 | cut -c1-400
timeout 200 python -W ignore perf/variants.py --rounds 3 --only 7,0,1,2,3,4,5,8 --variant narrow= --variant wide64=-DFMHA_SM90_NARROW=0 2>&1 | grep -v Warn | sed 's/maxdiff \([0-9.e-]*\)/md=\1/g'
for f in "" "-DFMHA_SM90_NARROW=0"; do
  FMHA_NVCC_FLAGS="$f" timeout 30 python perf/ncu_probe.py --shape 32,1,32,8,8192,64 --iters 1 --clocks --seconds 3 2>&1 | tail -1
done
date -u
