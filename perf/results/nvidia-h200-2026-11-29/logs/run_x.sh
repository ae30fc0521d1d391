#!/bin/bash
# L2 prefetch of K/V tiles beyond the shared-memory ring (FMHA_SM90_L2_PREFETCH_TILES), with one and
# two tile groups; racecheck of the tile-group merge (now two bar.sync).
export PYTHONPATH=. FMHA_CACHE_DIR=$PWD/.build/cache22
date -u
timeout 120 compute-sanitizer --tool racecheck python tests/sanitize_subset.py 2>&1 | grep -E "ERROR|RACECHECK SUMMARY|nan" | head -4 | cut -c1-300
timeout 400 python -W ignore perf/variants.py --rounds 3 --only 2,6,11,3,0,12,10,7 --variant tw2= --variant tw1=-DFMHA_SM90_DEEP_TILE_WGS=1 --variant tw1pf2="-DFMHA_SM90_DEEP_TILE_WGS=1 -DFMHA_SM90_L2_PREFETCH_TILES=2" --variant tw1pf4="-DFMHA_SM90_DEEP_TILE_WGS=1 -DFMHA_SM90_L2_PREFETCH_TILES=4" --variant tw2pf2=-DFMHA_SM90_L2_PREFETCH_TILES=2 --variant tw2pf4=-DFMHA_SM90_L2_PREFETCH_TILES=4 --variant tw2t64pf4="-DFMHA_SM90_DEEP_D128_TILE_N=64 -DFMHA_SM90_L2_PREFETCH_TILES=4" 2>&1 | grep -v Warn | sed 's/maxdiff \([0-9.e-]*\)/md=\1/g'
date -u
