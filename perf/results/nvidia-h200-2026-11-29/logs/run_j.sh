#!/bin/bash
# New session, first GPU run: validate the post-run-i clean-up (fused combine removed) and take a
# full suite with --settle-ms; ncu the D=512 Hq=128 kernel (what limits it: tensor pipe, shared memory, stalls).
export PYTHONPATH=. FMHA_CACHE_DIR=$PWD/.build/cache9
date -u
timeout 150 python -m pytest -q -n 8 tests/ -x -rs -p no:cacheprovider 2>&1 | grep -v -i "deprecat\|warnings.warn" | tail -4
timeout 60 compute-sanitizer --tool memcheck python tests/sanitize_subset.py 2>&1 | tail -1
timeout 60 compute-sanitizer --tool racecheck python tests/sanitize_subset.py 2>&1 | tail -1
date -u
timeout 240 python -m perf --preset full --write-tuning --budget-s 150 --out $OUT/perf-full 2>&1 | tr '\r' '\n' | grep -E "GB/s|ceilings|wrote|done" | grep -v "^\s*$" | cut -c1-260
date -u
timeout 100 ncu --clock-control none -k regex:decode_kernel -s 1 -c 1 --section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis_Tables --section WarpStateStats --section SchedulerStats python perf/ncu_probe.py --shape 64,1,128,1,4096,512 --iters 1 > $OUT/ncu_d512_hq128.txt 2>&1
grep -iE "Duration|Throughput|Pipe|Shared|Stall|Issued|Eligible|SM Frequency|Bank" $OUT/ncu_d512_hq128.txt | cut -c1-150 | head -60
date -u
