#!/bin/bash
# Thirteenth session: the leaner narrow loop (P^T stored with stmatrix.trans, the mask only on edge tiles, qk_scale
# folded into the exponent's FFMA, 8-byte cross-warp reductions, ring stage/phase as counters): 348 instead of 438
# instructions a tile on the interior path (SASS, deep D=128). The whole test suite and the three sanitizers on the
# subset with the new library (cache98), then old (cache97: HEAD before the change) vs new interleaved on the
# narrow-loop shapes, back to back (sustained).
export PYTHONPATH=. FMHA_CACHE_DIR=$PWD/.build/cache98
date -u; nvidia-smi --query-gpu=name,serial --format=csv,noheader
timeout 200 python -m pytest -q -n 8 tests/ -p no:cacheprovider 2>&1 | tail -4
date -u
for tool in racecheck memcheck synccheck; do
  timeout 150 compute-sanitizer --tool $tool python tests/sanitize_subset.py > $OUT/$tool.log 2>&1
  echo "$tool: $(grep -E 'SUMMARY' $OUT/$tool.log | tail -1) cases run: $(grep -c '^ran' $OUT/$tool.log)"
done
date -u
OLD=$(ls .build/cache97/libfmha_sm_90a_*.so); NEW=$(ls .build/cache98/libfmha_sm_90a_*.so)
timeout 200 python -W ignore perf/variants.py --sustained --rounds 5 --lib old=$OLD --lib new=$NEW \
  --only 3,2,4,7,11,12,13,14,15 2>&1 | grep -v Warn
date -u
