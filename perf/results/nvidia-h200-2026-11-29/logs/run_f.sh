#!/bin/bash
export PYTHONPATH=. FMHA_CACHE_DIR=$PWD/.build/cache4
timeout 200 python -W ignore perf/variants.py --rounds 3 --only 2,3,4,6 --variant fused= --variant separate=+separate-combine 2>&1 | grep -v Warn | sed 's/maxdiff \([0-9.e-]*\)/md=\1/g'
