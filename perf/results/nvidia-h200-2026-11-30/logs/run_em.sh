#!/bin/bash
# Fifteenth session: split grids of at most one wave launched one CTA per SM, unsplit grids as before
# (capi.cu exclusive_sms(ctas, num_splits), cache117; kernels' SASS identical to cache115/116), the shallow-ring
# rule from 2048 keys a CTA. The whole suite and the sanitizers; interleaved timings around the rule's key
# minimum; then the full perf suite and its tuning table.
export PYTHONPATH=. FMHA_CACHE_DIR=$PWD/.build/cache117
date -u; nvidia-smi --query-gpu=name,serial --format=csv,noheader
timeout 200 python -m pytest -q -n 8 tests/ -p no:cacheprovider 2>&1 | tail -3
for tool in racecheck memcheck synccheck; do
  timeout 150 compute-sanitizer --tool $tool python tests/sanitize_subset.py > $OUT/$tool.log 2>&1
  echo "$tool: $(grep -E 'SUMMARY' $OUT/$tool.log | tail -1) cases run: $(grep -c '^ran' $OUT/$tool.log)"
done
date -u
timeout 150 python perf/variants.py --sustained --rounds 4 --shape 16,1,32,8,2048,128 --shape 16,1,32,8,3072,128 \
  --shape 2,1,32,8,16384,128 --shape 1,1,32,8,32768,128 --shape 16,1,32,8,32768,128 --shape 1,1,32,8,65536,128 \
  --variant plan= --variant deep=@deep --variant stream=@stream 2>&1 | grep -v Warning | cut -c1-700
timeout 80 python perf/variants.py --sustained --rounds 4 --shape 16,1,32,8,2048,64 --shape 1,1,32,8,32768,64 \
  --shape 2,1,32,8,16384,64 --variant plan= --variant deep=@deep --variant wide=@wide 2>&1 | grep -v Warning | cut -c1-700
date -u
F='GB/s|ceilings|wrote|done'
timeout 230 python -m perf --preset full --also-separate --write-tuning --budget-s 300 --out $OUT/perf-full 2>&1 | tr '\r' '\n' | grep -E "$F" | grep -v "^\s*$" | cut -c1-330
cp $OUT/perf-full/tuning-*.json $OUT/perf-full/results.md $OUT/ 2>/dev/null
rm -rf $OUT/perf-full/raw $OUT/perf-full/*.png
date -u
