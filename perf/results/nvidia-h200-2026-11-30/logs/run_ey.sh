#!/bin/bash
# Sixteenth session: PV_AFTER_QK=1 against the default, longer (12 rounds, every round printed), sustained on
# four D = 512 shapes of the 64-row loop and per replay on the target shape (cache126, as run ew).
export PYTHONPATH=. FMHA_CACHE_DIR=$PWD/.build/cache126
F="-DFMHA_SM90_PV_AFTER_QK=1"
date -u; nvidia-smi --query-gpu=name,serial,power.limit --format=csv,noheader
timeout 300 python perf/variants.py --sustained --rounds 12 --per-round --shape 64,1,128,1,4096,512 \
  --shape 32,2,128,1,4096,512 --shape 64,1,64,1,4096,512 --shape 128,1,16,1,4096,512 --variant base= \
  --variant pvafter="$F" --no-peers 2>&1 | grep -v "Warning\|return F.scaled" | cut -c1-900
date -u
timeout 100 python perf/variants.py --rounds 12 --per-round --shape 64,1,128,1,4096,512 --variant base= \
  --variant pvafter="$F" --no-peers 2>&1 | grep -v "Warning\|return F.scaled" | cut -c1-900
date -u
