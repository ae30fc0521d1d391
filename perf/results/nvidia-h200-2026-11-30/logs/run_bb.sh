#!/bin/bash
# D=512: a third K stage, made room for by one score-exchange buffer (k3x1), vs head, vs one exchange
# buffer alone (x1: the cost of the second barrier), vs three K and two V stages (k3v2). CUDA tests of
# D=512 on k3x1 first; timed --sustained and per replay.
export PYTHONPATH=. FMHA_CACHE_DIR=$PWD/.build/cache51
date -u
FMHA_NVCC_FLAGS="-DFMHA_SM90_D512_K_STAGES=3 -DFMHA_SM90_D512_EXCHANGE_BUFFERS=1" timeout 120 python -m pytest -q -n 8 tests/test_cuda.py -k "512" -p no:cacheprovider 2>&1 | tail -2
date -u
V=(--no-peers --per-round --variant head= --variant "k3x1=-DFMHA_SM90_D512_K_STAGES=3 -DFMHA_SM90_D512_EXCHANGE_BUFFERS=1" --variant x1=-DFMHA_SM90_D512_EXCHANGE_BUFFERS=1 --variant "k3v2=-DFMHA_SM90_D512_K_STAGES=3 -DFMHA_SM90_D512_V_STAGES=2")
timeout 150 python -W ignore perf/variants.py --sustained --rounds 5 --only 10,9 "${V[@]}" 2>&1 | grep -v Warn | sed 's/maxdiff \([0-9.e-]*\)/md=\1/g'
date -u
timeout 100 python -W ignore perf/variants.py --rounds 5 --only 10 "${V[@]}" 2>&1 | grep -v Warn | sed 's/maxdiff \([0-9.e-]*\)/md=\1/g'
date -u
