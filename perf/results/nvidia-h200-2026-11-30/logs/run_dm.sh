#!/bin/bash
# Twelfth session, final state (run dm): the clustered plan limited to 1 MiB of K/V a CTA, the tuning lookup with the grid term, and the
# two tensor-parallel shard shapes in the suite (device code unchanged since 91455fd). The whole test suite, then the
# full perf suite in both regimes, writing the tuning table.
export PYTHONPATH=. FMHA_CACHE_DIR=$PWD/.build/cache96
date -u; nvidia-smi --query-gpu=name,serial --format=csv,noheader
timeout 200 python -m pytest -q -n 8 tests/ -p no:cacheprovider 2>&1 | tail -3
date -u
F='GB/s|ceilings|wrote|done'
timeout 360 python -m perf --preset full --also-separate --write-tuning --budget-s 300 --out $OUT/perf-full 2>&1 | tr '\r' '\n' | grep -E "$F" | grep -v "^\s*$" | cut -c1-330
date -u
