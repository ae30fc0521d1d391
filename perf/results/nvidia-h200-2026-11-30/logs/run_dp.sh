#!/bin/bash
# Thirteenth session: the C API change (merge-mode query with the dtype; no workspace for splits merged in
# clusters, the Python side allocating none for them). Device code of the kernels unchanged since 91455fd.
# The whole test suite (with the twelfth session's explain note, never run on a GPU before), memcheck on the
# sanitizer subset (the workspace check moved), and the host cost of an eager call on the default tiny problem
# and on a small split-KV problem merged in clusters.
export PYTHONPATH=. FMHA_CACHE_DIR=$PWD/.build/cache97
date -u; nvidia-smi --query-gpu=name,serial --format=csv,noheader
timeout 220 python -m pytest -q -n 8 tests/ -p no:cacheprovider 2>&1 | tail -4
date -u
timeout 120 compute-sanitizer --tool memcheck python tests/sanitize_subset.py 2>&1 | tee $OUT/memcheck.log | grep -E "SUMMARY|NOT in|nan|rror:" | tail -4; echo "cases run: $(grep -c "^ran" $OUT/memcheck.log)"
date -u
for shape in 4,1,32,8,128,128 1,1,32,8,1024,128; do
  timeout 90 python perf/overhead.py --shape $shape --calls 5000 --repeats 3 --profile-calls 1000 2>&1 | tee $OUT/overhead_${shape//,/_}.log
done
date -u
