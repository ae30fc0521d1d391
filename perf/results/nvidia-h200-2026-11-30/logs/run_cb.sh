#!/bin/bash
# B1 S65536's first K tile reaches its consumer 7.7 us after the grid-dependency wait in one call alone,
# 2.7 us on T=16 and 2.2 on B8 S8192, which have the same bytes, grid size and key ranges (run bs); the
# grid order differs (B1: the 8 KV heads of one key range are 16 CTAs apart in launch order). Grid with the
# KV head in blockIdx.x (FMHA_SM90_GRID_HEADS_FIRST=1, hf): probe of one call, then timed with an add
# after every call (--separate, the model-like regime) and back to back; prev = run by's library.
export PYTHONPATH=. FMHA_CACHE_DIR=$PWD/.build/cache71
date -u; nvidia-smi --query-gpu=name,serial,power.limit --format=csv,noheader
P="timeout 60 python -W ignore perf/stream_probe.py --shape 1,1,32,8,65536,128"
$P 2>&1 | grep -E "griddep -> first|stream\)|tail\)|span"
$P --flags=-DFMHA_SM90_GRID_HEADS_FIRST=1 2>&1 | grep -E "griddep -> first|stream\)|tail\)|span"
V="timeout 150 python -W ignore perf/variants.py --sustained --rounds 5 --variant head= --variant hf=-DFMHA_SM90_GRID_HEADS_FIRST=1 --lib prev=$PWD/.build/cache71/prev.so"
$V --separate --only 2,11,3,6 2>&1 | grep -v Warn | sed 's/maxdiff \([0-9.e-]*\)/md=\1/g'
$V --only 2,6 --no-peers 2>&1 | grep -v Warn | sed 's/maxdiff \([0-9.e-]*\)/md=\1/g'
date -u
