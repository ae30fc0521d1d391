#!/bin/bash
# Fourteenth session: (wg) the warpgroup index read from lane 0 (warp-uniform to the compiler: the D = 512 loop's
# descriptors in uniform registers, R2UR 89 -> 8 in its SASS; cache105), (c2q128) D = 512 Q K^T in two accumulator
# chains with 128 Q columns in registers (cache103), (q128) 128 Q columns alone (cache104), against the thirteenth
# session's final library (old, cache101). Tests first: the whole CUDA test file with wg, then with c2q128.
export PYTHONPATH=. FMHA_CACHE_DIR=$PWD/.build/cache105
date -u; nvidia-smi --query-gpu=name,serial --format=csv,noheader
timeout 120 python -m pytest -q -n 8 tests/test_cuda.py -p no:cacheprovider 2>&1 | tail -2
FMHA_CACHE_DIR=$PWD/.build/cache103 FMHA_NVCC_FLAGS="-DFMHA_SM90_D512_QK_CHAINS=2 -DFMHA_SM90_D512_Q_REGS=128" \
  timeout 120 python -m pytest -q -n 8 tests/test_cuda.py -p no:cacheprovider -k "512 or mqa or MQA" 2>&1 | tail -2
OLD=$(ls .build/cache101/libfmha_sm_90a_*.so); WG=$(ls .build/cache105/libfmha_sm_90a_*.so)
C2=$(ls .build/cache103/libfmha_sm_90a_*.so); Q128=$(ls .build/cache104/libfmha_sm_90a_*.so)
V="--no-peers --per-round --lib old=$OLD --lib wg=$WG --lib c2q128=$C2 --lib q128=$Q128"
timeout 100 python -W ignore perf/variants.py --rounds 11 $V --only 10 2>&1 | grep -v Warn
timeout 120 python -W ignore perf/variants.py --sustained --rounds 11 $V --only 10,9 2>&1 | grep -v Warn
timeout 200 python -W ignore perf/variants.py --sustained --rounds 5 --no-peers --lib old=$OLD --lib wg=$WG \
  --only 0,1,2,3,4,5,6,7,8,11,12,13,14,15 2>&1 | grep -v Warn
date -u
