#!/bin/bash
# T=16 runs at the 700 W cap (run ce). Q K^T of the deep D=128 64-row loop with all of Q as register
# fragments (FMHA_SM90_DEEP_D128_Q_REGS=1: wgmma m64n128k16 with A from registers; 255 registers, no
# spills; it helped D=512 at the cap): tests + sanitizers on it, then head vs qr0 (=0: SASS identical to
# run by's library, prev) interleaved, and the SM clock / power on T=16.
export PYTHONPATH=. FMHA_CACHE_DIR=$PWD/.build/cache78
date -u; nvidia-smi --query-gpu=name,serial,power.limit --format=csv,noheader
timeout 60 python -m pytest -q tests/test_perf_tool.py -p no:cacheprovider 2>&1 | tail -30
timeout 220 python -m pytest -q -n 8 tests/ -p no:cacheprovider --deselect tests/test_perf_tool.py 2>&1 | tail -2
for t in memcheck racecheck synccheck; do
  timeout 120 compute-sanitizer --tool $t python tests/sanitize_subset.py 2>&1 | grep -E "SUMMARY|NOT in|nan" | tail -3
done
date -u
timeout 200 python -W ignore perf/variants.py --sustained --rounds 7 --variant head= \
  --variant qr0=-DFMHA_SM90_DEEP_D128_Q_REGS=0 --only 6,2,4 2>&1 | grep -v Warn
timeout 60 python -W ignore perf/ncu_probe.py --shape 8,16,32,8,8192,128 --causal --clocks --seconds 3 2>&1 | grep -E "us/call"
date -u
