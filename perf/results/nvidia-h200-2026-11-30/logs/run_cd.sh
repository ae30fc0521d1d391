#!/bin/bash
# Two tile groups (FMHA_SM90_DEEP_TILE_GROUPS=2): on the deep D=128 instantiation two consumer warpgroups
# take alternate K/V tiles in the 64-row loop, each with its own softmax state and accumulator, merged at
# the end; the producer becomes a warpgroup with setmaxnreg (as at D=512). Run cc: T=16 without the merge
# took 65.6 us against 60.5 for the stream alone. Tests and sanitizers on the new default library, then
# head (tile groups) vs tg1 (one group: SASS identical to run by's except 8 instructions of D=256 wide)
# vs prev (run by's library) vs nocomb (head without the combine kernel, wrong results).
export PYTHONPATH=. FMHA_CACHE_DIR=$PWD/.build/cache74
date -u; nvidia-smi --query-gpu=name,serial,power.limit --format=csv,noheader
timeout 220 python -m pytest -q -n 8 tests/ -p no:cacheprovider 2>&1 | tail -4
for t in memcheck racecheck synccheck; do
  timeout 120 compute-sanitizer --tool $t python tests/sanitize_subset.py 2>&1 | grep -E "SUMMARY|NOT in|nan" | tail -3
done
date -u
V="timeout 200 python -W ignore perf/variants.py --sustained --variant head= --variant tg1=-DFMHA_SM90_DEEP_TILE_GROUPS=1 --lib prev=$PWD/.build/cache74/prev.so"
$V --rounds 7 --variant nocomb=-DFMHA_SM90_PROBE_NO_COMBINE=1 --only 6,2,3,13,4 2>&1 | grep -v Warn
$V --rounds 5 --no-peers --only 0,10,8,5 2>&1 | grep -v Warn
timeout 60 python -W ignore perf/stream_probe.py --shape 8,16,32,8,8192,128 --causal --repeat 20 2>&1 | grep -E "^shape|wait|ready|griddep -> first|stream\)|tail\)|span|steady"
date -u
