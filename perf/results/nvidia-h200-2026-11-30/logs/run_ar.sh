#!/bin/bash
# D=512 with the early operand wait now that its V ring has three stages (it lost 8% on two, run an).
export PYTHONPATH=. FMHA_CACHE_DIR=$PWD/.build/cache43
date -u
timeout 100 python -W ignore perf/variants.py --rounds 5 --only 10,9 --no-peers --variant head= --variant early512=-DFMHA_SM90_EARLY_OPERAND_WAIT_D512=1 2>&1 | grep -v Warn | sed 's/maxdiff \([0-9.e-]*\)/md=\1/g'
date -u
