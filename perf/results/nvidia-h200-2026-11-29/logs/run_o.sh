#!/bin/bash
# Split-KV shapes on the wide instantiation (2 CTAs/SM) with twice the splits, against the plan (deep, 1 CTA/SM).
export PYTHONPATH=. FMHA_CACHE_DIR=$PWD/.build/cache14
date -u
timeout 100 python -W ignore perf/variants.py --rounds 5 --only 6 --variant base= --variant wide4="@wide @splits=4" --variant deep4="@deep @splits=4" --no-peers 2>&1 | grep -v Warn | sed 's/maxdiff \([0-9.e-]*\)/md=\1/g'
timeout 100 python -W ignore perf/variants.py --rounds 5 --only 2,3 --variant base= --variant wide32="@wide @splits=32" --variant wide33="@wide @splits=33" --no-peers 2>&1 | grep -v Warn | sed 's/maxdiff \([0-9.e-]*\)/md=\1/g'
date -u
