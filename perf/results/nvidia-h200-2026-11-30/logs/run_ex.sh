#!/bin/bash
# Sixteenth session: the probe's loop phases on MQA D = 512 Hq=128 (a stamp added once the operands are waited
# for), the default loop and PV_AFTER_QK=1 (run ew's probe call failed on its argument), last of 8 calls.
export PYTHONPATH=. FMHA_CACHE_DIR=$PWD/.build/cache127
date -u; nvidia-smi --query-gpu=name,serial,power.limit --format=csv,noheader
for f in "" "-DFMHA_SM90_PV_AFTER_QK=1"; do
  echo "[flags: $f]"
  timeout 120 python -W ignore perf/stream_probe.py --shape 64,1,128,1,4096,512 --repeat 8 --flags="$f" 2>&1 | \
    grep -v "^  \(entry\|griddep\|first K\|last V\|end\|stream us\|CTAs per\)" | tail -22
  date -u
done
