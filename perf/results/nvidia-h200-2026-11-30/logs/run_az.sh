#!/bin/bash
# Largest shared-memory carveout requested for the decode and combine kernels (co1), so that an SM does
# not switch its L1/shared split between them: split-KV shapes and two unsplit ones, timed --sustained.
export PYTHONPATH=. FMHA_CACHE_DIR=$PWD/.build/cache48
date -u
timeout 200 python -W ignore perf/variants.py --sustained --rounds 5 --only 2,3,6,4,11,12,0 --per-round --no-peers --variant head= \
  --variant co1=-DFMHA_SM90_MAX_SHARED_CARVEOUT=1 2>&1 | grep -v Warn | sed 's/maxdiff \([0-9.e-]*\)/md=\1/g'
date -u
