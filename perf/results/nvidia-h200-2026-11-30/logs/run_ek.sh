#!/bin/bash
# Fifteenth session, first call: (1) the whole suite and the three sanitizers on the final sources of the
# fourteenth session plus this session's host knob at its default (cache115 default library: every kernel's SASS
# identical to cache114 / cache111); (2) why a shallow ring loses on split grids: the probe's CTAs-per-SM count with
# stream forced on split shapes, with and without FMHA_SM90_SPLIT_ONE_CTA_PER_SM=1 (split launches padded to one
# CTA per SM), then those builds timed against the plan, interleaved.
export PYTHONPATH=. FMHA_CACHE_DIR=$PWD/.build/cache115
date -u; nvidia-smi --query-gpu=name,serial --format=csv,noheader
timeout 200 python -m pytest -q -n 8 tests/ -p no:cacheprovider 2>&1 | tail -3
for tool in racecheck memcheck synccheck; do
  timeout 150 compute-sanitizer --tool $tool python tests/sanitize_subset.py > $OUT/$tool.log 2>&1
  echo "$tool: $(grep -E 'SUMMARY' $OUT/$tool.log | tail -1) cases run: $(grep -c '^ran' $OUT/$tool.log)"
done
date -u
for sh in 1,1,32,8,65536,128 8,16,32,8,8192,128; do
  for fl in "" "@stream" "@stream -DFMHA_SM90_SPLIT_ONE_CTA_PER_SM=1"; do
    c=""; [ $sh = 8,16,32,8,8192,128 ] && c=--causal
    echo "== probe $sh [$fl]"
    timeout 60 python perf/stream_probe.py --shape $sh $c --repeat 4 --flags "$fl" 2>&1 | grep -E "shape|kernel span|CTAs per SM|first K -> last V|cycles/tile|Error|error" | cut -c1-300
  done
done
date -u
timeout 270 python perf/variants.py --sustained --rounds 4 --shape 1,1,32,8,65536,128 --shape 1,1,32,8,262144,128 \
  --shape 8,16,32,8,8192,128 --shape 1,1,32,8,16384,128 --shape 1,1,32,8,65536,64 \
  --variant plan= --variant plan1="-DFMHA_SM90_SPLIT_ONE_CTA_PER_SM=1" --variant stream=@stream \
  --variant stream1="-DFMHA_SM90_SPLIT_ONE_CTA_PER_SM=1 @stream" --variant wide=@wide --variant wide1="-DFMHA_SM90_SPLIT_ONE_CTA_PER_SM=1 @wide" 2>&1 | grep -v Warning | cut -c1-700
date -u
