#!/bin/bash
# The perf suite's MQA rows on the final D=512 kernel (run ao timed the one before).
export PYTHONPATH=. FMHA_CACHE_DIR=$PWD/.build/cache44
date -u
timeout 140 python -m perf --preset full --shapes mqa --budget-s 60 --out $OUT/perf-mqa 2>&1 | tr '\r' '\n' | grep -E "GB/s|ceilings|done" | cut -c1-300
date -u
