#!/bin/bash
# Run dk (EDGES=--small): grids of fewer than 8 units, 16, 12 or 8 splits merged in clusters against the plan (merge_plan_probe.py).
export EDGES=--small PYTHONPATH=. FMHA_CACHE_DIR=$PWD/.build/cache96
date -u; nvidia-smi --query-gpu=name,serial,power.limit --format=csv,noheader
timeout 500 python perf/results/nvidia-h200-2026-11-30/logs/merge_plan_probe.py 3 $EDGES 2>&1 | tail -120
date -u
