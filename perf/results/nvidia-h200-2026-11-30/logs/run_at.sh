#!/bin/bash
# Sixth session, first call: the CUDA tests (test_d512_128_heads is new), then the D=512 suite/interleaved
# disagreement: head (Q regs + 3 V stages) vs v2 (Q regs, 2 V stages) vs qr0 (run ao's D=512 code),
# timed --sustained (as the suite times) and per replay (as runs ap/aq timed).
export PYTHONPATH=. FMHA_CACHE_DIR=$PWD/.build/cache47
date -u; nvidia-smi --query-gpu=name,power.limit,clocks.max.sm,temperature.gpu --format=csv,noheader
timeout 150 python -m pytest -q -n 8 tests/test_cuda.py -p no:cacheprovider 2>&1 | tail -2
date -u
V="--no-peers --variant head= --variant v2=-DFMHA_SM90_D512_V_STAGES=2 --variant qr0=-DFMHA_SM90_D512_Q_REGS=0"
timeout 170 python -W ignore perf/variants.py --sustained --rounds 5 --only 10,9,6 $V 2>&1 | grep -v Warn | sed 's/maxdiff \([0-9.e-]*\)/md=\1/g'
date -u
timeout 150 python -W ignore perf/variants.py --rounds 5 --only 10,9,6 $V 2>&1 | grep -v Warn | sed 's/maxdiff \([0-9.e-]*\)/md=\1/g'
date -u
