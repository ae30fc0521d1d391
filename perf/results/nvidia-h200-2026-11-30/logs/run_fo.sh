#!/bin/bash
# Eighteenth session: KV-head pairs (variant 3: a D = 64 cache read as D = 128 by the stream instantiation, two
# heads a CTA). Correctness (the new tests, then every D = 64 / 128 test), then D=64 B31/B32/B33 S8192
# forced to pairs against the plan and cuDNN, interleaved.
export PYTHONPATH=. FMHA_CACHE_DIR=$PWD/.build/cache140
date -u; nvidia-smi --query-gpu=name,serial --format=csv,noheader
timeout 200 python -m pytest -q -x -n 8 tests/test_cuda.py -k "head_pairs" 2>&1 | tail -5
date -u
timeout 150 python perf/variants.py --rounds 6 --per-round --shape 32,1,32,8,8192,64 --shape 31,1,32,8,8192,64 \
  --shape 33,1,32,8,8192,64 --shape 32,1,64,8,8192,64 --variant cuda= --variant pairs="@pairs" 2>&1 \
  | grep -v "Warning\|return F.scaled" | cut -c1-900
date -u
timeout 120 python -m pytest -q -n 8 tests/test_cuda.py -k "64 or 128 or pairs" 2>&1 | tail -4
date -u
