#!/bin/bash
# Thirteenth session: online_softmax_tile (the 64-row loops and D = 512) with the row max on raw scores and
# qk_scale folded into the exponent's FFMA (new, cache99) against the lean narrow loop's library (old, cache98):
# the whole suite, the three sanitizers on the subset, the A/B on the 64-row and D = 512 shapes, then the full perf suite.
export PYTHONPATH=. FMHA_CACHE_DIR=$PWD/.build/cache99
date -u; nvidia-smi --query-gpu=name,serial --format=csv,noheader
timeout 200 python -m pytest -q -n 8 tests/ -p no:cacheprovider 2>&1 | tail -2
for tool in racecheck memcheck synccheck; do
  timeout 150 compute-sanitizer --tool $tool python tests/sanitize_subset.py > $OUT/$tool.log 2>&1
  echo "$tool: $(grep -E 'SUMMARY' $OUT/$tool.log | tail -1) cases run: $(grep -c '^ran' $OUT/$tool.log)"
done
date -u
OLD=$(ls .build/cache98/libfmha_sm_90a_*.so); NEW=$(ls .build/cache99/libfmha_sm_90a_*.so)
timeout 200 python -W ignore perf/variants.py --sustained --rounds 5 --no-peers --lib old=$OLD --lib new=$NEW \
  --only 10,9,6,5,1,8,0 2>&1 | grep -v Warn
date -u
F='GB/s|ceilings|wrote|done'
timeout 200 python -m perf --preset full --also-separate --write-tuning --budget-s 300 --out $OUT/perf-full 2>&1 | tr '\r' '\n' | grep -E "$F" | grep -v "^\s*$" | cut -c1-330
date -u
