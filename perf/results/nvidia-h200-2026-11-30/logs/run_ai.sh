#!/bin/bash
# Descriptors built once per wgmma chain and advanced by an add (ptx::SmemDescSw128) instead of rebuilt per
# wgmma (run ah: 204 of the D=512 loop's 496 instructions a tile). CUDA tests, then every shape: head vs the
# rebuilt descriptors (-DFMHA_DESC_ADVANCE=0); D=512 also without the split Q K^T.
export PYTHONPATH=. FMHA_CACHE_DIR=$PWD/.build/cache32
date -u
timeout 150 python -m pytest -q -n 8 tests/test_cuda.py -p no:cacheprovider 2>&1 | tail -2
date -u
timeout 200 python -W ignore perf/variants.py --rounds 3 --no-peers --variant head= --variant desc0=-DFMHA_DESC_ADVANCE=0 2>&1 | grep -v Warn | sed 's/maxdiff \([0-9.e-]*\)/md=\1/g'
date -u
timeout 100 python -W ignore perf/variants.py --rounds 3 --only 10,9 --no-peers --variant head= --variant nosplit=-DFMHA_SM90_D512_SPLIT_QK=0 --lib bda8c61=$PWD/.build/old/libfmha_bda8c61.so 2>&1 | grep -v Warn | sed 's/maxdiff \([0-9.e-]*\)/md=\1/g'
date -u
