#!/bin/bash
# Final run of the fourth session (after run ad): combine kernel with 4-split chunks where num_splits <= 4 (T=16
# regressed in ad), 32-token TMA boxes on the deep variant only. Whole suite, sanitizers, full perf suite
# (writes the tuning table), merge variants.
export PYTHONPATH=. FMHA_CACHE_DIR=$PWD/.build/cache29
date -u
timeout 150 python -m pytest -q -n 8 tests/ -x -rs -p no:cacheprovider 2>&1 | grep -v -i "deprecat\|warnings.warn\|benchmark" | tail -4
timeout 90 compute-sanitizer --tool memcheck python tests/sanitize_subset.py 2>&1 | tail -1
timeout 90 compute-sanitizer --tool racecheck python tests/sanitize_subset.py 2>&1 | tail -1
date -u
timeout 240 python -m perf --preset full --write-tuning --budget-s 150 --out $OUT/perf-full 2>&1 | tr '\r' '\n' | grep -E "GB/s|ceilings|wrote|done" | grep -v "^\s*$" | cut -c1-260
date -u
timeout 150 python -W ignore perf/variants.py --rounds 3 --only 6,2,3,13 --variant merged= --variant combine=-DFMHA_SM90_CLUSTER_MERGE=0 2>&1 | grep -v Warn | sed 's/maxdiff \([0-9.e-]*\)/md=\1/g'
date -u
