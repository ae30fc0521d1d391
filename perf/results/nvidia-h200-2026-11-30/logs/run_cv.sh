#!/bin/bash
# Where the last-CTA split merge loses 8 us on T=16 (runs ct, cu): per-CTA timelines (last V tile in -> end)
# with the merge in the last CTA and with the combine kernel, the 3rd of 3 calls back to back; B1 S65536 too.
export PYTHONPATH=. FMHA_CACHE_DIR=$PWD/.build/cache89
date -u
for f in "${@:-}"; do
  for s in "8,16,32,8,8192,128 --causal" "1,1,32,8,65536,128"; do
    echo "=== flags [$f] shape $s"
    timeout 120 python -W ignore perf/stream_probe.py --repeat 3 --shape $s --flags="$f" 2>&1 | grep -v Warn | tail -25
  done
done
date -u
