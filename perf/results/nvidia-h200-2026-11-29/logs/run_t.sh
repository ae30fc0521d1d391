#!/bin/bash
# Final run: narrow loop on for D=64, D=128 deep and D=256 (<= 16 packed rows): whole suite, sanitizers
# (now with narrow cases), full perf suite (writes the tuning table).
export PYTHONPATH=. FMHA_CACHE_DIR=$PWD/.build/cache17
date -u
timeout 150 python -m pytest -q -n 8 tests/ -x -rs -p no:cacheprovider 2>&1 | grep -v -i "deprecat\|warnings.warn\|benchmark" | tail -4
timeout 70 compute-sanitizer --tool memcheck python tests/sanitize_subset.py 2>&1 | tail -1
timeout 70 compute-sanitizer --tool racecheck python tests/sanitize_subset.py 2>&1 | tail -1
date -u
timeout 240 python -m perf --preset full --write-tuning --budget-s 150 --out $OUT/perf-full 2>&1 | tr '\r' '\n' | grep -E "GB/s|ceilings|wrote|done" | grep -v "^\s*$" | cut -c1-260
date -u
