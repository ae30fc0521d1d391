#!/bin/bash
export PYTHONPATH=. FMHA_CACHE_DIR=$PWD/.build/cache4
date -u
echo "=== pytest"
timeout 170 python -m pytest -q -n 8 tests/ -x -rs -p no:cacheprovider 2>&1 | grep -v -i "deprecat\|warnings.warn" | tail -8
echo "=== sanitizer"
timeout 60 compute-sanitizer --tool memcheck python tests/sanitize_subset.py 2>&1 | tail -1
timeout 60 compute-sanitizer --tool racecheck python tests/sanitize_subset.py 2>&1 | tail -1
echo "=== variants (interleaved)"
timeout 200 python -W ignore perf/variants.py --rounds 3 --only 2,3,4,6 --variant fused= --variant separate=+separate-combine 2>&1 | grep -v Warn | sed 's/maxdiff \([0-9.e-]*\)/md=\1/g'
date -u
