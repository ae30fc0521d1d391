#!/bin/bash
# Unit-alpha rescale skip gated to D >= 256 (noskip: off everywhere); split Q K^T at D=512 again;
# 256 B L2 promotion (D=64 suspect: 128 B rows); D=64 on the deep instantiation (2 waves).
export PYTHONPATH=. FMHA_CACHE_DIR=$PWD/.build/cache11
date -u
timeout 400 python -W ignore perf/variants.py --rounds 3 --only 10,9,8,7,0,5 --variant base= --variant noskip=-DFMHA_SM90_SKIP_UNIT_RESCALE_MIN_D=1024 --variant splitqk=-DFMHA_SM90_D512_SPLIT_QK=1 --variant l2p256=-DFMHA_SM90_L2_PROMOTION=256 --variant deep=@deep 2>&1 | grep -v Warn | sed 's/maxdiff \([0-9.e-]*\)/md=\1/g'
date -u
