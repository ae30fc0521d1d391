#!/bin/bash
# (Two device calls right after run ci, on the same machine and library, written down here afterwards.)
# 1. racecheck of one narrow split call (B1 S4096, 16 splits) with the narrow tile groups:
export PYTHONPATH=. FMHA_CACHE_DIR=$PWD/.build/cache81
timeout 100 compute-sanitizer --tool racecheck --print-limit 6 python rc.py  # rc.py: one fmha.attention call, (1, 1, 32, 8, 4096, 128)
# 2. racecheck of the sanitizer subset with the hazards' source lines:
timeout 150 compute-sanitizer --tool racecheck --print-limit 4 python tests/sanitize_subset.py
