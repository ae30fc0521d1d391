#!/bin/bash
# Fourteenth session: run ea showed cuDNN's kernel on B16 S32768 (an sm80 kernel: 128 CTAs of 128 threads, 86 KB
# of shared memory) at 93% of DRAM peak against our deep kernel's 91% with a 192 KB K/V ring. Ring bytes of the
# deep D = 128 instantiation: base (cache106: 3 stages of 128 tokens, 192 KB), s4 (2 x 128 tokens, 128 KB),
# t64s4 (4 x 64, 128 KB), t64s3 (3 x 64, 96 KB), t64s2 (2 x 64, 64 KB). 5 rounds, back to back, with the peers.
export PYTHONPATH=. FMHA_CACHE_DIR=$PWD/.build/cache106
date -u; nvidia-smi --query-gpu=name,serial --format=csv,noheader
V="--lib base=.build/cache106/libfmha_sm_90a_d7a5d0392c674b5c_ba1db6eb.so
 --lib s4=.build/cache109/libfmha_sm_90a_13af7d86be0f480d_ba1db6eb.so
 --lib t64s4=.build/cache109/libfmha_sm_90a_0d56e0bfeb0bd327_ba1db6eb.so
 --lib t64s3=.build/cache110/libfmha_sm_90a_5cbc583318969b3e_ba1db6eb.so
 --lib t64s2=.build/cache110/libfmha_sm_90a_d616915ad0996669_ba1db6eb.so"
timeout 420 python -W ignore perf/variants.py --sustained --rounds 5 $V --only 12,11,2,6,3 2>&1 | grep -v Warn
date -u
