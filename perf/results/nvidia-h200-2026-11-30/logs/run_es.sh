#!/bin/bash
# Sixteenth session: D = 512, 3 K / 2 V stages against the default 2 / 3 (cache124, as run er), sustained,
# 16 rounds with every round printed, on the target shape and two more of the 64-row loop.
export PYTHONPATH=. FMHA_CACHE_DIR=$PWD/.build/cache124
R="-DFMHA_SM90_D512_K_STAGES=3 -DFMHA_SM90_D512_V_STAGES=2"
date -u; nvidia-smi --query-gpu=name,serial,power.limit --format=csv,noheader
timeout 300 python perf/variants.py --sustained --rounds 16 --per-round --shape 64,1,128,1,4096,512 \
  --shape 64,1,64,1,4096,512 --shape 32,2,128,1,4096,512 --variant base= --variant k3v2="$R" --no-peers \
  2>&1 | grep -v "Warning\|return F.scaled" | cut -c1-900
date -u
