#!/bin/bash
# D=512 with a quarter of Q in registers (half of each warpgroup's Q K^T from registers): CUDA tests, both
# sanitizers, then D=512 Hq=128 / Hq=16 against the same build without it (-DFMHA_SM90_D512_Q_REGS=0, whose
# D=512 SASS is run ao's).
export PYTHONPATH=. FMHA_CACHE_DIR=$PWD/.build/cache42
date -u
timeout 150 python -m pytest -q -n 8 tests/test_cuda.py -p no:cacheprovider 2>&1 | tail -2
timeout 90 compute-sanitizer --tool memcheck python tests/sanitize_subset.py 2>&1 | tail -1
timeout 90 compute-sanitizer --tool racecheck python tests/sanitize_subset.py 2>&1 | tail -1
date -u
timeout 150 python -W ignore perf/variants.py --rounds 5 --only 10,9 --no-peers --variant head= --variant qr0=-DFMHA_SM90_D512_Q_REGS=0 2>&1 | grep -v Warn | sed 's/maxdiff \([0-9.e-]*\)/md=\1/g'
date -u
