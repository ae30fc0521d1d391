#!/bin/bash
# Seventeenth session: the D = 512 warpgroup seesaw (consumer_loop_seesaw, FMHA_SM90_D512_SEESAW=1, the new
# default): first light (selftest), then interleaved against the split-Q K^T loop (SEESAW=0), then the
# whole test suite and racecheck. Libraries prebuilt in cache130.
export PYTHONPATH=. FMHA_CACHE_DIR=$PWD/.build/cache130
OLD="-DFMHA_SM90_D512_SEESAW=0"
date -u; nvidia-smi --query-gpu=name,serial,power.limit --format=csv,noheader
timeout 120 python -m fmha.cuda.selftest 2>&1 | tail -25
date -u
timeout 100 python perf/variants.py --sustained --rounds 8 --per-round --shape 64,1,128,1,4096,512 \
  --shape 32,2,128,1,4096,512 --shape 128,1,16,1,4096,512 --shape 64,1,64,1,4096,512 --variant seesaw= \
  --variant split="$OLD" --no-peers 2>&1 | grep -v "Warning\|return F.scaled" | cut -c1-900
date -u
timeout 40 python perf/variants.py --rounds 8 --per-round --shape 64,1,128,1,4096,512 --variant seesaw= \
  --variant split="$OLD" --no-peers 2>&1 | grep -v "Warning\|return F.scaled" | cut -c1-900
date -u
timeout 200 python -m pytest -q -n 8 tests/ -p no:cacheprovider 2>&1 | tail -15
date -u
timeout 60 compute-sanitizer --tool racecheck python tests/sanitize_subset.py > $OUT/racecheck.log 2>&1
echo "racecheck: $(grep -E 'SUMMARY' $OUT/racecheck.log | tail -1) cases run: $(grep -c '^ran' $OUT/racecheck.log)"
date -u
