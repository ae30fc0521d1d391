"""Run dg: launch plans forced on B1 S8192 (the shape where the triton backend beats cuda by 12%, run dc),
interleaved in one process: the default deep plan (16 splits of four 128-token tiles), fewer / more deep
splits (two waves at 32), and the wide instantiation (2 CTAs per SM, 64-token tiles, 64-row loop). Prints
what fmha.explain reports and the median of per-round medians (CUDA-graph replay over rotating inputs > 3x
L2, 200 ms settle), triton beside."""
import statistics, sys
import torch
import fmha
from fmha.backends import registry
from fmha.cuda import backend as cb
from perf.timing import measure, rotation_count, l2_cache_bytes, gbps
from perf.ncu_probe import random_cache

dev = torch.device("cuda")
torch.zeros(1, device=dev)
b = registry()["cuda"]
b._bind()
plan = b.launch_plan
rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
shapes = [(1, 1, 32, 8, 8192, 128), (1, 1, 32, 8, 16384, 128), (2, 1, 32, 8, 8192, 128)]
plans = [None, (cb.DEEP, 8), (cb.DEEP, 12), (cb.DEEP, 32), (cb.WIDE, 16), (cb.WIDE, 32), (cb.WIDE, 33), "triton"]
for shape in shapes:
    B, T, Hq, Hkv, S, D = shape
    nbytes = 2 * (2 * B * T * Hq * D + 2 * B * S * Hkv * D)
    n_sets = rotation_count(nbytes, l2_cache_bytes(dev))
    sets = [(torch.randn(B, T, Hq, D, device=dev, dtype=torch.bfloat16), random_cache(B, S, Hkv, D),
             random_cache(B, S, Hkv, D), torch.empty(B, T, Hq, D, device=dev, dtype=torch.bfloat16))
            for _ in range(n_sets)]
    ref = fmha.attention(*sets[0][:3], backend="reference")
    times, launches = {}, {}
    for r in range(rounds):
        for pl in plans:
            backend = "triton" if pl == "triton" else "cuda"
            if backend == "cuda":
                b.launch_plan = plan if pl is None else (lambda p, i, x=pl: x)
                b._launches = {}
            q, k, v, o = sets[0]
            launches[pl] = fmha.explain(q, k, v, backend=backend).launch
            fn = lambda i, be=backend: fmha.attention(*sets[i][:3], backend=be, out=sets[i][3])
            fn(0)
            err = (sets[0][3].float() - ref.float()).abs().max().item()
            assert err < 2e-2, (shape, pl, err)
            times.setdefault(pl, []).append(measure(fn, n_sets, dev, replays=30, settle_s=0.2)["graph_us"])
    b.launch_plan = plan
    b._launches = {}
    for pl, t in times.items():
        us = statistics.median(t)
        print(f"{shape} plan={pl}: {us:.2f} us {gbps(nbytes, us):.0f} GB/s (rounds {', '.join(f'{x:.2f}' for x in t)}) "
              f"[{launches[pl]}]", flush=True)
