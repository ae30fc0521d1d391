#!/bin/bash
# Seventeenth session, final code (the D = 512 seesaw on by default; cache132, the build run fd tested): the
# full perf suite and its tuning table.
export PYTHONPATH=. FMHA_CACHE_DIR=$PWD/.build/cache132
date -u; nvidia-smi --query-gpu=name,serial --format=csv,noheader
F='GB/s|ceilings|wrote|done'
timeout 280 python -m perf --preset full --also-separate --write-tuning --budget-s 300 --out $OUT/perf-full 2>&1 | tr '\r' '\n' | grep -E "$F" | grep -v "^\s*$" | cut -c1-330
rm -rf $OUT/perf-full/raw $OUT/perf-full/*.png
date -u
