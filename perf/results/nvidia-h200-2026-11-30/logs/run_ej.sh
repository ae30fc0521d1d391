#!/bin/bash
# Fourteenth session: the full suite once more on the final device code (cache111), to see whether run ef/eg's
# back-to-back B64 S16384 (995-999 us, level with the old library in one process, run eh) follows that H200.
export PYTHONPATH=. FMHA_CACHE_DIR=$PWD/.build/cache111
date -u; nvidia-smi --query-gpu=name,serial --format=csv,noheader
F='GB/s|ceilings|wrote|done'
timeout 200 python -m perf --preset full --also-separate --write-tuning --budget-s 300 --out $OUT/perf-full 2>&1 | tr '\r' '\n' | grep -E "$F" | grep -v "^\s*$" | cut -c1-330
cp $OUT/perf-full/tuning-*.json $OUT/perf-full/results.md $OUT/ 2>/dev/null
rm -rf $OUT/perf-full/raw $OUT/perf-full/*.png
date -u
