#!/bin/bash
# The two long serving shapes behind cuDNN in run by (B1 S262144 by 1.8%, B16 S32768 by 0.5%) run one
# deep CTA per SM for 230-470 us, so the slowest SMs (run bv) set the time. Plans with 2 CTAs per SM
# (wide) or a second wave, where per-CTA start-up is amortised over 64+ tiles. Sustained, with peers.
export PYTHONPATH=. FMHA_CACHE_DIR=$PWD/.build/cache69
date -u; nvidia-smi --query-gpu=name,serial,power.limit --format=csv,noheader
V="timeout 150 python -W ignore perf/variants.py --sustained --rounds 5"
$V --only 11 --variant head= --variant w33="@wide @splits=33" --variant w66="@wide @splits=66" \
  --variant d32="@deep @splits=32" 2>&1 | grep -v Warn | sed 's/maxdiff \([0-9.e-]*\)/md=\1/g'
$V --only 12 --variant head= --variant w1="@wide @splits=1" --variant w2="@wide @splits=2" \
  --variant d2="@deep @splits=2" 2>&1 | grep -v Warn | sed 's/maxdiff \([0-9.e-]*\)/md=\1/g'
date -u
