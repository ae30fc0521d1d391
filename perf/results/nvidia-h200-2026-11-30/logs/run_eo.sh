#!/bin/bash
# Fifteenth session, last check: the final sources (cache121: after run en only comments and a local variable in
# capi.cu's use_cluster_merge changed; every kernel's SASS identical to cache117's): the whole suite.
export PYTHONPATH=. FMHA_CACHE_DIR=$PWD/.build/cache121
date -u; nvidia-smi --query-gpu=name,serial --format=csv,noheader
timeout 200 python -m pytest -q -n 8 tests/ -p no:cacheprovider 2>&1 | tail -3
date -u
