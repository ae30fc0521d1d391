#!/bin/bash
# Q loads first: (a) the Q gather computes (t, head) with one division per thread instead of one per
# 16-byte chunk (the 8 loads of a D=128 thread were ~58 instructions apart in the SASS, now issued
# together); (b) FMHA_SM90_Q_FIRST=1: the producer warp starts its K/V stream only once the consumers'
# Q loads are issued (bar.arrive / bar.sync), so Q is not queued behind the CTA's first ring of tiles
# (ncu run bi: T=16 consumers spent ~8% of their stall samples on the Q stores' loads).
# Tests + sanitizers on the default (a + b), then interleaved sustained: head (a + b), qf0 (a only),
# prev (run bf's library: neither).
export PYTHONPATH=. FMHA_CACHE_DIR=$PWD/.build/cache59
date -u; nvidia-smi --query-gpu=name,serial,power.limit --format=csv,noheader
timeout 150 python -m pytest -q -n 8 tests/test_cuda.py -p no:cacheprovider 2>&1 | tail -2
timeout 90 compute-sanitizer --tool memcheck python tests/sanitize_subset.py 2>&1 | tail -1
timeout 90 compute-sanitizer --tool racecheck python tests/sanitize_subset.py 2>&1 | tail -1
timeout 90 compute-sanitizer --tool synccheck python tests/sanitize_subset.py 2>&1 | tail -1
date -u
timeout 300 python -W ignore perf/variants.py --sustained --rounds 5 --only 2,3,4,6,13,1,5,7,8,9,10,11 --variant head= \
  --variant qf0=-DFMHA_SM90_Q_FIRST=0 --lib prev=$PWD/.build/cache59/prev.so 2>&1 | grep -v Warn | sed 's/maxdiff \([0-9.e-]*\)/md=\1/g'
date -u
