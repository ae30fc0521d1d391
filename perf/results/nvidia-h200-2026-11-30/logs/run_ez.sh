#!/bin/bash
# Sixteenth session, final code: PV_AFTER_QK on by default (cache128: SASS identical to the build run ew tested;
# against cache122 only the two D = 512 kernels differ). The whole suite and the sanitizers, then the full perf
# suite and its tuning table.
export PYTHONPATH=. FMHA_CACHE_DIR=$PWD/.build/cache128
date -u; nvidia-smi --query-gpu=name,serial --format=csv,noheader
timeout 200 python -m pytest -q -n 8 tests/ -p no:cacheprovider 2>&1 | tail -2
for tool in racecheck memcheck synccheck; do
  timeout 100 compute-sanitizer --tool $tool python tests/sanitize_subset.py > $OUT/$tool.log 2>&1
  echo "$tool: $(grep -E 'SUMMARY' $OUT/$tool.log | tail -1) cases run: $(grep -c '^ran' $OUT/$tool.log)"
done
date -u
F='GB/s|ceilings|wrote|done'
timeout 260 python -m perf --preset full --also-separate --write-tuning --budget-s 300 --out $OUT/perf-full 2>&1 | tr '\r' '\n' | grep -E "$F" | grep -v "^\s*$" | cut -c1-330
rm -rf $OUT/perf-full/raw $OUT/perf-full/*.png
date -u
