#!/bin/bash
# Fifteenth session: grids of at most one wave launched one CTA per SM (capi.cu exclusive_sms, cache116; kernels'
# SASS identical to cache115's default library) and the shallow-ring rule extended to the deep plan's split grids
# (from 4096 keys a CTA). The whole suite and the sanitizers (the subset now forces the shallow ring on unsplit
# and split one-wave grids), then interleaved timings: the plan against the same library forced deep / stream /
# wide (with the plan's split count), and against cache115 (this checkout's plan, launches packed as the shared
# memory allows).
export PYTHONPATH=. FMHA_CACHE_DIR=$PWD/.build/cache116
OLD=$PWD/.build/cache115/libfmha_sm_90a_84514cef9b72daad_ba1db6eb.so
date -u; nvidia-smi --query-gpu=name,serial --format=csv,noheader
timeout 200 python -m pytest -q -n 8 tests/ -p no:cacheprovider 2>&1 | tail -3
for tool in racecheck memcheck synccheck; do
  timeout 150 compute-sanitizer --tool $tool python tests/sanitize_subset.py > $OUT/$tool.log 2>&1
  echo "$tool: $(grep -E 'SUMMARY' $OUT/$tool.log | tail -1) cases run: $(grep -c '^ran' $OUT/$tool.log)"
done
grep "shallow ring" $OUT/memcheck.log
date -u
timeout 240 python perf/variants.py --sustained --rounds 4 --shape 1,1,32,8,65536,128 --shape 1,1,32,8,262144,128 \
  --shape 1,1,32,8,32768,128 --shape 8,1,32,8,8192,128 --shape 2,1,32,8,32768,128 --shape 16,1,32,8,4096,128 \
  --shape 16,1,32,8,8192,128 --shape 16,1,32,8,32768,128 \
  --variant plan= --variant deep=@deep --variant stream=@stream --lib old=$OLD 2>&1 | grep -v Warning | cut -c1-700
date -u
timeout 150 python perf/variants.py --sustained --rounds 4 --shape 1,1,32,8,65536,64 --shape 16,1,32,8,65536,64 \
  --shape 16,1,32,8,4096,64 --shape 8,1,32,8,8192,64 --shape 2,1,32,8,32768,64 \
  --variant plan= --variant deep=@deep --variant wide=@wide --lib old=$OLD 2>&1 | grep -v Warning | cut -c1-700
date -u
