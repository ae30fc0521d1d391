#!/bin/bash
# Thirteenth session: MQA D=512 Hq=128 (at the 700 W cap) and T=16, the FFMA-folded softmax (new, cache99) against
# the library before it (old, cache98): 11 interleaved rounds each, per-replay timing (gaps between replays) and
# sustained (back to back), with every round printed.
export PYTHONPATH=. FMHA_CACHE_DIR=$PWD/.build/cache99
date -u; nvidia-smi --query-gpu=name,serial --format=csv,noheader
OLD=$(ls .build/cache98/libfmha_sm_90a_*.so); NEW=$(ls .build/cache99/libfmha_sm_90a_*.so)
timeout 120 python -W ignore perf/variants.py --rounds 11 --no-peers --per-round --lib old=$OLD --lib new=$NEW --only 10,6 2>&1 | grep -v Warn
timeout 150 python -W ignore perf/variants.py --sustained --rounds 11 --no-peers --per-round --lib old=$OLD --lib new=$NEW --only 10,6 2>&1 | grep -v Warn
date -u
