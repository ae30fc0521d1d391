#!/bin/bash
# Final run of the fourth session: cluster merge (<= 16 packed rows), combine kernel with one L2 round
# trip per 16 splits, 32-token TMA boxes. Whole suite, sanitizers, full perf suite (writes the tuning
# table), and merge variants on the split-KV shapes.
export PYTHONPATH=. FMHA_CACHE_DIR=$PWD/.build/cache28
date -u
timeout 150 python -m pytest -q -n 8 tests/ -x -rs -p no:cacheprovider 2>&1 | grep -v -i "deprecat\|warnings.warn\|benchmark" | tail -4
timeout 90 compute-sanitizer --tool memcheck python tests/sanitize_subset.py 2>&1 | tail -1
timeout 90 compute-sanitizer --tool racecheck python tests/sanitize_subset.py 2>&1 | tail -1
date -u
timeout 240 python -m perf --preset full --write-tuning --budget-s 150 --out $OUT/perf-full 2>&1 | tr '\r' '\n' | grep -E "GB/s|ceilings|wrote|done" | grep -v "^\s*$" | cut -c1-260
date -u
timeout 150 python -W ignore perf/variants.py --rounds 3 --only 2,11,3,6,13,4 --variant merged= --variant combine=-DFMHA_SM90_CLUSTER_MERGE=0 --variant nomerge=-DFMHA_SM90_PROBE_NO_COMBINE=1 2>&1 | grep -v Warn | sed 's/maxdiff \([0-9.e-]*\)/md=\1/g'
date -u
