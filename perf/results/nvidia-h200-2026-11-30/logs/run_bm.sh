#!/bin/bash
# With the final kernel (run bl): the deep variant's TMA box height (32 tokens now; 64 or 128: fewer TMA
# issues per tile) and the early operand wait at D=128 (off), on the split-KV shapes and T=4; the ncu
# of T=16 (run bi) had the consumer waiting on K tiles most.
export PYTHONPATH=. FMHA_CACHE_DIR=$PWD/.build/cache60
date -u; nvidia-smi --query-gpu=name,serial,power.limit --format=csv,noheader
timeout 200 python -W ignore perf/variants.py --sustained --rounds 5 --only 6,2,3,13,4,5 --no-peers --variant head= \
  --variant tbr64=-DFMHA_SM90_TMA_BOX_ROWS=64 --variant tbr128=-DFMHA_SM90_TMA_BOX_ROWS=128 \
  --variant eow0=-DFMHA_SM90_EARLY_OPERAND_WAIT=0 2>&1 | grep -v Warn | sed 's/maxdiff \([0-9.e-]*\)/md=\1/g'
date -u
