#!/bin/bash
# Run cv's T=16 tail (last V in -> end 13 us at the latest CTA, 2 us with the combine kernel), split in two:
# new timeline stamps at each CTA's arrival on its row block's counter, and at the last CTAs' start of the merge.
export PYTHONPATH=. FMHA_CACHE_DIR=$PWD/.build/cache90
date -u
for s in "8,16,32,8,8192,128 --causal" "1,1,32,8,65536,128"; do
  echo "=== shape $s"
  timeout 120 python -W ignore perf/stream_probe.py --repeat 3 --shape $s 2>&1 | grep -v Warn | tail -16
done
date -u
