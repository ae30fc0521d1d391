#!/bin/bash
# Final run of the session: whole suite, sanitizers, full perf suite (writes the tuning table), and the
# D=512 Hq=128 kernel's speed-of-light with split Q K^T on.
export PYTHONPATH=. FMHA_CACHE_DIR=$PWD/.build/cache14
date -u
timeout 150 python -m pytest -q -n 8 tests/ -x -rs -p no:cacheprovider 2>&1 | grep -v -i "deprecat\|warnings.warn" | tail -4
timeout 60 compute-sanitizer --tool memcheck python tests/sanitize_subset.py 2>&1 | tail -1
timeout 60 compute-sanitizer --tool racecheck python tests/sanitize_subset.py 2>&1 | tail -1
date -u
timeout 240 python -m perf --preset full --write-tuning --budget-s 150 --out $OUT/perf-full 2>&1 | tr '\r' '\n' | grep -E "GB/s|ceilings|wrote|done" | grep -v "^\s*$" | cut -c1-260
date -u
timeout 60 ncu --clock-control none -k regex:decode_kernel -s 1 -c 1 --section SpeedOfLight --section ComputeWorkloadAnalysis python perf/ncu_probe.py --shape 64,1,128,1,4096,512 --iters 1 > $OUT/ncu_d512_hq128_splitqk.txt 2>&1
grep -iE "Duration|Throughput|SM Frequency|Issue Slots|pipeline" $OUT/ncu_d512_hq128_splitqk.txt | cut -c1-150 | head -14
date -u
