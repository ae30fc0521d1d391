#!/bin/bash
# Launch plan for long caches (fmha/cuda/backend.py LONG_CACHE_KEYS_PER_WIDE_CTA): wide CTAs split to fill
# 2 per SM once each keeps >= 8192 keys (B1 S262144: 32 splits, B16 S32768: 2), after run bz. CUDA and API
# tests, the plan against the old one (d16 / d1) and w33 on the long shapes, B1 S65536 unchanged, then the
# full suite writing the tuning table.
export PYTHONPATH=. FMHA_CACHE_DIR=$PWD/.build/cache69
date -u; nvidia-smi --query-gpu=name,serial,power.limit --format=csv,noheader
timeout 150 python -m pytest -q -n 8 tests/test_cuda.py tests/test_api.py -p no:cacheprovider 2>&1 | tail -1
V="timeout 150 python -W ignore perf/variants.py --sustained --rounds 5"
$V --only 11 --variant head= --variant w33="@wide @splits=33" --variant d16="@deep @splits=16" 2>&1 | grep -v Warn | sed 's/maxdiff \([0-9.e-]*\)/md=\1/g'
$V --only 12,2 --no-peers --variant head= --variant d1="@deep @splits=1" 2>&1 | grep -v Warn | sed 's/maxdiff \([0-9.e-]*\)/md=\1/g'
date -u
timeout 200 python -m perf --preset full --write-tuning --budget-s 150 --out $OUT/perf-full 2>&1 | tr '\r' '\n' | grep -E "GB/s|ceilings|wrote|done" | grep -v "^\s*$" | cut -c1-260
cp fmha/tuning/nvidia-h200.json $OUT/ 2>/dev/null
date -u
