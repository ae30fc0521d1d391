#!/bin/bash
# Combine kernel: 2-split chunks where there are at most 2 splits (38 registers, was 55: more CTAs fit beside
# the decode grid's last CTAs), and on grids of >= 512 row groups 4 row groups per CTA (FMHA_COMBINE_ROW_GROUPS=4,
# their loads issued together). Decode kernels SASS-identical to run by's. Tests + sanitizers on the new default;
# head vs g1 (-DFMHA_COMBINE_ROW_GROUPS=1: chunks only) vs prev (run by's library). Then the SM clock and power
# while T=16 and B1 S65536 run back to back, the kernel against its stream-only build (stnc: no MMA, no merge;
# is the T=16 gap between them the power cap?).
export PYTHONPATH=. FMHA_CACHE_DIR=$PWD/.build/cache76
date -u; nvidia-smi --query-gpu=name,serial,power.limit --format=csv,noheader
timeout 220 python -m pytest -q -n 8 tests/ -p no:cacheprovider 2>&1 | tail -3
for t in memcheck racecheck synccheck; do
  timeout 120 compute-sanitizer --tool $t python tests/sanitize_subset.py 2>&1 | grep -E "SUMMARY|NOT in|nan" | tail -3
done
date -u
timeout 200 python -W ignore perf/variants.py --sustained --rounds 7 --variant head= \
  --variant g1=-DFMHA_COMBINE_ROW_GROUPS=1 --lib prev=$PWD/.build/cache76/prev.so --only 6,2,3,4 2>&1 | grep -v Warn
for s in "8,16,32,8,8192,128 --causal" "1,1,32,8,65536,128"; do
  timeout 60 python -W ignore perf/ncu_probe.py --shape $s --clocks --seconds 3 2>&1 | grep -E "us/call"
  FMHA_NVCC_FLAGS="-DFMHA_SM90_PROBE_NO_COMBINE=1 -DFMHA_SM90_PROBE_STREAM_ONLY=1" \
    timeout 60 python -W ignore perf/ncu_probe.py --shape $s --clocks --seconds 3 2>&1 | grep -E "us/call" | sed 's/^/stnc /'
done
date -u
