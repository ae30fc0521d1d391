#!/bin/bash
# Sixteenth session: the timing probe now stamps the 64-row loop's phases (consumer_loop_overlapped: issue,
# Q K^T landed in each warpgroup, scores exchanged, softmax done, P V landed; cache125, default build's SASS
# unchanged). Where D = 512's 2368 cycles a tile go (run et), and the same for T=16 and T=4 at D = 128.
export PYTHONPATH=. FMHA_CACHE_DIR=$PWD/.build/cache125
date -u; nvidia-smi --query-gpu=name,serial,power.limit --format=csv,noheader
for shape in "64,1,128,1,4096,512 --repeat 8" "64,1,128,1,4096,512" "8,16,32,8,8192,128 --causal --repeat 8" \
             "32,4,32,8,4096,128 --causal --repeat 8"; do
  timeout 120 python -W ignore perf/stream_probe.py --shape $shape 2>&1 | grep -v "^  \(entry\|griddep\|first K\|last V\|end\|stream us\|CTAs per\)" | tail -30
  date -u
done
