#!/bin/bash
# Seventeenth session: the timing probe (perf/stream_probe.py; its loop-phase stamps cover consumer_loop_overlapped
# only) on the seesaw, MQA D = 512 Hq=128: cycles a tile, consumer K/V waits (consumer thread 0, warpgroup 0),
# producer waits; one call alone and the last of 8 back to back. Probe library prebuilt in cache136.
export PYTHONPATH=. FMHA_CACHE_DIR=$PWD/.build/cache136
date -u; nvidia-smi --query-gpu=name,serial --format=csv,noheader
timeout 60 python -W ignore perf/stream_probe.py --shape 64,1,128,1,4096,512 2>&1 | tail -20
timeout 60 python -W ignore perf/stream_probe.py --shape 64,1,128,1,4096,512 --repeat 8 2>&1 | tail -20
date -u
