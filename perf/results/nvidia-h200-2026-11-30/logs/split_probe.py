"""Run cn: split counts forced on the B=1 split-KV shapes, interleaved in one process. Is a cluster
merge of 15 splits (8 clusters of 15 CTAs = 120 SMs, no combine kernel) faster than 16 splits + the
combine kernel (128 CTAs)? Prints the clusters the GPU holds per cluster size, then per shape and
split count the launch fmha.explain reports and the median of per-round medians (CUDA-graph replay
over rotating inputs > 3x L2, 200 ms settle)."""
import statistics, sys
import torch
import fmha
from fmha.backends import registry
from fmha.cuda import backend as cb
from fmha.cuda import loader
from perf.timing import measure, rotation_count, l2_cache_bytes, gbps
from perf.ncu_probe import random_cache

dev = torch.device("cuda")
lib = loader.load()
torch.zeros(1, device=dev)
print("max active clusters D=128 deep, sizes 8, 12-16:",
      [lib.fmha_sm90_max_active_clusters(128, 1, c) for c in (8, 12, 13, 14, 15, 16)], flush=True)
b = registry()["cuda"]
b._bind()
plan = b.launch_plan
rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
for shape in [(1, 1, 32, 8, 65536, 128), (1, 1, 32, 8, 8192, 128), (1, 1, 32, 8, 262144, 128)]:
    B, T, Hq, Hkv, S, D = shape
    nbytes = 2 * (2 * B * T * Hq * D + 2 * B * S * Hkv * D)
    n_sets = rotation_count(nbytes, l2_cache_bytes(dev))
    sets = [(torch.randn(B, T, Hq, D, device=dev, dtype=torch.bfloat16), random_cache(B, S, Hkv, D),
             random_cache(B, S, Hkv, D), torch.empty(B, T, Hq, D, device=dev, dtype=torch.bfloat16))
            for _ in range(n_sets)]
    ref = fmha.attention(*sets[0][:3], backend="triton")
    times, launches = {}, {}
    for r in range(rounds):
        for splits in (None, 16, 15, 14, 12):
            b.launch_plan = plan if splits is None else (lambda p, i, n=splits: (cb.DEEP, n))
            b._launches = {}
            q, k, v, o = sets[0]
            launches[splits] = fmha.explain(q, k, v, backend="cuda").launch
            fn = lambda i: fmha.attention(*sets[i][:3], backend="cuda", out=sets[i][3])
            fn(0)
            err = (sets[0][3].float() - ref.float()).abs().max().item()
            assert err < 2e-2, (shape, splits, err)
            times.setdefault(splits, []).append(measure(fn, n_sets, dev, replays=30, settle_s=0.2)["graph_us"])
    for splits, t in times.items():
        us = statistics.median(t)
        print(f"{shape} splits={splits}: {us:.1f} us {gbps(nbytes, us):.0f} GB/s (rounds {', '.join(f'{x:.1f}' for x in t)}) "
              f"[{launches[splits]}]", flush=True)
    b.launch_plan = plan
