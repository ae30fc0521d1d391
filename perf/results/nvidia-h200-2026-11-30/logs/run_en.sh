#!/bin/bash
# Fifteenth session, closing check: the final sources (cache119: comments and tests changed after run em, every
# kernel's SASS identical to cache117's): the whole suite, the sanitizers; then the open placement question for
# unsplit one-wave grids: the probe's CTAs per SM for the plan of B16 S32768 and D=64 B16 S65536 (packed launches,
# 4 calls back to back under PDL) and of B1 S65536 (split, one CTA per SM).
export PYTHONPATH=. FMHA_CACHE_DIR=$PWD/.build/cache119
date -u; nvidia-smi --query-gpu=name,serial --format=csv,noheader
timeout 200 python -m pytest -q -n 8 tests/ -p no:cacheprovider 2>&1 | tail -3
for tool in racecheck memcheck synccheck; do
  timeout 150 compute-sanitizer --tool $tool python tests/sanitize_subset.py > $OUT/$tool.log 2>&1
  echo "$tool: $(grep -E 'SUMMARY' $OUT/$tool.log | tail -1) cases run: $(grep -c '^ran' $OUT/$tool.log)"
done
grep "shallow ring" $OUT/memcheck.log | cut -c1-200
date -u
for sh in 16,1,32,8,32768,128 16,1,32,8,65536,64 1,1,32,8,65536,128; do
  for rep in 1 4; do
    echo "== probe $sh repeat $rep"
    timeout 60 python perf/stream_probe.py --shape $sh --repeat $rep 2>&1 | grep -E "shape|kernel span|CTAs per SM|first K -> last V|Error|error" | cut -c1-300
  done
done
date -u
