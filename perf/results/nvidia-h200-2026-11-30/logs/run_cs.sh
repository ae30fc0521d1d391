#!/bin/bash
# Final state: the unit-alpha skip from D = 128 (FMHA_SM90_SKIP_UNIT_RESCALE_MIN_D=128 by default; the library
# is SASS-identical to run cr's skip128). Tests, memcheck + racecheck, then the full perf suite in both regimes,
# writing the tuning table.
export PYTHONPATH=. FMHA_CACHE_DIR=$PWD/.build/cache86
date -u; nvidia-smi --query-gpu=name,serial --format=csv,noheader
timeout 200 python -m pytest -q -n 8 tests/ -p no:cacheprovider 2>&1 | tail -2
for t in memcheck racecheck; do
  timeout 100 compute-sanitizer --tool $t python tests/sanitize_subset.py 2>&1 | grep -E "SUMMARY|NOT in|nan" | tail -3
done
date -u
F='GB/s|ceilings|wrote|done'
timeout 300 python -m perf --preset full --also-separate --write-tuning --budget-s 300 --out $OUT/perf-full 2>&1 | tr '\r' '\n' | grep -E "$F" | grep -v "^\s*$" | cut -c1-330
date -u
