#!/bin/bash
# Eighteenth session, final device code (cache142: the head-pair code only in the D = 128 stream kernel, whose
# SASS equals cache141's; the D = 128 deep kernels differ from the previous library's by register allocation
# only, as do D = 64 and 256). Tests, sanitizers, the deep D = 128 shapes against the previous library
# (cache137), D=64 B32 S8192 against cuDNN over 10 rounds, the full suite and its tuning table.
export PYTHONPATH=. FMHA_CACHE_DIR=$PWD/.build/cache142
date -u; nvidia-smi --query-gpu=name,serial --format=csv,noheader
timeout 200 python -m pytest -q -n 8 tests/ -p no:cacheprovider 2>&1 | tail -2
for tool in racecheck memcheck synccheck; do
  timeout 90 compute-sanitizer --tool $tool python tests/sanitize_subset.py > $OUT/$tool.log 2>&1
  echo "$tool: $(grep -E 'SUMMARY' $OUT/$tool.log | tail -1) cases run: $(grep -c '^ran' $OUT/$tool.log)"
done
date -u
timeout 100 python perf/variants.py --rounds 5 --per-round --no-peers --lib prev=.build/cmp/prev.so --variant new= \
  --shape 8,16,32,8,8192,128 --shape 1,1,32,8,65536,128 --shape 1,1,32,8,8192,128 --shape 8,1,32,8,8192,128 2>&1 \
  | grep -v "Warning\|return F.scaled" | cut -c1-700
timeout 60 python perf/variants.py --rounds 10 --per-round --shape 32,1,32,8,8192,64 --variant cuda= 2>&1 \
  | grep -v "Warning\|return F.scaled" | cut -c1-900
date -u
F='GB/s|ceilings|wrote|done'
timeout 250 python -m perf --preset full --also-separate --write-tuning --budget-s 240 --out $OUT/perf-full 2>&1 | tr '\r' '\n' | grep -E "$F" | grep -v "^\s*$" | cut -c1-330
rm -rf $OUT/perf-full/raw $OUT/perf-full/*.png
date -u
