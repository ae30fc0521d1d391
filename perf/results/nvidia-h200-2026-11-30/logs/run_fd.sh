#!/bin/bash
# Seventeenth session: the seesaw with the V tail cleared by the tile owner alone (run fc: synccheck reported the
# both-warpgroup kBarVTail barrier reached from two instructions). Sanitizers, first light, a short
# comparison against SEESAW=0 and the whole test suite. Libraries prebuilt in cache132.
export PYTHONPATH=. FMHA_CACHE_DIR=$PWD/.build/cache132
OLD="-DFMHA_SM90_D512_SEESAW=0"
date -u; nvidia-smi --query-gpu=name,serial,power.limit --format=csv,noheader
for tool in racecheck memcheck synccheck; do
  timeout 80 compute-sanitizer --tool $tool python tests/sanitize_subset.py > $OUT/$tool.log 2>&1
  echo "$tool: $(grep -E 'SUMMARY' $OUT/$tool.log | tail -1) cases run: $(grep -c '^ran' $OUT/$tool.log)"
done
date -u
timeout 120 python -m fmha.cuda.selftest 2>&1 | tail -21
date -u
timeout 100 python perf/variants.py --sustained --rounds 6 --per-round --shape 64,1,128,1,4096,512 \
  --shape 32,2,128,1,4096,512 --variant seesaw= \
  --variant split="$OLD" --no-peers 2>&1 | grep -v "Warning\|return F.scaled" | cut -c1-900
date -u
timeout 40 python perf/variants.py --rounds 8 --per-round --shape 64,1,128,1,4096,512 --variant seesaw= \
  --variant split="$OLD" --no-peers 2>&1 | grep -v "Warning\|return F.scaled" | cut -c1-900
date -u
timeout 200 python -m pytest -q -n 8 tests/ -p no:cacheprovider 2>&1 | tail -4
date -u
