#!/bin/bash
# K and V issued by two producer warps (FMHA_SM90_SPLIT_PRODUCER; default 1 = deep variants): ncu of T=16
# (run bi) showed the consumer waiting for K (1197 samples) and V (612) while the single producer lane
# waited on a V stage (312), holding the next K behind it. CUDA tests + sanitizers on the default, then
# interleaved sustained timings: deep shapes head vs sp0 (one producer warp, as before); D=512 sp2 vs sp0;
# wide shapes sp3 vs sp0.
export PYTHONPATH=. FMHA_CACHE_DIR=$PWD/.build/cache57
date -u; nvidia-smi --query-gpu=name,serial,power.limit --format=csv,noheader
timeout 150 python -m pytest -q -n 8 tests/test_cuda.py -p no:cacheprovider 2>&1 | tail -2
timeout 90 compute-sanitizer --tool memcheck python tests/sanitize_subset.py 2>&1 | tail -1
timeout 90 compute-sanitizer --tool racecheck python tests/sanitize_subset.py 2>&1 | tail -1
date -u
timeout 200 python -W ignore perf/variants.py --sustained --rounds 5 --only 2,3,4,6,11,13 --variant head= \
  --variant sp0=-DFMHA_SM90_SPLIT_PRODUCER=0 2>&1 | grep -v Warn | sed 's/maxdiff \([0-9.e-]*\)/md=\1/g'
date -u
timeout 200 python -W ignore perf/variants.py --sustained --rounds 5 --only 10,9,1,5,7,8 --no-peers \
  --variant sp0=-DFMHA_SM90_SPLIT_PRODUCER=0 --variant sp2=-DFMHA_SM90_SPLIT_PRODUCER=2 \
  --variant sp3=-DFMHA_SM90_SPLIT_PRODUCER=3 2>&1 | grep -v Warn | sed 's/maxdiff \([0-9.e-]*\)/md=\1/g'
date -u
