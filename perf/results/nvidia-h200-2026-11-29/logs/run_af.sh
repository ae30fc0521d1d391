#!/bin/bash
# Is MQA D=512 Hq=128 slower than at commit bda8c61 (run t: 222.6 us; run ae: 236.2)? The kernel's SASS
# changed (register allocation around the new epilogue). Same process, interleaved: this checkout vs a
# library built from bda8c61 (nvcc 13.0, same flags).
export PYTHONPATH=. FMHA_CACHE_DIR=$PWD/.build/cache29
date -u
timeout 150 python -W ignore perf/variants.py --rounds 5 --only 10,9,0 --no-peers --variant head= --lib bda8c61=$PWD/.build/old/libfmha_bda8c61.so 2>&1 | grep -v Warn | sed 's/maxdiff \([0-9.e-]*\)/md=\1/g'
date -u
