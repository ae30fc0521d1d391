#!/bin/bash
# Cluster merge by bulk copies: each CTA stages its partial rows in its own shared memory and sends each
# rank its chunk with one cp.async.bulk (shared::cta -> shared::cluster, complete_tx on the rank's
# barrier), instead of a remote st.shared::cluster per fragment (5.3 us at 64 rows, run bt); the merge
# then serves up to 64 packed rows (FMHA_SM90_CLUSTER_MERGE_MAX_ROWS=64, T=16 included). CUDA tests (with
# 64-row cluster cases), the three sanitizers, then sustained: head (64 rows), r16 (new code, 16 rows),
# prev (run bl's library, 16 rows), prevcm64 (the old pushes at 64 rows).
export PYTHONPATH=. FMHA_CACHE_DIR=$PWD/.build/cache68
date -u; nvidia-smi --query-gpu=name,serial,power.limit --format=csv,noheader
timeout 150 python -m pytest -q -n 8 tests/test_cuda.py -p no:cacheprovider 2>&1 | tail -3
for t in memcheck racecheck synccheck; do
  timeout 100 compute-sanitizer --tool $t python tests/sanitize_subset.py 2>&1 | grep -E "SUMMARY|NOT in|nan" | tail -3
done
date -u
timeout 150 python -W ignore perf/variants.py --sustained --rounds 7 --only 6,13,4 --no-peers --variant head= \
  --variant r16=-DFMHA_SM90_CLUSTER_MERGE_MAX_ROWS=16 --lib prev=$PWD/.build/cache68/prev.so \
  --lib prevcm64=$PWD/.build/cache68/prevcm64.so 2>&1 | grep -v Warn | sed 's/maxdiff \([0-9.e-]*\)/md=\1/g'
date -u
