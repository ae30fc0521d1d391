#!/bin/bash
# Device run A (not committed): tests, clock probe, ncu T=4 vs T=1, variants.
export PYTHONPATH=. FMHA_CACHE_DIR=$PWD/.build/cache
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv
date -u
python -c "import fmha.cuda.loader as l; print(l.load())" 2>&1 | tail -2
echo "=== pytest"
timeout 200 python -m pytest -q -n 8 tests/ -x -rs -p no:cacheprovider 2>&1 | tail -15
echo "=== clock probe"
for sh in "32,1,32,8,4096,128" "32,4,32,8,4096,128 --causal" "32,1,128,8,4096,128"; do
  for be in cuda triton; do timeout 30 python perf/ncu_probe.py --shape $sh --backend $be --clocks --seconds 2 2>&1 | tail -1; done
done
echo "=== ncu"
timeout 100 ncu --section SpeedOfLight --section WarpStateStats --section MemoryWorkloadAnalysis -k regex:decode_kernel -c 1 python perf/ncu_probe.py --shape 32,4,32,8,4096,128 --causal --iters 1 2>&1 | grep -E "Duration|DRAM Throughput|SM Frequency|Memory Throughput|Compute \(SM\)|Stall|Warp Cycles|Registers|L2 Hit|Mem Busy|Max Bandwidth" | head -30
timeout 100 ncu --section SpeedOfLight --section WarpStateStats --section MemoryWorkloadAnalysis -k regex:decode_kernel -c 1 python perf/ncu_probe.py --shape 32,1,32,8,4096,128 --iters 1 2>&1 | grep -E "Duration|DRAM Throughput|SM Frequency|Memory Throughput|Compute \(SM\)|Stall|Warp Cycles|Registers|L2 Hit|Mem Busy|Max Bandwidth" | head -30
echo "=== variants"
timeout 230 python perf/variants.py --variant base= --variant nosplitqk=-DFMHA_SM90_D512_SPLIT_QK=0 --variant nopdl=-DFMHA_SM90_PDL_COMBINE=0 --variant deep4=-DFMHA_SM90_DEEP_SMALL_D_STAGES=4 2>&1 | tail -40
date -u
