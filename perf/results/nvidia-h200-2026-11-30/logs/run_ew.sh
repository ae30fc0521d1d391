#!/bin/bash
# Sixteenth session: D = 512 with P V(it) issued once Q K^T(it+1) landed (FMHA_SM90_PV_AFTER_QK=1; run ev's
# probe showed one warpgroup's Q K^T landing 557 cycles after the other's). The probe's loop phases with it,
# interleaved timings (sustained and per replay) against the default, then the whole suite and racecheck
# with it built in. Libraries prebuilt in cache126 (default build's SASS unchanged).
export PYTHONPATH=. FMHA_CACHE_DIR=$PWD/.build/cache126
F="-DFMHA_SM90_PV_AFTER_QK=1"
date -u; nvidia-smi --query-gpu=name,serial,power.limit --format=csv,noheader
timeout 120 python -W ignore perf/stream_probe.py --shape 64,1,128,1,4096,512 --repeat 8 --flags "$F" 2>&1 | \
  grep -v "^  \(entry\|griddep\|first K\|last V\|end\|stream us\|CTAs per\)" | tail -22
date -u
timeout 200 python perf/variants.py --sustained --rounds 8 --shape 64,1,128,1,4096,512 --shape 128,1,16,1,4096,512 \
  --shape 32,2,128,1,4096,512 --variant base= --variant pvafter="$F" 2>&1 | grep -v "Warning\|return F.scaled" | cut -c1-700
date -u
timeout 100 python perf/variants.py --rounds 8 --shape 64,1,128,1,4096,512 --variant base= --variant pvafter="$F" \
  --no-peers 2>&1 | grep -v "Warning\|return F.scaled" | cut -c1-700
date -u
FMHA_NVCC_FLAGS="$F" timeout 200 python -m pytest -q -n 8 tests/ -p no:cacheprovider 2>&1 | tail -2
date -u
FMHA_NVCC_FLAGS="$F" timeout 150 compute-sanitizer --tool racecheck python tests/sanitize_subset.py > $OUT/racecheck.log 2>&1
echo "racecheck: $(grep -E 'SUMMARY' $OUT/racecheck.log | tail -1) cases run: $(grep -c '^ran' $OUT/racecheck.log)"
date -u
