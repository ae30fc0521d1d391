#!/bin/bash
export PYTHONPATH=. FMHA_CACHE_DIR=$PWD/.build/cache
date -u
python -c "import fmha.cuda.loader as l; print(l.load())" 2>&1 | tail -1
echo "=== pytest"
timeout 170 python -m pytest -q -n 8 tests/ -x -rs -p no:cacheprovider 2>&1 | grep -v Deprecation | tail -8
echo "=== variants (interleaved)"
timeout 240 python perf/variants.py --rounds 3 --variant base= --variant nosplitqk=-DFMHA_SM90_D512_SPLIT_QK=0 --variant nopdl=-DFMHA_SM90_PDL=0 --variant nosplitrel=-DFMHA_SM90_SPLIT_RELEASE=0 --variant deep4=-DFMHA_SM90_DEEP_SMALL_D_STAGES=4 2>&1 | tail -14
echo "=== ncu split-KV"
timeout 60 ncu --section SpeedOfLight -c 4 python perf/ncu_probe.py --shape 1,1,32,8,65536,128 --iters 1 2>&1 | grep -E "decode_kernel|combine_splits|Duration|DRAM Throughput" | head -16
echo "=== sanitizer"
timeout 100 compute-sanitizer --tool memcheck python tests/sanitize_subset.py 2>&1 | tail -3
timeout 100 compute-sanitizer --tool racecheck python tests/sanitize_subset.py 2>&1 | tail -3
date -u
