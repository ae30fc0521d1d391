#!/bin/bash
# T=16 (B8 S8192, 64 packed rows, 2 splits): where the warps of our decode kernel stall (per SASS line)
# beside Triton's decode kernel (stall reasons per issued instruction); run alone our kernel takes
# 70-71 us vs Triton's 66-67 (run bh).
export PYTHONPATH=. FMHA_CACHE_DIR=$PWD/.build/cache55
date -u
for be in cuda triton; do
  k=decode_kernel; [ $be = triton ] && k=_decode_kernel
  timeout 150 ncu --clock-control none -k regex:$k -s 1 -c 1 --section SourceCounters --section WarpStateStats \
    --metrics regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio -o $OUT/t16_$be -f \
    python perf/ncu_probe.py --shape 8,16,32,8,8192,128 --causal --iters 1 --backend $be > $OUT/ncu_t16_$be.txt 2>&1
  echo "== $be"
  ncu -i $OUT/t16_$be.ncu-rep --page details --print-details all 2>&1 | grep -i "stalled\|Warp Cycles\|Duration" | awk '$NF+0 > 0.05' | cut -c1-140
  ncu -i $OUT/t16_$be.ncu-rep --page source --csv --print-source sass > $OUT/t16_${be}_sass.csv 2>&1
  rm -f $OUT/t16_$be.ncu-rep
done
date -u
