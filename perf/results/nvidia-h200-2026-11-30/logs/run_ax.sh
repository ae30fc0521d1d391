#!/bin/bash
# D=512: three quarters of each warpgroup's Q half in registers (q192: 48 registers; the producer warpgroup
# keeps 24 so the consumers get 240) vs head (128 columns) vs p24 (head with the 24/240 split), sustained
# (as the suite times) and per replay; GPU power/clock beside it.
export PYTHONPATH=. FMHA_CACHE_DIR=$PWD/.build/cache47
date -u
V=(--no-peers --per-round --variant head= --variant "q192=-DFMHA_SM90_D512_Q_REGS=192 -DFMHA_SM90_PRODUCER_REGS=24" --variant p24=-DFMHA_SM90_PRODUCER_REGS=24)
timeout 150 python -W ignore perf/variants.py --sustained --rounds 7 --only 10,9 "${V[@]}" 2>&1 | grep -v Warn | sed 's/maxdiff \([0-9.e-]*\)/md=\1/g'
date -u
timeout 100 python -W ignore perf/variants.py --rounds 7 --only 10 "${V[@]}" 2>&1 | grep -v Warn | sed 's/maxdiff \([0-9.e-]*\)/md=\1/g'
date -u
