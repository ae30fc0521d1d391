#!/bin/bash
# D=512 MQA Hq=128: the two 64-row CTAs of a sequence read the same K/V tiles; with the evict-first L2
# policy the second reader may miss L2 and re-read HBM. ncu DRAM bytes of the decode kernel (ideal: K + V
# = 537 MB) with evict-first (default) and evict-normal, then both timed sustained (7 rounds), Hq=16 beside.
export PYTHONPATH=. FMHA_CACHE_DIR=$PWD/.build/cache70
date -u; nvidia-smi --query-gpu=name,serial,power.limit --format=csv,noheader
M=gpu__time_duration.sum,dram__bytes_read.sum,lts__t_sectors_srcunit_tex_op_read.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed
for f in "" "-DFMHA_SM90_KV_EVICT_FIRST=0"; do
  echo "== D=512 Hq=128 flags [$f]"
  FMHA_NVCC_FLAGS="$f" timeout 100 ncu --clock-control none -k regex:decode_kernel --metrics $M python perf/ncu_probe.py \
    --shape 64,1,128,1,4096,512 --iters 2 2>&1 | grep -E "duration|dram__|lts__" | cut -c1-110 | tail -8
done
timeout 150 python -W ignore perf/variants.py --sustained --rounds 7 --only 10,9 --variant head= \
  --variant ev0=-DFMHA_SM90_KV_EVICT_FIRST=0 2>&1 | grep -v Warn | sed 's/maxdiff \([0-9.e-]*\)/md=\1/g'
date -u
