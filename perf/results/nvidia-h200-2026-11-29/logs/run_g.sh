#!/bin/bash
export PYTHONPATH=. FMHA_CACHE_DIR=$PWD/.build/cache5
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; date -u
timeout 120 python -W ignore perf/variants.py --rounds 3 --only 0,1,7,9,10 --variant base= --variant d64s3=-DFMHA_SM90_D64_STAGES=3 --variant nooverlap=-DFMHA_SM90_OVERLAP=0 2>&1 | grep -v Warn | sed 's/maxdiff \([0-9.e-]*\)/md=\1/g' | tee /tmp/var.txt
FLAGS=$(python - <<'PY'
import re
t = open("/tmp/var.txt").read()
line = [l for l in t.splitlines() if l.startswith("(32, 1, 32, 8, 8192, 64)")]
if line:
    base = float(re.search(r"base ([0-9.]+)us", line[0]).group(1)); s3 = float(re.search(r"d64s3 ([0-9.]+)us", line[0]).group(1))
    print("-DFMHA_SM90_D64_STAGES=3" if s3 < 0.99 * base else "")
PY
)
echo "perf flags: '$FLAGS'"
export FMHA_NVCC_FLAGS="$FLAGS"
git log --oneline | head -1
timeout 420 python -m perf --preset full --write-tuning --budget-s 170 --out $OUT/perf-full 2>&1 | grep -v Warn | tail -45
date -u
