#!/bin/bash
# Split-KV merge inside thread-block clusters (FMHA_SM90_CLUSTER_MERGE) + 32-token TMA boxes: CUDA + API
# tests, sanitizers, explain, and variants against the combine kernel and the previous defaults.
export PYTHONPATH=. FMHA_CACHE_DIR=$PWD/.build/cache25
date -u
timeout 200 python -m pytest -q -n 8 tests/test_cuda.py tests/test_api.py -p no:cacheprovider 2>&1 | grep -E "passed|failed|Error|assert" | head -20 | cut -c1-300
timeout 150 compute-sanitizer --tool racecheck python tests/sanitize_subset.py 2>&1 | grep -E "Race|RACECHECK SUMMARY|nan|rror" | head -6 | cut -c1-300
timeout 150 compute-sanitizer --tool memcheck python tests/sanitize_subset.py 2>&1 | grep -E "ERROR SUMMARY|nan|Invalid|rror" | head -6 | cut -c1-300
python -c "
import torch, fmha
for sh in [(1,1,32,8,65536,128),(8,16,32,8,8192,128),(1,1,16,1,8192,512)]:
    B,T,Hq,Hkv,S,D=sh
    q=torch.randn(B,T,Hq,D,device='cuda',dtype=torch.bfloat16); k=torch.randn(B,S,Hkv,D,device='cuda',dtype=torch.bfloat16)
    print(sh, fmha.explain(q,k,k,causal=T>1,backend='cuda').launch)
"
timeout 250 python -W ignore perf/variants.py --rounds 3 --only 2,6,11,3,4,12,0,7,9 --variant cluster= --variant combine=-DFMHA_SM90_CLUSTER_MERGE=0 --variant previous="-DFMHA_SM90_CLUSTER_MERGE=0 -DFMHA_SM90_TMA_BOX_ROWS=0" 2>&1 | grep -v Warn | sed 's/maxdiff \([0-9.e-]*\)/md=\1/g'
date -u
