#!/bin/bash
# Fourteenth session: run dx's D = 512 A/B again with the library paths written out (in dx the ls of cache103 gave
# two files: the test run before it had built one more there). old = cache101, wg = cache105, c2q128 = cache103,
# q128 = cache104 (see run_dx.sh).
export PYTHONPATH=. FMHA_CACHE_DIR=$PWD/.build/cache105
date -u; nvidia-smi --query-gpu=name,serial --format=csv,noheader
ls .build/cache103 .build/cache105
V="--no-peers --per-round --lib old=.build/cache101/libfmha_sm_90a_20f6b0aebf8a2f39_ba1db6eb.so
 --lib wg=.build/cache105/libfmha_sm_90a_714155984bdedb81_ba1db6eb.so
 --lib c2q128=.build/cache103/libfmha_sm_90a_4d00012b8da2846b_ba1db6eb.so
 --lib q128=.build/cache104/libfmha_sm_90a_22188aff66ebcf54_ba1db6eb.so"
timeout 100 python -W ignore perf/variants.py --rounds 11 $V --only 10 2>&1 | grep -v Warn
timeout 150 python -W ignore perf/variants.py --sustained --rounds 11 $V --only 10,9 2>&1 | grep -v Warn
date -u
