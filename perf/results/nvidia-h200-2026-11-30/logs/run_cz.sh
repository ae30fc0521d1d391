#!/bin/bash
# Why the last-CTA merge is slow (runs ct-cx): ncu source counters (stall samples per SASS instruction) of one
# T=16 call with the merge in the last CTAs. Runs from exp_lsm/, a copy of commit 8d27e0d's fmha/ perf/ tests/
# (not committed), its library prebuilt in exp_lsm/.build/c1.
cd exp_lsm
export PYTHONPATH=. FMHA_CACHE_DIR=$PWD/.build/c1
date -u
timeout 200 ncu --clock-control none -k regex:decode_kernel -s 1 -c 1 --section SourceCounters --section WarpStateStats \
  --section MemoryWorkloadAnalysis -o $OUT/lsm -f python perf/ncu_probe.py --shape 8,16,32,8,8192,128 --causal --iters 1 > $OUT/ncu_lsm.txt 2>&1
tail -3 $OUT/ncu_lsm.txt
ncu -i $OUT/lsm.ncu-rep --page source --csv --print-source sass > $OUT/lsm_sass.csv 2>&1
ncu -i $OUT/lsm.ncu-rep --page details --print-details all > $OUT/lsm_details.txt 2>&1
ls -la $OUT; rm -f $OUT/lsm.ncu-rep
date -u
