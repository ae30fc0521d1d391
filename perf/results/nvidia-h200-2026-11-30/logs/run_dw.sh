#!/bin/bash
# Thirteenth session, closing check: the whole test suite with the final sources' library (cache101; SASS identical
# to run dt's cache99, the sources differ in comments) and the tuning table written from run dt.
export PYTHONPATH=. FMHA_CACHE_DIR=$PWD/.build/cache101
date -u; nvidia-smi --query-gpu=name,serial --format=csv,noheader
timeout 200 python -m pytest -q -n 8 tests/ -p no:cacheprovider 2>&1 | tail -2
date -u
