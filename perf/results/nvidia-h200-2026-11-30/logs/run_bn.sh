#!/bin/bash
# Final kernel: ncu stall sampling of T=16 again (after the Q-gather change; compare run bi), and ncu
# durations of the B1 S65536 decode kernels, ours vs Triton's (the "cold start" gap of runs au/aw).
export PYTHONPATH=. FMHA_CACHE_DIR=$PWD/.build/cache60
date -u
timeout 150 ncu --clock-control none -k regex:decode_kernel -s 1 -c 1 --section SourceCounters --section WarpStateStats \
  --section SpeedOfLight -o $OUT/t16 -f python perf/ncu_probe.py --shape 8,16,32,8,8192,128 --causal --iters 1 > $OUT/ncu_t16.txt 2>&1
ncu -i $OUT/t16.ncu-rep --page details 2>&1 | grep -E "Duration|DRAM Throughput|Warp Cycles Per Issued" | cut -c1-120
ncu -i $OUT/t16.ncu-rep --page source --csv --print-source sass > $OUT/t16_cuda_sass.csv 2>&1
rm -f $OUT/t16.ncu-rep
M=gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed
for be in cuda triton; do
  echo "== B1 S65536 $be"
  timeout 100 ncu --clock-control none --metrics $M python perf/ncu_probe.py --shape 1,1,32,8,65536,128 --iters 2 --backend $be 2>&1 \
    | grep -E "^  [a-zA-Z_]|duration|dram__" | cut -c1-110 | tail -12
done
date -u
