#!/bin/bash
# Eighteenth session: the KV-head-pair rule (backend.py _head_pairs) against the old plan (@wide) where it applies,
# and pairs forced (@pairs) where it does not (256 pairs, 64 pairs); per replay, then sustained and with an add.
export PYTHONPATH=. FMHA_CACHE_DIR=$PWD/.build/cache140
date -u; nvidia-smi --query-gpu=name,serial --format=csv,noheader
V='--variant cuda= --variant wide=@wide --variant pairs=@pairs'
timeout 200 python perf/variants.py --rounds 5 --per-round --shape 32,1,32,8,2048,64 --shape 32,1,32,8,32768,64 \
  --shape 32,2,32,8,8192,64 --shape 64,1,32,8,8192,64 --shape 16,1,32,8,32768,64 --shape 128,1,32,8,4096,64 $V 2>&1 \
  | grep -v "Warning\|return F.scaled" | cut -c1-1000
date -u
timeout 100 python perf/variants.py --rounds 8 --per-round --sustained --shape 32,1,32,8,8192,64 --variant cuda= --variant wide=@wide 2>&1 \
  | grep -v "Warning\|return F.scaled" | cut -c1-1000
timeout 100 python perf/variants.py --rounds 8 --per-round --separate --shape 32,1,32,8,8192,64 --variant cuda= --variant wide=@wide 2>&1 \
  | grep -v "Warning\|return F.scaled" | cut -c1-1000
date -u
