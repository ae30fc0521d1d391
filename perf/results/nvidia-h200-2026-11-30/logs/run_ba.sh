#!/bin/bash
# Eager host cost of one fmha.attention call on this checkout (perf/overhead.py), and D=64 with a third
# K/V stage on its wide instantiation (d64s3) vs head, timed --sustained beside cuDNN.
export PYTHONPATH=. FMHA_CACHE_DIR=$PWD/.build/cache50
date -u
timeout 150 python perf/overhead.py 2>&1 | tail -30
date -u
timeout 120 python -W ignore perf/variants.py --sustained --rounds 5 --only 7 --per-round --variant head= \
  --variant d64s3=-DFMHA_SM90_D64_STAGES=3 2>&1 | grep -v Warn | sed 's/maxdiff \([0-9.e-]*\)/md=\1/g'
date -u
