#!/bin/bash
# Fourteenth session: run ed confirmed the 64 KB ring's gain on unsplit B16 grids with an add after each call and
# under ncu (kernel alone 481-483 vs 486-489 us, DRAM 92.4-92.8% vs 91.4-91.9%). The wide D = 128 instantiation has
# that ring already (64-token tiles, two stages) but runs the 64-row loop; nw = the narrow loop enabled there
# (FMHA_SM90_NARROW_D128_WIDE=1, off since run s: B128 S8192 +1.2%; the narrow loop has got leaner since):
# nw with the plan's choice (the wide shapes) and nw@wide (also the unsplit B16 grids forced wide), against base
# (cache106) and t64s2 (cache110). 5 rounds, back to back, with the peers.
export PYTHONPATH=. FMHA_CACHE_DIR=$PWD/.build/cache106
date -u; nvidia-smi --query-gpu=name,serial --format=csv,noheader
V="--lib base=.build/cache106/libfmha_sm_90a_d7a5d0392c674b5c_ba1db6eb.so
 --lib t64s2=.build/cache110/libfmha_sm_90a_d616915ad0996669_ba1db6eb.so"
timeout 400 python -W ignore perf/variants.py --sustained --rounds 5 $V --variant "nw=-DFMHA_SM90_NARROW_D128_WIDE=1" \
  --variant "nw@wide=-DFMHA_SM90_NARROW_D128_WIDE=1 @wide" --shape 128,1,32,8,8192,128 --shape 32,1,32,8,4096,128 \
  --shape 32,4,32,8,4096,128 --shape 64,1,32,8,16384,128 --shape 16,1,32,8,32768,128 --shape 16,4,32,8,32768,128 \
  --shape 16,1,32,8,8192,128 2>&1 | grep -v Warn
date -u
