#!/bin/bash
# Whole suite on this checkout; then the early operand wait (FMHA_SM90_EARLY_OPERAND_WAIT=1) alone, without the
# uniform warpgroup index it was first measured with (run aj).
export PYTHONPATH=. FMHA_CACHE_DIR=$PWD/.build/cache40
date -u
timeout 170 python -m pytest -q -n 8 tests/ -rs -p no:cacheprovider 2>&1 | grep -v -i "deprecat\|warnings.warn\|benchmark" | tail -3
date -u
timeout 200 python -W ignore perf/variants.py --rounds 3 --only 10,9,0,2,6,5,3 --no-peers --variant head= --variant early=-DFMHA_SM90_EARLY_OPERAND_WAIT=1 2>&1 | grep -v Warn | sed 's/maxdiff \([0-9.e-]*\)/md=\1/g'
date -u
