#!/bin/bash
# Sixteenth session: D = 512 with the early operand wait (FMHA_SM90_D512_EARLY_OPERAND_WAIT=1: V(it+1) and
# K(it+2) waited for before P V(it)'s wgmma wait, off the path between P V landing and the next issue; with
# PV_AFTER_QK), interleaved against the default; then the whole suite and racecheck with it built in.
# Libraries prebuilt in cache129 (default build's SASS unchanged).
export PYTHONPATH=. FMHA_CACHE_DIR=$PWD/.build/cache129
F="-DFMHA_SM90_D512_EARLY_OPERAND_WAIT=1"
date -u; nvidia-smi --query-gpu=name,serial,power.limit --format=csv,noheader
timeout 100 python perf/variants.py --sustained --rounds 8 --per-round --shape 64,1,128,1,4096,512 \
  --shape 32,2,128,1,4096,512 --shape 128,1,16,1,4096,512 --variant base= --variant early="$F" --no-peers \
  2>&1 | grep -v "Warning\|return F.scaled" | cut -c1-900
date -u
timeout 40 python perf/variants.py --rounds 8 --per-round --shape 64,1,128,1,4096,512 --variant base= \
  --variant early="$F" --no-peers 2>&1 | grep -v "Warning\|return F.scaled" | cut -c1-900
date -u
FMHA_NVCC_FLAGS="$F" timeout 150 python -m pytest -q -n 8 tests/ -p no:cacheprovider 2>&1 | tail -2
FMHA_NVCC_FLAGS="$F" timeout 40 compute-sanitizer --tool racecheck python tests/sanitize_subset.py > $OUT/racecheck.log 2>&1
echo "racecheck: $(grep -E 'SUMMARY' $OUT/racecheck.log | tail -1) cases run: $(grep -c '^ran' $OUT/racecheck.log)"
date -u
