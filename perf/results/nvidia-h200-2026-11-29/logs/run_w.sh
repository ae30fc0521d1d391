#!/bin/bash
# Two tile groups (consumer warpgroups on alternate tiles) in the deep D=128 instantiation: CUDA + API
# tests, sanitizers, and variants (one group, 128x2 / 64x6 rings, 32-token TMA boxes, stream probes).
export PYTHONPATH=. FMHA_CACHE_DIR=$PWD/.build/cache21
date -u
timeout 200 python -m pytest -q -n 8 tests/test_cuda.py tests/test_api.py -x -p no:cacheprovider 2>&1 | tail -4 | cut -c1-400
timeout 120 compute-sanitizer --tool racecheck python tests/sanitize_subset.py 2>&1 | grep -E "ERROR|RACECHECK SUMMARY|hazard|nan" | head -8
timeout 120 compute-sanitizer --tool memcheck python tests/sanitize_subset.py 2>&1 | grep -E "ERROR SUMMARY|nan|Invalid" | head -8
timeout 260 python -W ignore perf/variants.py --rounds 3 --only 2,6,11,3,12,4 --variant tw2= --variant tw1=-DFMHA_SM90_DEEP_TILE_WGS=1 --variant s2=-DFMHA_SM90_DEEP_SMALL_D_STAGES=4 --variant t64=-DFMHA_SM90_DEEP_D128_TILE_N=64 --variant box32=-DFMHA_SM90_TMA_BOX_ROWS=32 --variant stream=-DFMHA_SM90_PROBE_STREAM_ONLY=1 --variant streambox="-DFMHA_SM90_PROBE_STREAM_ONLY=1 -DFMHA_SM90_TMA_BOX_ROWS=32" 2>&1 | grep -v Warn | sed 's/maxdiff \([0-9.e-]*\)/md=\1/g'
date -u
