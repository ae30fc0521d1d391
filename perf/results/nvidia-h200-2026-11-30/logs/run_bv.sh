#!/bin/bash
# The probe's CTA timelines after 50 calls back to back (the last call's stamps: the suite's regime,
# PDL-chained) against one call, with each CTA's SM (%smid): is the spread of the per-CTA stream time
# (run bs: T=16 median 61.7, max 69.3 us in one call) systematic per SM (the same SMs slowest in two
# processes) or noise? Also D=64 B32 S8192 (256 CTAs, 2 per SM): CTAs per SM.
export PYTHONPATH=. FMHA_CACHE_DIR=$PWD/.build/cache69
date -u; nvidia-smi --query-gpu=name,serial,power.limit --format=csv,noheader
P="timeout 60 python -W ignore perf/stream_probe.py"
for r in 1 50 50; do $P --shape 8,16,32,8,8192,128 --causal --repeat $r 2>&1 | grep -v Warn | sed -n '/timeline/,$p;/calls\?)/p'; done
for r in 50 50; do $P --shape 1,1,32,8,65536,128 --repeat $r 2>&1 | grep -v Warn | sed -n '/timeline/,$p;/calls\?)/p'; done
$P --shape 32,1,32,8,8192,64 --repeat 50 2>&1 | grep -v Warn | sed -n '/timeline/,$p;/calls\?)/p'
date -u
