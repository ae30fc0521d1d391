#!/bin/bash
# synccheck on the final kernel (c89ab92's device code; the last synccheck was on the starting kernel, run cg),
# and the sanitizer subset's racecheck again, the library of run cs.
export PYTHONPATH=. FMHA_CACHE_DIR=$PWD/.build/cache86
date -u; nvidia-smi --query-gpu=name,serial --format=csv,noheader
for t in synccheck racecheck; do
  echo "== $t"
  timeout 250 compute-sanitizer --tool $t python tests/sanitize_subset.py 2>&1 | tee $OUT/$t.log | grep -E "SUMMARY|NOT in|nan|Error|rror:" | tail -5; echo "cases run: $(grep -c "^ran" $OUT/$t.log)"
done
date -u
