#!/bin/bash
# The K/V stream alone (FMHA_SM90_PROBE_STREAM_ONLY) under TMA box rows, grid order, evict-first and L2
# promotion; the real kernel with 32-token boxes and heads-first grid order.
export PYTHONPATH=. FMHA_CACHE_DIR=$PWD/.build/cache23
S=-DFMHA_SM90_PROBE_STREAM_ONLY=1
date -u
timeout 300 python -W ignore perf/variants.py --rounds 3 --only 2,6,11,12,0,3 --variant st="$S" --variant st_box32="$S -DFMHA_SM90_TMA_BOX_ROWS=32" --variant st_box16="$S -DFMHA_SM90_TMA_BOX_ROWS=16" --variant st_heads="$S -DFMHA_SM90_GRID_HEADS_FIRST=1" --variant st_noevict="$S -DFMHA_SM90_KV_EVICT_FIRST=0" --variant st_promo0="$S -DFMHA_SM90_L2_PROMOTION=0" --variant st_promo64="$S -DFMHA_SM90_L2_PROMOTION=64" 2>&1 | grep -v Warn | sed 's/maxdiff \([0-9.e-]*\)/md=\1/g'
timeout 250 python -W ignore perf/variants.py --rounds 3 --only 2,6,11,12,0,3,7,4 --variant base= --variant box32=-DFMHA_SM90_TMA_BOX_ROWS=32 --variant heads=-DFMHA_SM90_GRID_HEADS_FIRST=1 --variant box32heads="-DFMHA_SM90_TMA_BOX_ROWS=32 -DFMHA_SM90_GRID_HEADS_FIRST=1" 2>&1 | grep -v Warn | sed 's/maxdiff \([0-9.e-]*\)/md=\1/g'
date -u
