#!/bin/bash
# Eighteenth session, final device code (cache143): the head-pair code without local variables in the shared
# narrow loop, so every kernel but the D = 128 stream pair is SASS-identical to the previous library (cache137; a
# dead local had changed the register allocation of the others, and run fs timed the deep D = 128 kernels 0.3-0.7%
# slower). The stream kernel (pairs, and the one-wave D = 128 grids): tests, sanitizers, timing against cache137.
export PYTHONPATH=. FMHA_CACHE_DIR=$PWD/.build/cache143
date -u; nvidia-smi --query-gpu=name,serial --format=csv,noheader
timeout 120 python -m pytest -q -n 8 tests/test_cuda.py tests/test_cuda_build.py -p no:cacheprovider -k "pairs or stream or 64 or 128 or packed or selftest" 2>&1 | tail -2
for tool in racecheck memcheck; do
  timeout 90 compute-sanitizer --tool $tool python tests/sanitize_subset.py > $OUT/$tool.log 2>&1
  echo "$tool: $(grep -E 'SUMMARY' $OUT/$tool.log | tail -1) cases run: $(grep -c '^ran' $OUT/$tool.log)"
done
date -u
timeout 100 python perf/variants.py --rounds 5 --per-round --no-peers --lib prev=.build/cmp/prev.so --variant new= \
  --shape 16,1,32,8,32768,128 --shape 1,1,32,8,65536,128 --shape 1,1,32,8,262144,128 2>&1 \
  | grep -v "Warning\|return F.scaled" | cut -c1-700
timeout 60 python perf/variants.py --rounds 8 --per-round --shape 32,1,32,8,8192,64 --variant cuda= 2>&1 \
  | grep -v "Warning\|return F.scaled" | cut -c1-900
date -u
