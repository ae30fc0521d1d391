#!/bin/bash
# Tenth session's final state (device code of run by, c9164fb; the multicast pairs of runs ck-cm reverted):
# the test suite with the new tests/test_large_cache.py (caches past 2^31 elements, first run on a GPU), then
# the full perf suite in both regimes, writing the tuning table.
export PYTHONPATH=. FMHA_CACHE_DIR=$PWD/.build/cache83
date -u; nvidia-smi --query-gpu=name,serial,power.limit --format=csv,noheader
timeout 240 python -m pytest -q -n 8 tests/ -p no:cacheprovider 2>&1 | tail -3
timeout 120 python -m pytest -q tests/test_large_cache.py -p no:cacheprovider 2>&1 | tail -2
date -u
F='GB/s|ceilings|wrote|done'
timeout 330 python -m perf --preset full --also-separate --write-tuning --budget-s 300 --out $OUT/perf-full 2>&1 | tr '\r' '\n' | grep -E "$F" | grep -v "^\s*$" | cut -c1-330
date -u
