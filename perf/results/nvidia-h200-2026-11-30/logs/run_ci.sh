#!/bin/bash
# Narrow tile groups (FMHA_SM90_DEEP_NARROW_GROUPS=2): on the deep D=128 instantiation the narrow loop (<= 16
# packed rows: B1 S65536, B1 S262144, B16 S32768, B1/B8 S8192, B4 S512) runs on two warpgroups taking alternate
# K/V tiles, each with its own column softmax state, O^T accumulator, P^T buffer and barriers, merged at the end;
# the producer becomes a warpgroup (setmaxnreg), the 64-row loop runs on group 0. Run cc: B1 S65536 without the
# merge 63.5 us against 60.3 for the stream alone. Tests + sanitizers on it, then head vs prev (run by's library).
export PYTHONPATH=. FMHA_CACHE_DIR=$PWD/.build/cache81
date -u; nvidia-smi --query-gpu=name,serial,power.limit --format=csv,noheader
timeout 200 python -m pytest -q -n 8 tests/ -p no:cacheprovider 2>&1 | tail -2
for t in memcheck racecheck synccheck; do
  timeout 90 compute-sanitizer --tool $t python tests/sanitize_subset.py 2>&1 | grep -E "SUMMARY|NOT in|nan" | tail -3
done
date -u
timeout 150 python -W ignore perf/variants.py --sustained --rounds 5 --no-peers --variant head= \
  --lib prev=$PWD/.build/cache81/prev.so --only 2,3,4,13,6,11,12 2>&1 | grep -v Warn
date -u
