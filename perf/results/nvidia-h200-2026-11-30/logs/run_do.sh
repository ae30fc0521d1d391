#!/bin/bash
# Run do: the clustered plan against the plan before it at and below the 1 MiB-a-CTA limit, both regimes, on
# whichever H200 the call gets (plan_ab_probe.py).
export PYTHONPATH=. FMHA_CACHE_DIR=$PWD/.build/cache96
date -u; nvidia-smi --query-gpu=name,serial --format=csv,noheader
timeout 240 python perf/results/nvidia-h200-2026-11-30/logs/plan_ab_probe.py 5 2>&1 | tail -20
date -u
