#!/bin/bash
# Final device code (the pair merge with its device-side guard): the whole suite, racecheck and synccheck.
export PYTHONPATH=. FMHA_CACHE_DIR=$PWD/.build/cache94
date -u; nvidia-smi --query-gpu=name,serial --format=csv,noheader
timeout 200 python -m pytest -q -n 8 tests/ -p no:cacheprovider 2>&1 | tail -2
for t in racecheck synccheck; do
  echo "== $t"
  timeout 100 compute-sanitizer --tool $t python tests/sanitize_subset.py 2>&1 | tee $OUT/$t.log | grep -E "SUMMARY|NOT in|nan|rror:" | tail -4; echo "cases run: $(grep -c "^ran" $OUT/$t.log)"
done
date -u
