#!/bin/bash
# Thirteenth session: the lean narrow loop (new, cache98) against the library before it (old, cache97) on the short
# split shapes, more rounds, both regimes (calls back to back; an add after each call); then the full perf suite
# with the new library, writing the tuning table.
export PYTHONPATH=. FMHA_CACHE_DIR=$PWD/.build/cache98
date -u; nvidia-smi --query-gpu=name,serial --format=csv,noheader
OLD=$(ls .build/cache97/libfmha_sm_90a_*.so); NEW=$(ls .build/cache98/libfmha_sm_90a_*.so)
timeout 150 python -W ignore perf/variants.py --sustained --rounds 11 --no-peers --lib old=$OLD --lib new=$NEW \
  --only 3,16,17,4,14 2>&1 | grep -v Warn
timeout 120 python -W ignore perf/variants.py --sustained --separate --rounds 7 --no-peers --lib old=$OLD --lib new=$NEW \
  --only 3,16,17,14 2>&1 | grep -v Warn
date -u
F='GB/s|ceilings|wrote|done'
timeout 300 python -m perf --preset full --also-separate --write-tuning --budget-s 300 --out $OUT/perf-full 2>&1 | tr '\r' '\n' | grep -E "$F" | grep -v "^\s*$" | cut -c1-330
date -u
