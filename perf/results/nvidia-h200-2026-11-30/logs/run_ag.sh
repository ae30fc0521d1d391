#!/bin/bash
# Fifth session, first call: whole suite (host changes d6c613c / 36c4480 and the graph-capture test not yet
# run on a GPU), the MQA D=512 Hq=128 A/B against the bda8c61 library (run t 222.6 vs run ae 236.2 us),
# and an ncu profile of that kernel (tensor pipe, shared memory, stall reasons) to pick its next design.
export PYTHONPATH=. FMHA_CACHE_DIR=$PWD/.build/cache30
date -u
timeout 170 python -m pytest -q -n 8 tests/ -rs -p no:cacheprovider 2>&1 | grep -v -i "deprecat\|warnings.warn\|benchmark" | tail -6
date -u
timeout 150 python -W ignore perf/variants.py --rounds 5 --only 10,9,0 --no-peers --variant head= --lib bda8c61=$PWD/.build/old/libfmha_bda8c61.so 2>&1 | grep -v Warn | sed 's/maxdiff \([0-9.e-]*\)/md=\1/g'
date -u
timeout 30 python perf/ncu_probe.py --shape 64,1,128,1,4096,512 --clocks --seconds 3
M=gpu__time_duration.sum,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_uniform.avg.pct_of_peak_sustained_active,l1tex__data_pipe_lsu_wavefronts_mem_shared.avg.pct_of_peak_sustained_elapsed,sm__memory_throughput.avg.pct_of_peak_sustained_elapsed,lts__t_sectors_srcunit_tex_op_read.sum,dram__bytes_read.sum,lts__throughput.avg.pct_of_peak_sustained_elapsed,smsp__cycles_active.avg
timeout 120 ncu --clock-control none -k regex:decode_kernel --metrics $M --section SpeedOfLight --section WarpStateStats --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis -s 1 -c 1 python perf/ncu_probe.py --shape 64,1,128,1,4096,512 --iters 1 2>&1 | grep -v "^==PROF==\|^\s*$" | cut -c1-150 | tail -90
date -u
