#!/bin/bash
# Why ncu times our B1 S65536 decode kernel 4-6 us slower than Triton's (run bn) while whole calls in graph
# replay are level: (1) ncu without the cache flush (--cache-control none), ours vs Triton; (2) graph
# replay without programmatic dependent launch (pdl0: a call's decode grid cannot overlap the previous
# call's combine kernel) vs head.
export PYTHONPATH=. FMHA_CACHE_DIR=$PWD/.build/cache60
date -u
M=gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed
for be in cuda triton; do
  echo "== B1 S65536 $be, caches not flushed"
  timeout 100 ncu --clock-control none --cache-control none --metrics $M python perf/ncu_probe.py --shape 1,1,32,8,65536,128 --iters 2 --backend $be 2>&1 \
    | grep -E "^  [a-zA-Z_]|duration|dram__" | cut -c1-110 | tail -12
done
timeout 120 python -W ignore perf/variants.py --sustained --rounds 5 --only 2,3,6 --variant head= \
  --variant pdl0=-DFMHA_SM90_PDL=0 2>&1 | grep -v Warn | sed 's/maxdiff \([0-9.e-]*\)/md=\1/g'
date -u
