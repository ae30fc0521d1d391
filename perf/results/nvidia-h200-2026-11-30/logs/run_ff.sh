#!/bin/bash
# Seventeenth session: where the seesaw wins and loses at D = 512, against the split-Q K^T loop (SEESAW=0):
# MQA head counts 16..128 (16..128 packed rows at T = 1), T = 4 (64 and 128 rows), long split-KV caches.
# Libraries prebuilt in cache132 (the final device code).
export PYTHONPATH=. FMHA_CACHE_DIR=$PWD/.build/cache132
OLD="-DFMHA_SM90_D512_SEESAW=0"
date -u; nvidia-smi --query-gpu=name,serial --format=csv,noheader
timeout 200 python perf/variants.py --sustained --rounds 6 --per-round --shape 128,1,16,1,4096,512 \
  --shape 64,1,32,1,4096,512 --shape 64,1,64,1,4096,512 --shape 64,1,128,1,4096,512 --shape 32,4,16,1,4096,512 \
  --shape 32,4,32,1,4096,512 --shape 1,1,128,1,65536,512 --shape 16,1,128,1,16384,512 --variant seesaw= \
  --variant split="$OLD" --no-peers 2>&1 | grep -v "Warning\|return F.scaled" | cut -c1-900
date -u
