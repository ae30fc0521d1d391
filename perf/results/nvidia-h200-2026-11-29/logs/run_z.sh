#!/bin/bash
# Where the split-KV shapes' fixed cost goes: the K/V stream and the real kernel, each with and without
# the combine launch; ncu of SM-active imbalance (split B1 S65536 vs unsplit B16 S32768).
export PYTHONPATH=. FMHA_CACHE_DIR=$PWD/.build/cache24
S=-DFMHA_SM90_PROBE_STREAM_ONLY=1; N=-DFMHA_SM90_PROBE_NO_COMBINE=1; B=-DFMHA_SM90_TMA_BOX_ROWS=32
date -u
timeout 200 python -W ignore perf/variants.py --rounds 3 --only 2,11,6,3,12 --variant box32="$B" --variant nocomb="$B $N" --variant st="$B $S" --variant st_nocomb="$B $S $N" 2>&1 | grep -v Warn | sed 's/maxdiff \([0-9.e-]*\)/md=\1/g'
M=gpu__time_duration.sum,sm__cycles_active.min,sm__cycles_active.avg,sm__cycles_active.max,sm__cycles_elapsed.max,dram__throughput.avg.pct_of_peak_sustained_elapsed
for sh in 1,1,32,8,65536,128 16,1,32,8,32768,128; do
  echo "=== ncu $sh"
  timeout 60 ncu --clock-control none --metrics $M -s 2 -c 2 python perf/ncu_probe.py --shape $sh --iters 2 2>&1 | grep -E "^  [a-zA-Z_]|gpu__time|dram__|sm__" | cut -c1-130
done
date -u
