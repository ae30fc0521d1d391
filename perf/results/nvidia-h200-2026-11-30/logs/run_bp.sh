#!/bin/bash
# Calls separated by another kernel (perf/variants.py --separate: a one-element add launched without PDL
# after every call, its own time subtracted): what our split-KV and small shapes measure when a call
# cannot overlap the previous call of the same op (run bo: PDL's overlap is worth 1.2 us on B1 S65536).
export PYTHONPATH=. FMHA_CACHE_DIR=$PWD/.build/cache60
date -u; nvidia-smi --query-gpu=name,serial,power.limit --format=csv,noheader
timeout 150 python -W ignore perf/variants.py --sustained --separate --rounds 5 --only 2,3,4,6,13,1 --variant head= \
  2>&1 | grep -v Warn | sed 's/maxdiff \([0-9.e-]*\)/md=\1/g'
date -u
