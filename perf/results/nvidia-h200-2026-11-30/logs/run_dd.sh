#!/bin/bash
# The pair merge with a device-side guard against the narrow loop (a review's suggestion): the CUDA tests,
# memcheck on the subset, and the T=16 A/B again (pair = default, nopair = the combine kernel).
export PYTHONPATH=. FMHA_CACHE_DIR=$PWD/.build/cache94
date -u; nvidia-smi --query-gpu=name,serial --format=csv,noheader
timeout 200 python -m pytest -q -n 8 tests/test_cuda.py 2>&1 | tail -2
timeout 100 compute-sanitizer --tool memcheck python tests/sanitize_subset.py 2>&1 | tee $OUT/memcheck.log | grep -E "SUMMARY|NOT in|nan|rror:" | tail -4; echo "cases run: $(grep -c "^ran" $OUT/memcheck.log)"
timeout 150 python -W ignore perf/variants.py --sustained --rounds 7 --no-peers --variant pair= \
  --variant nopair=-DFMHA_SM90_PAIR_MERGE=0 --only 6 2>&1 | grep -v Warn
date -u
