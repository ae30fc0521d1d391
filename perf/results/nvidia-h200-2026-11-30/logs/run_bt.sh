#!/bin/bash
# T=16 merged in clusters of 2 (cm64) is 1 us slower than the combine kernel sustained (run bs), although
# the combine costs 3.6 us (nocomb). Isolate: the cluster launch with its barriers but no pushes and no
# merge (cmnp, wrong results), and both paths without PDL; B8 S8192 T=1 (4 rows, clusters by default) beside.
export PYTHONPATH=. FMHA_CACHE_DIR=$PWD/.build/cache66
date -u; nvidia-smi --query-gpu=name,serial,power.limit --format=csv,noheader
timeout 200 python -W ignore perf/variants.py --sustained --rounds 7 --only 6,13 --no-peers --variant head= \
  --variant cm64=-DFMHA_SM90_CLUSTER_MERGE_MAX_ROWS=64 --variant nocomb=-DFMHA_SM90_PROBE_NO_COMBINE=1 \
  --variant cmnp="-DFMHA_SM90_CLUSTER_MERGE_MAX_ROWS=64 -DFMHA_SM90_PROBE_CLUSTER_NO_PUSH=1" \
  --variant pdl0=-DFMHA_SM90_PDL=0 --variant pdl0cm64="-DFMHA_SM90_PDL=0 -DFMHA_SM90_CLUSTER_MERGE_MAX_ROWS=64" \
  2>&1 | grep -v Warn | sed 's/maxdiff \([0-9.e-]*\)/md=\1/g'
date -u
