#!/bin/bash
# Where the split-KV shapes lose time against the bytes / ceiling: the probe's CTA timeline (globaltimer:
# start-up, stream, tail over the grid) on B1 S65536, T=16 (combine kernel, and merged in clusters of 2 with
# FMHA_SM90_CLUSTER_MERGE_MAX_ROWS=64) and B8 S8192 (clusters); then the same shapes timed sustained with
# the cluster merge at 64 rows, without the merge (nocomb, wrong results) and the stream alone (stnc).
export PYTHONPATH=. FMHA_CACHE_DIR=$PWD/.build/cache65
date -u; nvidia-smi --query-gpu=name,serial,power.limit --format=csv,noheader
P="timeout 60 python -W ignore perf/stream_probe.py"
$P --shape 1,1,32,8,65536,128 2>&1 | grep -v Warn
$P --shape 8,16,32,8,8192,128 --causal 2>&1 | grep -v Warn
$P --shape 8,16,32,8,8192,128 --causal --flags=-DFMHA_SM90_CLUSTER_MERGE_MAX_ROWS=64 2>&1 | grep -v Warn
$P --shape 8,1,32,8,8192,128 2>&1 | grep -v Warn
date -u
timeout 150 python -W ignore perf/variants.py --sustained --rounds 5 --only 6,2 --variant head= \
  --variant cm64=-DFMHA_SM90_CLUSTER_MERGE_MAX_ROWS=64 --variant nocomb=-DFMHA_SM90_PROBE_NO_COMBINE=1 \
  --variant stnc="-DFMHA_SM90_PROBE_NO_COMBINE=1 -DFMHA_SM90_PROBE_STREAM_ONLY=1" 2>&1 | grep -v Warn | sed 's/maxdiff \([0-9.e-]*\)/md=\1/g'
date -u
