#!/bin/bash
# K/V multicast pairs at D=512 (FMHA_SM90_D512_KV_MULTICAST=1, decode_kernel.cuh KvPair): the two 64-row
# blocks of a sequence (Hq/Hkv = 128) run as a cluster of two and each CTA fetches half of every K/V tile
# for both, so the cache crosses L2 -> SM once per pair (run bx: unpaired, the second CTA reads it from L2).
# Other instantiations SASS-identical to run by's; mc0 (-DFMHA_SM90_D512_KV_MULTICAST=0) SASS-identical to
# prev (run by's library). Tests + sanitizers on the new default; head vs mc0 vs prev on D=512 Hq=128 and
# Hq=16; SM clock and power back to back, and ncu DRAM / L2 bytes, head vs mc0.
export PYTHONPATH=. FMHA_CACHE_DIR=$PWD/.build/cache81
date -u; nvidia-smi --query-gpu=name,serial,power.limit --format=csv,noheader
timeout 240 python -m pytest -q -n 8 tests/ -p no:cacheprovider 2>&1 | tail -4
for t in memcheck racecheck synccheck; do
  timeout 150 compute-sanitizer --tool $t python tests/sanitize_subset.py 2>&1 | grep -E "SUMMARY|NOT in|nan" | tail -3
done
date -u
timeout 150 python -W ignore perf/variants.py --sustained --rounds 7 --no-peers --variant head= \
  --variant mc0=-DFMHA_SM90_D512_KV_MULTICAST=0 --lib prev=$PWD/.build/cache81/prev.so --only 10,9 2>&1 | grep -v Warn
S=64,1,128,1,4096,512
for f in "" "-DFMHA_SM90_D512_KV_MULTICAST=0"; do
  FMHA_NVCC_FLAGS="$f" timeout 60 python -W ignore perf/ncu_probe.py --shape $S --clocks --seconds 3 2>&1 | grep -E "us/call" | sed "s/^/[$f] /"
  FMHA_NVCC_FLAGS="$f" timeout 120 ncu --metrics gpu__time_duration.sum,dram__bytes_read.sum,lts__t_bytes.sum \
    -k regex:decode_kernel python -W ignore perf/ncu_probe.py --shape $S --iters 2 2>&1 | grep -E "duration|bytes" | tail -3 | sed "s/^/[$f] /"
done
date -u
