#!/bin/bash
export PYTHONPATH=. FMHA_CACHE_DIR=$PWD/.build/cache3
date -u
echo "=== variants (interleaved)"
timeout 300 python -W ignore perf/variants.py --rounds 3 --variant base= --variant deep2x2="-DFMHA_SM90_DEEP_CTAS_PER_SM=2 -DFMHA_SM90_DEEP_SMALL_D_STAGES=2" --variant d64t64=-DFMHA_SM90_D64_TILE_N=64 --variant d512t16="-DFMHA_SM90_D512_TILE_N=16 -DFMHA_SM90_D512_STAGES=4" 2>&1 | grep -v Warn | sed 's/maxdiff \([0-9.e-]*\)/md=\1/g'
echo "=== ncu split-KV (clocks free)"
timeout 90 ncu --clock-control none --metrics gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed -c 4 python perf/ncu_probe.py --shape 1,1,32,8,65536,128 --iters 1 2>&1 | grep -E "decode_kernel|combine_splits|gpu__time|dram__" | cut -c1-150
date -u
