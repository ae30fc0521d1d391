#!/bin/bash
# Seventeenth session, final code (cache135: every kernel's SASS identical to cache133's, the build run fg tested;
# only comments changed since): D=64 B32 S8192 against cuDNN interleaved over 10 rounds, then the full perf suite
# and its tuning table.
export PYTHONPATH=. FMHA_CACHE_DIR=$PWD/.build/cache135
date -u; nvidia-smi --query-gpu=name,serial --format=csv,noheader
timeout 60 python perf/variants.py --rounds 10 --per-round --shape 32,1,32,8,8192,64 --variant cuda= 2>&1 \
  | grep -v "Warning\|return F.scaled" | cut -c1-900
date -u
F='GB/s|ceilings|wrote|done'
timeout 280 python -m perf --preset full --also-separate --write-tuning --budget-s 300 --out $OUT/perf-full 2>&1 | tr '\r' '\n' | grep -E "$F" | grep -v "^\s*$" | cut -c1-330
rm -rf $OUT/perf-full/raw $OUT/perf-full/*.png
date -u
