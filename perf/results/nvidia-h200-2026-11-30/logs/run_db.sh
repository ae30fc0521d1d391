#!/bin/bash
# Two-split merge as cluster pairs (kMergePair, store_output_pair): each CTA pushes the rows its partner merges
# into the partner's shared memory as soon as its own loop is done. Targeted tests, the three sanitizers on the
# subset, then interleaved A/B: pair = default, nopair = -DFMHA_SM90_PAIR_MERGE=0 (combine kernel), head = run
# cs's library.
export PYTHONPATH=. FMHA_CACHE_DIR=$PWD/.build/cache93
date -u; nvidia-smi --query-gpu=name,serial --format=csv,noheader
timeout 200 python -m pytest -q -n 8 tests/test_cuda.py -k "pair or combine or variant or deep_64 or deterministic or graph or forced_split or cluster" 2>&1 | tail -4
date -u
timeout 200 python -W ignore perf/variants.py --sustained --rounds 7 --no-peers --variant pair= \
  --variant nopair=-DFMHA_SM90_PAIR_MERGE=0 --lib head=.build/cache86/libfmha_sm_90a_67cc6ecabb6d3ce1_ba1db6eb.so \
  --only 6,2,5 2>&1 | grep -v Warn
date -u
for t in memcheck racecheck synccheck; do
  echo "== $t"
  timeout 100 compute-sanitizer --tool $t python tests/sanitize_subset.py 2>&1 | tee $OUT/$t.log | grep -E "SUMMARY|NOT in|nan|rror:" | tail -4; echo "cases run: $(grep -c "^ran" $OUT/$t.log)"
done
date -u
