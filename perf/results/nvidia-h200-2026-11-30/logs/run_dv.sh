#!/bin/bash
# Thirteenth session: the full suite in fp16 (new `--dtype`; calls back to back only), the final sources' library
# (cache100: SASS identical to run dt's cache99, only comments differ).
export PYTHONPATH=. FMHA_CACHE_DIR=$PWD/.build/cache100
date -u; nvidia-smi --query-gpu=name,serial --format=csv,noheader
F='GB/s|ceilings|wrote|done'
timeout 300 python -m perf --preset full --dtype fp16 --budget-s 200 --out $OUT/perf-fp16 2>&1 | tr '\r' '\n' | grep -E "$F" | grep -v "^\s*$" | cut -c1-330
date -u
