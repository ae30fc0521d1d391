#!/bin/bash
# Fifteenth session, last check after the final review: the final sources (cache122: after run eo the merge decision and the launch share one exclusive_sms answer in
# capi.cu's launch (host code); every kernel's SASS identical to cache117's): the whole suite and memcheck.
export PYTHONPATH=. FMHA_CACHE_DIR=$PWD/.build/cache122
date -u; nvidia-smi --query-gpu=name,serial --format=csv,noheader
timeout 200 python -m pytest -q -n 8 tests/ -p no:cacheprovider 2>&1 | tail -3
date -u
timeout 150 compute-sanitizer --tool memcheck python tests/sanitize_subset.py > $OUT/memcheck.log 2>&1
echo "memcheck: $(grep -E 'SUMMARY' $OUT/memcheck.log | tail -1) cases run: $(grep -c '^ran' $OUT/memcheck.log)"
grep "shallow ring\|cluster merge 128" $OUT/memcheck.log | cut -c1-160
date -u
