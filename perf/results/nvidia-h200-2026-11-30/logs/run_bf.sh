#!/bin/bash
# Seventh session, first call: the CUDA tests including test_cluster_merge (never run on a GPU before),
# then both sanitizers over tests/sanitize_subset.py, which now includes forced in-cluster merge cases.
export PYTHONPATH=. FMHA_CACHE_DIR=$PWD/.build/cache55
date -u; nvidia-smi --query-gpu=name,serial,power.limit --format=csv,noheader
timeout 150 python -m pytest -q -n 8 tests/test_cuda.py -p no:cacheprovider 2>&1 | tail -3
timeout 120 python -m pytest -q tests/test_cuda.py -k cluster_merge -p no:cacheprovider 2>&1 | tail -2
timeout 90 compute-sanitizer --tool memcheck python tests/sanitize_subset.py 2>&1 | tail -2
timeout 90 compute-sanitizer --tool racecheck python tests/sanitize_subset.py 2>&1 | tail -2
date -u
