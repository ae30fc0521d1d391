#!/bin/bash
# 128 vs 132 CTAs on split-KV work (logs/cta_count_probe.py): is a grid that uses every SM worth a
# stream-K style partition (a CTA's tile range crossing sequence / KV-head boundaries)? Final device code.
export PYTHONPATH=. FMHA_CACHE_DIR=$PWD/.build/cache83
date -u; nvidia-smi --query-gpu=name,serial --format=csv,noheader
timeout 400 python -W ignore perf/results/nvidia-h200-2026-11-30/logs/cta_count_probe.py 5 2>&1 | grep -v Warn
date -u
