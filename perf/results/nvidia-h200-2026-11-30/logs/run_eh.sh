#!/bin/bash
# Fourteenth session: runs ef and eg (one H200, ceiling 4560) timed cuda on B64 S16384 at 995-999 us back to back
# (949-951 with an add after each call), where earlier runs on H200s of that ceiling took 946-956. The wide D = 128
# kernel's code changed this session (the warpgroup index is the constant 0 with one consumer warpgroup):
# old (cache101, the thirteenth session's library) against new (cache111), 5 rounds back to back.
export PYTHONPATH=. FMHA_CACHE_DIR=$PWD/.build/cache111
date -u; nvidia-smi --query-gpu=name,serial --format=csv,noheader
timeout 200 python -W ignore perf/variants.py --sustained --rounds 5 --per-round \
  --lib old=.build/cache101/libfmha_sm_90a_20f6b0aebf8a2f39_ba1db6eb.so --lib new=.build/cache111/libfmha_sm_90a_9be9b751c7e4a3ab_ba1db6eb.so \
  --shape 64,1,32,8,16384,128 --shape 128,1,32,8,8192,128 2>&1 | grep -v Warn
date -u
