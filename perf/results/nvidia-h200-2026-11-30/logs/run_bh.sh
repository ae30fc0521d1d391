#!/bin/bash
# T=16 (64 packed rows) and B8 S8192: are 64 unsplit deep CTAs (no merge at all) faster than 2 splits?
# Then ncu warp-state statistics of the T=16 decode kernel beside Triton's (why ours streams slower alone).
export PYTHONPATH=. FMHA_CACHE_DIR=$PWD/.build/cache55
date -u; nvidia-smi --query-gpu=name,serial,power.limit --format=csv,noheader
timeout 150 python -W ignore perf/variants.py --sustained --rounds 5 --only 6,13,2 --variant head= \
  --variant d1="@deep @splits=1" --variant w2="@wide @splits=2" 2>&1 | grep -v Warn | sed 's/maxdiff \([0-9.e-]*\)/md=\1/g'
date -u
run() { timeout 120 ncu --clock-control none --section SpeedOfLight --section WarpStateStats --section Occupancy "$@" 2>&1 \
  | grep -E "^  [a-zA-Z_]|Duration|DRAM Throughput|Stall|Warp Cycles|Active Warps|Issued Warp|Registers" | grep -v "^    ---" | cut -c1-140 | tail -40; }
echo "== T=16 cuda"; run -k regex:decode_kernel python perf/ncu_probe.py --shape 8,16,32,8,8192,128 --causal --iters 1
echo "== T=16 triton"; run -k regex:decode python perf/ncu_probe.py --shape 8,16,32,8,8192,128 --causal --iters 1 --backend triton
date -u
