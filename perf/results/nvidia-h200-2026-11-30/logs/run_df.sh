#!/bin/bash
# The final library on whichever H200 this call gets: the spec shapes (T=4, T=16) and B1 S65536 of the full
# preset, with the run's read ceiling, to see T=16 on another H200 than run dc's.
export PYTHONPATH=. FMHA_CACHE_DIR=$PWD/.build/cache95
date -u; nvidia-smi --query-gpu=name,serial --format=csv,noheader
F='GB/s|ceilings|wrote|done'
timeout 200 python -m perf --preset full --shapes spec,S65536 --out $OUT/perf-spec 2>&1 | tr '\r' '\n' | grep -E "$F" | grep -v "^\s*$" | cut -c1-330
date -u
