#!/bin/bash
# The per-SM stream spread is systematic (run bv), so with one CTA per SM the slowest SMs set the time.
# More CTAs than SMs let the block scheduler balance: a fast SM takes more of the later CTAs (each
# split still writes its own partial, so results stay deterministic). Split counts against the plan's
# (B1 S65536: 16 deep = 128 CTAs; T=16: 2 deep), sustained, default library.
export PYTHONPATH=. FMHA_CACHE_DIR=$PWD/.build/cache69
date -u; nvidia-smi --query-gpu=name,serial,power.limit --format=csv,noheader
V="timeout 120 python -W ignore perf/variants.py --sustained --rounds 5 --no-peers"
$V --only 2 --variant head= --variant d32="@deep @splits=32" --variant d48="@deep @splits=48" \
  --variant d64="@deep @splits=64" --variant w64="@wide @splits=64" --variant w96="@wide @splits=96" 2>&1 | grep -v Warn | sed 's/maxdiff \([0-9.e-]*\)/md=\1/g'
$V --only 6 --variant head= --variant d3="@deep @splits=3" --variant d4="@deep @splits=4" \
  --variant d6="@deep @splits=6" --variant w8="@wide @splits=8" 2>&1 | grep -v Warn | sed 's/maxdiff \([0-9.e-]*\)/md=\1/g'
$V --only 3 --variant head= --variant d32="@deep @splits=32" 2>&1 | grep -v Warn | sed 's/maxdiff \([0-9.e-]*\)/md=\1/g'
$V --only 13 --variant head= --variant d4="@deep @splits=4" --variant d6="@deep @splits=6" 2>&1 | grep -v Warn | sed 's/maxdiff \([0-9.e-]*\)/md=\1/g'
date -u
