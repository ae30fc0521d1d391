#!/bin/bash
# D=512 Hq=128: (1) does compiling the cluster merge out of the D=512 instantiation (5399441) recover
# bda8c61's time? (2) where the consumer warps of that kernel wait (ncu source counters, per SASS line).
export PYTHONPATH=. FMHA_CACHE_DIR=$PWD/.build/cache31
date -u
timeout 120 python -W ignore perf/variants.py --rounds 5 --only 10,9 --no-peers --variant head= --lib bda8c61=$PWD/.build/old/libfmha_bda8c61.so 2>&1 | grep -v Warn | sed 's/maxdiff \([0-9.e-]*\)/md=\1/g'
date -u
timeout 150 ncu --clock-control none -k regex:decode_kernel -s 1 -c 1 --section SourceCounters --section WarpStateStats \
  --metrics regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio -o $OUT/d512 -f \
  python perf/ncu_probe.py --shape 64,1,128,1,4096,512 --iters 1 > $OUT/ncu_d512.txt 2>&1
ncu -i $OUT/d512.ncu-rep --page details --print-details all 2>&1 | grep -i "stalled\|Warp Cycles" | awk '$NF+0 > 0.05' | cut -c1-140
ncu -i $OUT/d512.ncu-rep --page source --csv --print-source sass > $OUT/d512_sass.csv 2>&1 || ncu -i $OUT/d512.ncu-rep --page source --csv > $OUT/d512_sass.csv 2>&1
ls -la $OUT; head -c 600 $OUT/d512_sass.csv
rm -f $OUT/d512.ncu-rep
date -u
