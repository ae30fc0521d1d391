#!/bin/bash
# D=512: a third V stage in the shared memory that Q in registers freed. CUDA tests, both sanitizers, then
# D=512 Hq=128 / Hq=16: head (Q regs + 3 V stages) vs 2 V stages vs no Q regs (run ao's D=512 SASS).
export PYTHONPATH=. FMHA_CACHE_DIR=$PWD/.build/cache43
date -u
timeout 150 python -m pytest -q -n 8 tests/test_cuda.py -p no:cacheprovider 2>&1 | tail -2
timeout 90 compute-sanitizer --tool memcheck python tests/sanitize_subset.py 2>&1 | tail -1
timeout 90 compute-sanitizer --tool racecheck python tests/sanitize_subset.py 2>&1 | tail -1
date -u
timeout 150 python -W ignore perf/variants.py --rounds 5 --only 10,9,0,2 --no-peers --variant head= --variant v2=-DFMHA_SM90_D512_V_STAGES=2 --lib qr0=$PWD/.build/prev2/libfmha_sm_90a_d01ef5dd5a5a054a_ba1db6eb.so 2>&1 | grep -v Warn | sed 's/maxdiff \([0-9.e-]*\)/md=\1/g'
date -u
