#!/bin/bash
# Eighth session's final state (kernel SASS identical to run bl's; the timing probe compiles out): the whole
# test suite, the three sanitizers, then the full perf suite twice: as always (one contender's calls
# back to back in each graph) and with --separate (a one-element add after every call: no PDL chaining).
export PYTHONPATH=. FMHA_CACHE_DIR=$PWD/.build/cache69
date -u; nvidia-smi --query-gpu=name,serial,power.limit --format=csv,noheader
timeout 200 python -m pytest -q -n 8 tests/ -p no:cacheprovider 2>&1 | tail -2
for t in memcheck racecheck synccheck; do
  timeout 100 compute-sanitizer --tool $t python tests/sanitize_subset.py 2>&1 | grep -E "SUMMARY|NOT in|nan" | tail -3
done
date -u
F='GB/s|ceilings|wrote|done'
timeout 200 python -m perf --preset full --budget-s 150 --out $OUT/perf-full 2>&1 | tr '\r' '\n' | grep -E "$F" | grep -v "^\s*$" | cut -c1-260
date -u
timeout 200 python -m perf --preset full --separate --budget-s 150 --out $OUT/perf-separate 2>&1 | tr '\r' '\n' | grep -E "$F" | grep -v "^\s*$" | cut -c1-260
date -u
