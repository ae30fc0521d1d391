#!/bin/bash
# Final run of the fifth session: CUDA tests and sanitizers on this checkout (the whole suite passed in run an,
# before the D=128 early operand wait), then the full perf suite (writes the tuning table).
export PYTHONPATH=. FMHA_CACHE_DIR=$PWD/.build/cache41
date -u
timeout 120 python -m pytest -q -n 8 tests/test_cuda.py tests/test_api.py -p no:cacheprovider 2>&1 | tail -2
timeout 90 compute-sanitizer --tool memcheck python tests/sanitize_subset.py 2>&1 | tail -1
timeout 90 compute-sanitizer --tool racecheck python tests/sanitize_subset.py 2>&1 | tail -1
date -u
timeout 300 python -m perf --preset full --write-tuning --budget-s 150 --out $OUT/perf-full 2>&1 | tr '\r' '\n' | grep -E "GB/s|ceilings|wrote|done" | grep -v "^\s*$" | cut -c1-260
date -u
