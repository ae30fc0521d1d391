#!/bin/bash
# D=512 lookahead loop: CUDA tests, sanitizers on the subset (now with 128-head D=512 rows), then D=512 and
# two D=128 shapes: head vs lookahead off vs producer at 40 registers vs run ai's library.
export PYTHONPATH=. FMHA_CACHE_DIR=$PWD/.build/cache38
date -u
timeout 150 python -m pytest -q -n 8 tests/test_cuda.py -p no:cacheprovider 2>&1 | tail -3
date -u
timeout 100 compute-sanitizer --tool racecheck python tests/sanitize_subset.py 2>&1 | tail -1
timeout 100 compute-sanitizer --tool memcheck python tests/sanitize_subset.py 2>&1 | tail -1
date -u
timeout 200 python -W ignore perf/variants.py --rounds 3 --only 10,9,0,5 --no-peers --variant head= --variant la0=-DFMHA_SM90_QK_LOOKAHEAD=0 --variant pr40=-DFMHA_SM90_PRODUCER_REGS=40 --lib ai=$(ls $PWD/.build/prev/libfmha_sm_90a_cbbdb31879dfb184_*.so) 2>&1 | grep -v Warn | sed 's/maxdiff \([0-9.e-]*\)/md=\1/g'
date -u
