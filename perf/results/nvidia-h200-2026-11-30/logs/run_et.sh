#!/bin/bash
# Sixteenth session: where a K/V tile's time goes in the D = 512 kernel (MQA Hq=128, the missed 3.0 TB/s
# target): the timing probe (perf/stream_probe.py) on the default build, one call alone and the last of 8
# back to back. Does the consumer wait for K/V tiles (the stream), or the producer for free stages (the loop)?
export PYTHONPATH=. FMHA_CACHE_DIR=$PWD/.build/cache124
date -u; nvidia-smi --query-gpu=name,serial,power.limit --format=csv,noheader
timeout 120 python -W ignore perf/stream_probe.py --shape 64,1,128,1,4096,512 2>&1 | tail -40
date -u
timeout 120 python -W ignore perf/stream_probe.py --shape 64,1,128,1,4096,512 --repeat 8 2>&1 | tail -40
date -u
