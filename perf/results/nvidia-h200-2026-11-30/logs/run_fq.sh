#!/bin/bash
# Eighteenth session, final device code (cache141; SASS-identical to cache140, runs fo, fp): KV-head pairs for
# D = 64. Tests, sanitizers (46 cases: two head-pair ones), explain, D=64 B32 S8192 against cuDNN interleaved over
# 10 rounds (as run fi), then the full perf suite and its tuning table.
export PYTHONPATH=. FMHA_CACHE_DIR=$PWD/.build/cache141
date -u; nvidia-smi --query-gpu=name,serial --format=csv,noheader
timeout 200 python -m pytest -q -n 8 tests/ -p no:cacheprovider 2>&1 | tail -2
for tool in racecheck memcheck synccheck; do
  timeout 90 compute-sanitizer --tool $tool python tests/sanitize_subset.py > $OUT/$tool.log 2>&1
  echo "$tool: $(grep -E 'SUMMARY' $OUT/$tool.log | tail -1) cases run: $(grep -c '^ran' $OUT/$tool.log)"
done
grep "head pairs" $OUT/memcheck.log
date -u
timeout 60 python perf/variants.py --rounds 10 --per-round --shape 32,1,32,8,8192,64 --variant cuda= 2>&1 \
  | grep -v "Warning\|return F.scaled" | cut -c1-900
date -u
F='GB/s|ceilings|wrote|done'
timeout 290 python -m perf --preset full --also-separate --write-tuning --budget-s 280 --out $OUT/perf-full 2>&1 | tr '\r' '\n' | grep -E "$F" | grep -v "^\s*$" | cut -c1-330
rm -rf $OUT/perf-full/raw $OUT/perf-full/*.png
date -u
