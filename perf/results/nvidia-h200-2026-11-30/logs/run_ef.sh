#!/bin/bash
# Fourteenth session: the stream instantiation (D = 128: the wide configuration's 64 KB ring with the narrow loop)
# and the plan's shallow-ring rule (unsplit narrow grids of >= 0.8 of one wave: stream at D = 128, wide at
# D = 64), library cache111 (every other kernel's SASS identical to cache106): the whole suite, the three
# sanitizers on the subset (now with the shallow-ring cases), then the full perf suite and its tuning table.
export PYTHONPATH=. FMHA_CACHE_DIR=$PWD/.build/cache111
date -u; nvidia-smi --query-gpu=name,serial --format=csv,noheader
timeout 200 python -m pytest -q -n 8 tests/ -p no:cacheprovider 2>&1 | tail -3
for tool in racecheck memcheck synccheck; do
  timeout 150 compute-sanitizer --tool $tool python tests/sanitize_subset.py > $OUT/$tool.log 2>&1
  echo "$tool: $(grep -E 'SUMMARY' $OUT/$tool.log | tail -1) cases run: $(grep -c '^ran' $OUT/$tool.log)"
done
date -u
F='GB/s|ceilings|wrote|done'
timeout 220 python -m perf --preset full --also-separate --write-tuning --budget-s 300 --out $OUT/perf-full 2>&1 | tr '\r' '\n' | grep -E "$F" | grep -v "^\s*$" | cut -c1-330
cp $OUT/perf-full/tuning-*.json $OUT/ 2>/dev/null
date -u
