#!/bin/bash
# Final kernel (epilogue without the stack frame; CUDA tests passed in run bc): both sanitizers, then
# the full perf suite (writes the tuning table).
export PYTHONPATH=. FMHA_CACHE_DIR=$PWD/.build/cache53
date -u
timeout 60 compute-sanitizer --tool memcheck python tests/sanitize_subset.py 2>&1 | tail -1
timeout 60 compute-sanitizer --tool racecheck python tests/sanitize_subset.py 2>&1 | tail -1
date -u
timeout 230 python -m perf --preset full --write-tuning --budget-s 150 --out $OUT/perf-full 2>&1 | tr '\r' '\n' | grep -E "GB/s|ceilings|wrote|done" | grep -v "^\s*$" | cut -c1-260
date -u
