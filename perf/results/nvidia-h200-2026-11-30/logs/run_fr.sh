#!/bin/bash
# Eighteenth session: the kernels whose SASS the head pairs changed (D = 128 deep and stream: the pair code in the
# narrow loop; D = 64 and 256: register allocation only), the previous library (cache137, SASS-identical to run
# fi's) against cache141, interleaved; then D=128 B64 S16384 (unchanged kernel, 0.1% behind cuDNN per replay in
# run fq's suite) against cuDNN.
export PYTHONPATH=. FMHA_CACHE_DIR=$PWD/.build/cache141
date -u; nvidia-smi --query-gpu=name,serial --format=csv,noheader
timeout 200 python perf/variants.py --rounds 5 --per-round --no-peers --lib prev=.build/cmp/prev.so --variant new= \
  --shape 8,16,32,8,8192,128 --shape 1,1,32,8,65536,128 --shape 16,1,32,8,32768,128 --shape 1,1,32,8,8192,128 \
  --shape 8,1,32,8,8192,128 --shape 32,1,16,8,8192,256 --shape 16,1,32,8,65536,64 --shape 1,1,32,8,65536,64 2>&1 \
  | grep -v "Warning\|return F.scaled" | cut -c1-700
date -u
timeout 120 python perf/variants.py --rounds 6 --per-round --shape 64,1,32,8,16384,128 --variant cuda= 2>&1 \
  | grep -v "Warning\|return F.scaled" | cut -c1-900
date -u
