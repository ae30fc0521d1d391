"""Run cp: would a grid of 132 CTAs (every SM) beat 128 on the split-KV shapes? The split-KV plans run
128 CTAs (8 KV heads x 16 splits, or 64 row blocks x 2). Shapes whose units divide 132 stand in:
forced (deep, n) plans of the same per-CTA work (16, 64 or 32 tiles of 128 keys) at 128 and 132 CTAs, compared per byte (GB/s),
interleaved over rounds (median of per-round medians; CUDA-graph replay over rotating inputs > 3x L2,
200 ms settle). Arguments: rounds."""
import statistics, sys
import torch
import fmha
from fmha.backends import registry
from fmha.cuda import backend as cb
from perf.timing import measure, rotation_count, l2_cache_bytes, gbps
from perf.ncu_probe import random_cache

dev = torch.device("cuda")
b = registry()["cuda"]
b._bind()
plan = b.launch_plan
rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
# (label, shape B,T,Hq,Hkv,S,D, causal, splits)
CASES = [
    ("B1-like 128", (1, 1, 16, 4, 65536, 128), False, 32), ("B1-like 132", (1, 1, 16, 4, 67584, 128), False, 33),
    ("long 128", (1, 1, 16, 4, 262144, 128), False, 32), ("long 132", (1, 1, 16, 4, 270336, 128), False, 33),
    ("T16-like 128", (32, 16, 8, 2, 8192, 128), True, 2), ("T16-like 132", (33, 16, 8, 2, 8192, 128), True, 2),
    ("T16 itself", (8, 16, 32, 8, 8192, 128), True, 2),
]
inputs = {}
for label, shape, causal, splits in CASES:
    B, T, Hq, Hkv, S, D = shape
    if shape in inputs:
        continue
    nbytes = 2 * (2 * B * T * Hq * D + 2 * B * S * Hkv * D)
    n_sets = rotation_count(nbytes, l2_cache_bytes(dev))
    sets = [(torch.randn(B, T, Hq, D, device=dev, dtype=torch.bfloat16), random_cache(B, S, Hkv, D),
             random_cache(B, S, Hkv, D), torch.empty(B, T, Hq, D, device=dev, dtype=torch.bfloat16))
            for _ in range(n_sets)]
    inputs[shape] = (nbytes, n_sets, sets)
times = {}
for r in range(rounds):
    for label, shape, causal, splits in CASES:
        nbytes, n_sets, sets = inputs[shape]
        b.launch_plan = lambda p, i, n=splits: (cb.DEEP, n)
        b._launches = {}
        fn = lambda i: fmha.attention(*sets[i][:3], causal=causal, backend="cuda", out=sets[i][3])
        fn(0)
        if r == 0:
            ref = fmha.attention(*sets[0][:3], causal=causal, backend="triton")
            err = (sets[0][3].float() - ref.float()).abs().max().item()
            assert err < 2e-2, (label, err)
            q, k, v, o = sets[0]
            print(label, fmha.explain(q, k, v, causal=causal, backend="cuda").launch, flush=True)
        times.setdefault(label, []).append(measure(fn, n_sets, dev, replays=30, settle_s=0.2)["graph_us"])
b.launch_plan = plan
for label, shape, causal, splits in CASES:
    t = times[label]
    us = statistics.median(t)
    print(f"{label:14s} {shape} splits={splits}: {us:.1f} us {gbps(inputs[shape][0], us):.0f} GB/s "
          f"(rounds {', '.join(f'{x:.1f}' for x in t)})", flush=True)
