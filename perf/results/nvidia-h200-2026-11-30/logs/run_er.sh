#!/bin/bash
# Sixteenth session: after run eq, the Q K^T-ahead loop removed again (kernels' SASS identical to cache122's);
# FMHA_SM90_D512_K_STAGES kept as a knob. Longer interleaved comparisons: D = 512 with 3 K / 2 V stages against
# the default 2 / 3 (sustained and per replay, 10 rounds), and D = 64 B32 S8192 against cuDNN (the 0.2% miss).
export PYTHONPATH=. FMHA_CACHE_DIR=$PWD/.build/cache124
R="-DFMHA_SM90_D512_K_STAGES=3 -DFMHA_SM90_D512_V_STAGES=2"
date -u; nvidia-smi --query-gpu=name,serial,power.limit --format=csv,noheader
timeout 200 python perf/variants.py --sustained --rounds 10 --shape 64,1,128,1,4096,512 --shape 128,1,16,1,4096,512 \
  --variant base= --variant k3v2="$R" 2>&1 | grep -v "Warning\|return F.scaled" | cut -c1-700
date -u
timeout 100 python perf/variants.py --rounds 10 --shape 64,1,128,1,4096,512 --variant base= --variant k3v2="$R" \
  --no-peers 2>&1 | grep -v "Warning\|return F.scaled" | cut -c1-700
date -u
timeout 150 python perf/variants.py --sustained --rounds 12 --shape 32,1,32,8,8192,64 --shape 64,1,32,8,8192,64 \
  --variant base= 2>&1 | grep -v "Warning\|return F.scaled" | cut -c1-700
date -u
