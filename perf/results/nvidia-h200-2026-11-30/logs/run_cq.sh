#!/bin/bash
# Pipelined narrow loop (FMHA_SM90_NARROW_OVERLAP=1, decode_kernel.cuh NarrowPipe): S^T of tile it+1 issued with
# P V of tile it, its softmax while P V(it) runs, P^T double-buffered in the spare rows of Q's first two boxes
# (D = 128 and 256; D = 64 keeps the serial loop). head = that; ser = -DFMHA_SM90_NARROW_OVERLAP=0 (the serial
# loop, refactored into NarrowLoop); prev = run by's library. Tests + sanitizers on head, then the A/B on the
# narrow shapes with the peers.
export PYTHONPATH=. FMHA_CACHE_DIR=$PWD/.build/cache84
date -u; nvidia-smi --query-gpu=name,serial --format=csv,noheader
timeout 240 python -m pytest -q -n 8 tests/ -p no:cacheprovider 2>&1 | tail -2
for t in memcheck racecheck synccheck; do
  timeout 150 compute-sanitizer --tool $t python tests/sanitize_subset.py 2>&1 | grep -E "SUMMARY|NOT in|nan" | tail -3
done
date -u
timeout 330 python -W ignore perf/variants.py --sustained --rounds 5 --variant head= --variant ser=-DFMHA_SM90_NARROW_OVERLAP=0 \
  --lib prev=$PWD/.build/cache84/prev.so --only 2,11,12,13,3,4,8,7 2>&1 | grep -v Warn
date -u
