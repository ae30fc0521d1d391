#!/bin/bash
# Fourteenth session: the warpgroup index read from lane 0 (0 where one consumer warpgroup; cache106, the sources of
# this commit): the CUDA tests; then the long narrow-loop shapes, where cuda trails cuDNN by 0.1-0.5% and Triton by
# about 1%, against stream knobs: K/V without the L2 evict-first policy (ef0), 64-token TMA boxes (box64), 64-token
# tiles of the deep D = 128 instantiation (t64; six stages, the same ring bytes); old = cache101. 5 rounds, back to
# back, with the peers.
export PYTHONPATH=. FMHA_CACHE_DIR=$PWD/.build/cache106
date -u; nvidia-smi --query-gpu=name,serial --format=csv,noheader
timeout 120 python -m pytest -q -n 8 tests/test_cuda.py -p no:cacheprovider 2>&1 | tail -2
V="--lib old=.build/cache101/libfmha_sm_90a_20f6b0aebf8a2f39_ba1db6eb.so
 --lib new=.build/cache106/libfmha_sm_90a_d7a5d0392c674b5c_ba1db6eb.so
 --lib ef0=.build/cache107/libfmha_sm_90a_fc35369e53b0c2e4_ba1db6eb.so
 --lib box64=.build/cache107/libfmha_sm_90a_07b9715ae71ea36b_ba1db6eb.so
 --lib t64=.build/cache108/libfmha_sm_90a_a32c25858d8674c8_ba1db6eb.so"
timeout 420 python -W ignore perf/variants.py --sustained --rounds 5 $V --only 11,12,7,2,0,6 2>&1 | grep -v Warn
date -u
