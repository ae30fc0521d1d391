#!/bin/bash
# Cluster merge by pushes (st.shared::cluster into the merging rank, local merge): tests, sanitizers,
# explain; variants: cluster push vs combine kernel vs no merge at all (probe).
export PYTHONPATH=. FMHA_CACHE_DIR=$PWD/.build/cache27
date -u
timeout 200 python -m pytest -q -n 8 tests/test_cuda.py tests/test_api.py -p no:cacheprovider 2>&1 | grep -E "passed|failed|Error|assert" | head -12 | cut -c1-300
timeout 150 compute-sanitizer --tool racecheck python tests/sanitize_subset.py 2>&1 | grep -E "Race|RACECHECK SUMMARY|nan|rror" | head -6 | cut -c1-300
timeout 150 compute-sanitizer --tool memcheck python tests/sanitize_subset.py 2>&1 | grep -E "ERROR SUMMARY|nan|Invalid|rror" | head -6 | cut -c1-300
python -c "
import torch, fmha
from fmha.cuda import loader
lib = loader.load()
for D, v in ((128, 1), (128, 0), (64, 1), (256, 1), (512, 0)):
    print('D', D, 'variant', v, 'max active clusters by size:', [lib.fmha_sm90_max_active_clusters(D, v, c) for c in range(1, 17)])
for sh in [(1,1,32,8,65536,128),(8,16,32,8,8192,128),(4,1,32,8,512,128)]:
    B,T,Hq,Hkv,S,D=sh
    q=torch.randn(B,T,Hq,D,device='cuda',dtype=torch.bfloat16); k=torch.randn(B,S,Hkv,D,device='cuda',dtype=torch.bfloat16)
    print(sh, fmha.explain(q,k,k,causal=T>1,backend='cuda').launch)
"
timeout 250 python -W ignore perf/variants.py --rounds 3 --only 6,4,13,2,3 --variant cluster= --variant combine=-DFMHA_SM90_CLUSTER_MERGE=0 --variant nomerge=-DFMHA_SM90_PROBE_NO_COMBINE=1 2>&1 | grep -v Warn | sed 's/maxdiff \([0-9.e-]*\)/md=\1/g'
date -u
