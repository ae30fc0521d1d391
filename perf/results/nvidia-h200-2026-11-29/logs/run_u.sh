#!/bin/bash
# Check of the committed head after run t (C API query for the narrow loop, explain(), wrapper refactor).
export PYTHONPATH=. FMHA_CACHE_DIR=$PWD/.build/cache19
date -u
timeout 100 python -m pytest -q -n 8 tests/test_cuda.py tests/test_api.py -x -p no:cacheprovider 2>&1 | tail -1
timeout 50 compute-sanitizer --tool racecheck python tests/sanitize_subset.py 2>&1 | tail -1
python -c "
import torch, fmha
q = torch.randn(1, 1, 32, 128, device='cuda', dtype=torch.bfloat16)
k = torch.randn(1, 65536, 8, 128, device='cuda', dtype=torch.bfloat16)
print(fmha.explain(q, k, k, backend='cuda'))"
date -u
