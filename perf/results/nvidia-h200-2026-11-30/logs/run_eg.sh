#!/bin/bash
# Fourteenth session, closing run on the final device code (cache111, as run ef): the plan (stream on the unsplit
# one-wave grids) against the same library forced deep (@deep: the previous plan's kernel there), 5 rounds back
# to back and with an add after each call; then the full perf suite again (run ef's had an outlier, B64 S16384
# 995.4 us against 949.0 with the add) and its tuning table.
export PYTHONPATH=. FMHA_CACHE_DIR=$PWD/.build/cache111
date -u; nvidia-smi --query-gpu=name,serial --format=csv,noheader
S="--shape 16,1,32,8,32768,128 --shape 16,4,32,8,32768,128 --shape 16,1,32,8,8192,128 --shape 16,1,32,8,65536,64"
timeout 150 python -W ignore perf/variants.py --sustained --rounds 5 --variant plan= --variant deep=@deep $S 2>&1 | grep -v Warn
timeout 150 python -W ignore perf/variants.py --sustained --separate --rounds 5 --no-peers --variant plan= --variant deep=@deep $S 2>&1 | grep -v Warn
date -u
F='GB/s|ceilings|wrote|done'
timeout 220 python -m perf --preset full --also-separate --write-tuning --budget-s 300 --out $OUT/perf-full 2>&1 | tr '\r' '\n' | grep -E "$F" | grep -v "^\s*$" | cut -c1-330
cp $OUT/perf-full/tuning-*.json $OUT/perf-full/results.md $OUT/ 2>/dev/null
rm -rf $OUT/perf-full/raw $OUT/perf-full/*.png
date -u
