#!/bin/bash
# Runs ck/cl: the D=512 K/V multicast pairs ran at half speed (B=32: 207.6 vs 115.3 us; not two waves of
# clusters: the H200 holds 66 of them), at 1980 MHz and 426-511 W, with the consumers' remote arrivals
# .release.cluster and the producer's wait .acquire.cluster. Now (head) the forms CUTLASS's ClusterBarrier uses:
# mbarrier.arrive.shared::cluster (default .release.cta) and the CTA-scope try_wait; scope1 = run ck's forms;
# mc0 = unpaired (SASS-identical to prev, run by's library). Then tests + sanitizers on head.
export PYTHONPATH=. FMHA_CACHE_DIR=$PWD/.build/cache82
date -u
timeout 150 python -W ignore perf/variants.py --sustained --rounds 5 --no-peers --variant head= \
  --variant scope1=-DFMHA_PTX_REMOTE_ARRIVE_CLUSTER_SCOPE=1 --variant mc0=-DFMHA_SM90_D512_KV_MULTICAST=0 \
  --lib prev=$PWD/.build/cache82/prev.so --only 10 2>&1 | grep -v Warn
timeout 60 python -W ignore perf/ncu_probe.py --shape 64,1,128,1,4096,512 --clocks --seconds 2 2>&1 | grep -E "us/call"
timeout 240 python -m pytest -q -n 8 tests/ -p no:cacheprovider 2>&1 | tail -2
for t in memcheck racecheck synccheck; do
  timeout 150 compute-sanitizer --tool $t python tests/sanitize_subset.py 2>&1 | grep -E "SUMMARY|NOT in|nan" | tail -3
done
date -u
