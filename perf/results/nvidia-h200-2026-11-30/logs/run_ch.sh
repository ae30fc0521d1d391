#!/bin/bash
# The full perf suite in both regimes in one run (--also-separate, new): calls back to back (the main
# table) and each call followed by a one-element add (the second table). Device code as run by's.
export PYTHONPATH=. FMHA_CACHE_DIR=$PWD/.build/cache79
date -u; nvidia-smi --query-gpu=name,serial,power.limit --format=csv,noheader
F='GB/s|ceilings|wrote|done'
timeout 420 python -m perf --preset full --also-separate --budget-s 300 --out $OUT/perf-full 2>&1 | tr '\r' '\n' | grep -E "$F" | grep -v "^\s*$" | cut -c1-330
date -u
