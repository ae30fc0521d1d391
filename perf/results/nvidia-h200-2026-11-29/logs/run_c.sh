#!/bin/bash
export PYTHONPATH=. FMHA_CACHE_DIR=$PWD/.build/cache2
date -u
python -c "import fmha.cuda.loader as l; print(l.load())" 2>&1 | tail -1
echo "=== pytest"
timeout 160 python -m pytest -q -n 8 tests/ -x -rs -p no:cacheprovider 2>&1 | grep -v -i "deprecat\|warnings.warn" | tail -8
echo "=== sanitizer"
timeout 60 compute-sanitizer --tool memcheck python tests/sanitize_subset.py 2>&1 | tail -1
timeout 60 compute-sanitizer --tool racecheck python tests/sanitize_subset.py 2>&1 | tail -1
echo "=== overhead"
timeout 60 python perf/overhead.py 2>&1 | tail -30
echo "=== variants (interleaved)"
timeout 230 python -W ignore perf/variants.py --rounds 3 --variant base= --variant nooverlap=-DFMHA_SM90_OVERLAP=0 --variant nopdl=-DFMHA_SM90_PDL=0 --variant deep4=-DFMHA_SM90_DEEP_SMALL_D_STAGES=4 2>&1 | grep -v Warn | sed 's/maxdiff \([0-9.e-]*\)/md=\1/g'
date -u
