#!/bin/bash
# Seventeenth session: D = 512 keeps both loops, chosen by packed rows (fmha/cuda/backend.py _d512_loop): the wide
# instantiation runs the seesaw (more than 64 rows), the deep one the split-Q K^T loop (one row block). cache133:
# the new deep D = 512 kernels are SASS-identical to run ff's split loop, every other kernel to run fe's. Tests,
# sanitizers (two more seesaw cases: 44), explain, and the default build against SEESAW=0 on both sides of the rule.
export PYTHONPATH=. FMHA_CACHE_DIR=$PWD/.build/cache133
OLD="-DFMHA_SM90_D512_SEESAW=0"
date -u; nvidia-smi --query-gpu=name,serial --format=csv,noheader
timeout 200 python -m pytest -q -n 8 tests/ -p no:cacheprovider 2>&1 | tail -2
for tool in racecheck memcheck synccheck; do
  timeout 90 compute-sanitizer --tool $tool python tests/sanitize_subset.py > $OUT/$tool.log 2>&1
  echo "$tool: $(grep -E 'SUMMARY' $OUT/$tool.log | tail -1) cases run: $(grep -c '^ran' $OUT/$tool.log)"
done
date -u
python - <<'PY'
import torch, fmha
for B, T, Hq in ((64, 1, 128), (64, 1, 64), (32, 4, 16)):
    q = torch.randn(B, T, Hq, 512, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(B, 4096, 1, 512, device="cuda", dtype=torch.bfloat16)
    print((B, T, Hq), fmha.explain(q, k, k, backend="cuda").launch)
PY
timeout 60 python perf/variants.py --sustained --rounds 4 --per-round --shape 64,1,128,1,4096,512 \
  --shape 64,1,64,1,4096,512 --shape 32,4,16,1,4096,512 --variant default= --variant split="$OLD" --no-peers 2>&1 \
  | grep -v "Warning\|return F.scaled" | cut -c1-900
date -u
