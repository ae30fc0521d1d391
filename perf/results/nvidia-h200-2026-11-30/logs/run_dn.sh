#!/bin/bash
# Run dn: where the narrow loop's time goes on a split of four tiles (B1 S8192, the plan of 8 clusters of 8 splits
# of 8 tiles; run dg: the consumer, not the stream, sets the time). ncu source counters (stall samples per SASS
# instruction) of the third decode kernel of 4 calls, caches and clocks not controlled (the inputs stay in L2, as in
# the timeline probe), for the record of the next session.
export PYTHONPATH=. FMHA_CACHE_DIR=$PWD/.build/cache96
date -u
timeout 200 ncu --clock-control none --cache-control none -k regex:decode_kernel -s 2 -c 1 --section SourceCounters \
  --section WarpStateStats --section SpeedOfLight -o $OUT/narrow -f python perf/ncu_probe.py --shape 1,1,32,8,8192,128 \
  --iters 4 > $OUT/ncu_narrow.txt 2>&1
tail -3 $OUT/ncu_narrow.txt
ncu -i $OUT/narrow.ncu-rep --page source --csv --print-source sass > $OUT/narrow_sass.csv 2>&1
ncu -i $OUT/narrow.ncu-rep --page details --print-details all > $OUT/narrow_details.txt 2>&1
ls -la $OUT; rm -f $OUT/narrow.ncu-rep
date -u
