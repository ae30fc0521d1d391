#!/bin/bash
# Sixteenth session: D = 512 loop with Q K^T one tile ahead of the softmax (FMHA_SM90_QK_AHEAD=1,
# consumer_loop_qk_ahead; it needs three K stages, two V stages and Q_REGS=128 to fit in registers), against
# the default loop, the default loop on the same K3/V2 ring, and the default loop with Q_REGS=128 and K3/V2
# (isolates the cost of the Q columns it gives back). Interleaved, sustained and per replay; then the
# whole suite and racecheck on the subset with the QK-ahead build. Libraries prebuilt in cache123.
export PYTHONPATH=. FMHA_CACHE_DIR=$PWD/.build/cache123
R="-DFMHA_SM90_D512_K_STAGES=3 -DFMHA_SM90_D512_V_STAGES=2"
AH="-DFMHA_SM90_QK_AHEAD=1 $R -DFMHA_SM90_D512_Q_REGS=128"
date -u; nvidia-smi --query-gpu=name,serial,power.limit --format=csv,noheader
timeout 200 python perf/variants.py --sustained --rounds 6 --shape 64,1,128,1,4096,512 --shape 128,1,16,1,4096,512 \
  --variant base= --variant k3v2="$R" --variant ahead="$AH" --variant q128k3v2="$R -DFMHA_SM90_D512_Q_REGS=128" \
  2>&1 | grep -v Warning | cut -c1-700
date -u
timeout 120 python perf/variants.py --rounds 6 --shape 64,1,128,1,4096,512 --shape 8,4,128,1,4096,512 \
  --variant base= --variant k3v2="$R" --variant ahead="$AH" --no-peers 2>&1 | grep -v Warning | cut -c1-700
date -u
FMHA_NVCC_FLAGS="$AH" timeout 200 python -m pytest -q -n 8 tests/ -p no:cacheprovider 2>&1 | tail -3
date -u
FMHA_NVCC_FLAGS="$AH" timeout 150 compute-sanitizer --tool racecheck python tests/sanitize_subset.py > $OUT/racecheck.log 2>&1
echo "racecheck: $(grep -E 'SUMMARY' $OUT/racecheck.log | tail -1) cases run: $(grep -c '^ran' $OUT/racecheck.log)"
date -u
