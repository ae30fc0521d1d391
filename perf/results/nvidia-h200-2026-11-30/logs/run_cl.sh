#!/bin/bash
# Run ck: the K/V multicast pairs took 388.6 us on D=512 Hq=128 B=64 against 196.2 unpaired: two waves of
# clusters? How many 2-CTA clusters of the D=512 kernel the H200 holds, and the time per call at B = 32..64.
export PYTHONPATH=. FMHA_CACHE_DIR=$PWD/.build/cache81
date -u
python -W ignore perf/results/nvidia-h200-2026-11-30/logs/mc_check.py 2>&1 | tail -5
for B in 32 56 60 62 64; do
  for f in "" "-DFMHA_SM90_D512_KV_MULTICAST=0"; do
    FMHA_NVCC_FLAGS="$f" timeout 60 python -W ignore perf/ncu_probe.py --shape $B,1,128,1,4096,512 --clocks --seconds 1 2>&1 | grep -E "us/call" | sed "s/^/[$f] /"
  done
done
date -u
