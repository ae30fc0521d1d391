#!/bin/bash
# Uniform warpgroup index with the old wait placement (head) vs run ai's library; interior tiles without
# mask compares (edge); then the D=512 Hq=128 consumer's stall profile per SASS line for the next step.
export PYTHONPATH=. FMHA_CACHE_DIR=$PWD/.build/cache36
date -u
timeout 200 python -W ignore perf/variants.py --rounds 3 --only 10,9,0,2,6,5 --no-peers --variant head= --variant edge=-DFMHA_SM90_EDGE_MASK_ONLY=1 --lib ai=$(ls $PWD/.build/prev/libfmha_sm_90a_cbbdb31879dfb184_*.so) 2>&1 | grep -v Warn | sed 's/maxdiff \([0-9.e-]*\)/md=\1/g'
date -u
timeout 150 ncu --clock-control none -k regex:decode_kernel -s 1 -c 1 --section SourceCounters --section WarpStateStats --section SpeedOfLight \
  --metrics sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active -o $OUT/d512b -f \
  python perf/ncu_probe.py --shape 64,1,128,1,4096,512 --iters 1 > $OUT/ncu_d512b.txt 2>&1
ncu -i $OUT/d512b.ncu-rep --page details 2>&1 | grep -E "Duration|hmma|Issue|Warp Cycles|Throughput" | cut -c1-120
ncu -i $OUT/d512b.ncu-rep --page source --csv --print-source sass > $OUT/d512b_sass.csv 2>&1
rm -f $OUT/d512b.ncu-rep
date -u
