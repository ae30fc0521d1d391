#!/bin/bash
# Thirteenth session: the fixed workspace test (run dp compared a NaN poison with torch.equal), then the full perf
# suite in both regimes, writing the tuning table (device code unchanged since 91455fd; the C API change of f4263ab).
export PYTHONPATH=. FMHA_CACHE_DIR=$PWD/.build/cache97
date -u; nvidia-smi --query-gpu=name,serial --format=csv,noheader
timeout 120 python -m pytest -q tests/test_cuda.py -k "workspace or clustered_plan or cluster_merge or pair_merge" -p no:cacheprovider 2>&1 | tail -15
date -u
F='GB/s|ceilings|wrote|done'
timeout 400 python -m perf --preset full --also-separate --write-tuning --budget-s 300 --out $OUT/perf-full 2>&1 | tr '\r' '\n' | grep -E "$F" | grep -v "^\s*$" | cut -c1-330
date -u
