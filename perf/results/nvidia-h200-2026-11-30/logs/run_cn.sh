#!/bin/bash
# Split counts on the B=1 split-KV shapes: 15 splits merged in 8 clusters of 15 CTAs (if the H200 holds 8)
# against the plan's 16 splits + combine kernel, and 14, 12 (logs/split_probe.py). Library: run cm's head
# (D=128 SASS-identical to run by's).
export PYTHONPATH=. FMHA_CACHE_DIR=$PWD/.build/cache82
date -u
timeout 400 python -W ignore perf/results/nvidia-h200-2026-11-30/logs/split_probe.py 3 2>&1 | grep -v Warn
date -u
