#!/bin/bash
# Eighth session, first call: synccheck on the final kernel (run bl's); the timing probe (first run on a
# GPU) on the split-KV shapes and B8 S8192 (same bytes and grid as B1 S65536, merged in clusters); then
# launch plans that use all 132 SMs (wide instantiation, 2 CTAs per SM: B1 S65536 with 33 splits, 264
# CTAs; T=16 with 4 splits, 256 CTAs) against the plan's 128 deep CTAs, sustained.
export PYTHONPATH=. FMHA_CACHE_DIR=$PWD/.build/cache64
date -u; nvidia-smi --query-gpu=name,serial,power.limit --format=csv,noheader
timeout 90 compute-sanitizer --tool synccheck python tests/sanitize_subset.py 2>&1 | tail -1
date -u
for s in "1,1,32,8,65536,128" "8,16,32,8,8192,128 --causal" "8,1,32,8,8192,128"; do
  timeout 60 python -W ignore perf/stream_probe.py --shape $s 2>&1 | grep -v Warn
done
date -u
timeout 80 python -W ignore perf/variants.py --sustained --rounds 5 --only 2 --variant head= \
  --variant w33="@wide @splits=33" --variant d16="@deep @splits=16" 2>&1 | grep -v Warn | sed 's/maxdiff \([0-9.e-]*\)/md=\1/g'
timeout 80 python -W ignore perf/variants.py --sustained --rounds 5 --only 6 --variant head= \
  --variant w4="@wide @splits=4" --variant w2="@wide @splits=2" 2>&1 | grep -v Warn | sed 's/maxdiff \([0-9.e-]*\)/md=\1/g'
date -u
