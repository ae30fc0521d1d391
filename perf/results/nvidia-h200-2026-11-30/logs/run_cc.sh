#!/bin/bash
# Does the cache layout decide the stream rate? bshd ([B, S, Hkv, D]: the 8 heads of a token side by side,
# a 128-token tile of one head is 128 pieces of 256 B, 2 KB apart) against bhsd (stored [B, Hkv, S, D],
# passed transposed: a head's tile is one contiguous 32 KB run). Same kernel (run by's device code), its
# stream-only probe (stnc: no MMA, no merge, wrong results) and without the combine (nocomb), beside
# Triton and cuDNN, in both layouts; then the probe's CTA timelines for B1 S65536 (one call) and B16 S32768.
export PYTHONPATH=. FMHA_CACHE_DIR=$PWD/.build/cache73
date -u; nvidia-smi --query-gpu=name,serial,power.limit --format=csv,noheader
for lay in bshd bhsd; do
  timeout 200 python -W ignore perf/variants.py --sustained --rounds 5 --kv-layout $lay --only 2,11,12,6,0,7 \
    --variant head= --variant nocomb=-DFMHA_SM90_PROBE_NO_COMBINE=1 \
    --variant stnc="-DFMHA_SM90_PROBE_NO_COMBINE=1 -DFMHA_SM90_PROBE_STREAM_ONLY=1" 2>&1 | grep -v Warn
done
for lay in bshd bhsd; do
  P="timeout 60 python -W ignore perf/stream_probe.py --kv-layout $lay"
  $P --shape 1,1,32,8,65536,128 2>&1 | grep -E "^shape|griddep -> first|stream\)|tail\)|span|steady"
  $P --shape 16,1,32,8,32768,128 --repeat 20 2>&1 | grep -E "^shape|griddep -> first|stream\)|tail\)|span|steady"
done
date -u
