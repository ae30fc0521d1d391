#!/bin/bash
# Seventeenth session: the seesaw with 256 of Q's columns in registers (FMHA_SM90_D512_SEESAW_Q_REGS=256; 4 Q boxes
# left in shared memory, a third fewer shared-memory A reads in Q K^T; highest register R237, no spills) against 192.
# Then the D = 512 tests and racecheck with 256 built in. Libraries prebuilt in cache134 (default SASS = cache133's).
export PYTHONPATH=. FMHA_CACHE_DIR=$PWD/.build/cache134
Q="-DFMHA_SM90_D512_SEESAW_Q_REGS=256"
date -u; nvidia-smi --query-gpu=name,serial --format=csv,noheader
timeout 90 python perf/variants.py --sustained --rounds 6 --per-round --shape 64,1,128,1,4096,512 \
  --shape 32,4,32,1,4096,512 --shape 16,1,128,1,16384,512 --variant q192= --variant q256="$Q" --no-peers 2>&1 \
  | grep -v "Warning\|return F.scaled" | cut -c1-900
timeout 40 python perf/variants.py --rounds 6 --per-round --shape 64,1,128,1,4096,512 --variant q192= \
  --variant q256="$Q" --no-peers 2>&1 | grep -v "Warning\|return F.scaled" | cut -c1-900
date -u
FMHA_NVCC_FLAGS="$Q" timeout 120 python -m pytest -q -n 8 tests/test_cuda.py -k 512 -p no:cacheprovider 2>&1 | tail -2
FMHA_NVCC_FLAGS="$Q" timeout 60 compute-sanitizer --tool racecheck python tests/sanitize_subset.py > $OUT/racecheck.log 2>&1
echo "racecheck: $(grep -E 'SUMMARY' $OUT/racecheck.log | tail -1) cases run: $(grep -c '^ran' $OUT/racecheck.log)"
date -u
