#!/bin/bash
# Ninth session's final state (device code unchanged since run by: the library is run by's): the whole test
# suite (new: the deep 64-row plan, the combine on 2184 rows) and the three sanitizers (new cases: 64 rows
# on the deep variant, a 2-split combine of many CTAs).
export PYTHONPATH=. FMHA_CACHE_DIR=$PWD/.build/cache79
date -u; nvidia-smi --query-gpu=name,serial,power.limit --format=csv,noheader
timeout 220 python -m pytest -q -n 8 tests/ -p no:cacheprovider -rs 2>&1 | tail -4
for t in memcheck racecheck synccheck; do
  timeout 120 compute-sanitizer --tool $t python tests/sanitize_subset.py 2>&1 | grep -E "SUMMARY|NOT in|nan" | tail -3
done
date -u
