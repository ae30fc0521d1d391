"""Run dh: split count against merge path. Run dg found B1 S8192 13.2 us with 8 splits merged in clusters of
8 against 15.3 with the plan's 16 splits + combine kernel. Here, per shape: the plan (fmha's launch_plan),
and forced deep plans of fewer splits s (down to a third of the plan's) where the launch would merge in
clusters (fmha_sm90_cluster_merge != 0), the largest four; triton beside. Median of per-round medians
(CUDA-graph replay over rotating inputs > 3x L2, 200 ms settle), interleaved in one process."""
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
rounds = int(sys.argv[1]) if len(sys.argv) > 1 and sys.argv[1].isdigit() else 3
# run dh's shapes by default; "--edges" (run di): the edges of the rule run dh suggests
shapes = [(1, 1, 32, 8, S, 128) for S in (4096, 8192, 16384, 32768, 65536)]
shapes += [(2, 1, 32, 8, S, 128) for S in (4096, 8192, 16384, 32768)]
shapes += [(4, 1, 32, 8, S, 128) for S in (4096, 8192, 16384)]
shapes += [(1, 1, 32, 4, 8192, 128), (1, 1, 32, 4, 32768, 128), (1, 1, 64, 8, 8192, 128), (1, 4, 32, 8, 8192, 128),
           (1, 1, 32, 8, 8192, 64), (1, 1, 32, 8, 32768, 64), (1, 1, 8, 1, 8192, 128), (1, 1, 8, 1, 65536, 128)]
if "--small" in sys.argv:  # run dk: grids of fewer than 8 (KV head, sequence) units, split counts 16, 12, 8
    shapes = [(1, 1, 8, 1, S, 128) for S in (2048, 4096, 8192, 16384, 32768)]
    shapes += [(1, 1, 16, 2, S, 128) for S in (4096, 8192, 16384)]
    shapes += [(1, 1, 32, 4, S, 128) for S in (4096, 8192, 16384)]
    shapes += [(1, 1, 16, 1, 8192, 128), (1, 1, 8, 1, 8192, 64), (1, 1, 8, 1, 16384, 64), (1, 1, 8, 1, 8192, 256),
               (1, 1, 8, 1, 16384, 256)]
if "--edges" in sys.argv:
    shapes = [(1, 1, 32, 8, 262144, 128), (3, 1, 32, 8, 8192, 128), (3, 1, 32, 8, 32768, 128), (2, 1, 32, 8, 65536, 128),
              (6, 1, 32, 8, 8192, 128), (6, 1, 32, 8, 32768, 128), (1, 1, 64, 16, 16384, 128), (1, 4, 32, 8, 65536, 128),
              (1, 1, 64, 8, 65536, 128), (1, 1, 16, 8, 8192, 256), (1, 1, 16, 8, 32768, 256), (1, 1, 32, 8, 2048, 128),
              (1, 1, 32, 8, 1000, 128), (2, 3, 28, 4, 8192, 128)]
for shape in shapes:
    B, T, Hq, Hkv, S, D = shape
    nbytes = 2 * (2 * B * T * Hq * D + 2 * B * S * Hkv * D)
    n_sets = rotation_count(nbytes, l2_cache_bytes(dev))
    sets = [(torch.randn(B, T, Hq, D, device=dev, dtype=torch.bfloat16), random_cache(B, S, Hkv, D),
             random_cache(B, S, Hkv, D), torch.empty(B, T, Hq, D, device=dev, dtype=torch.bfloat16))
            for _ in range(n_sets)]
    ref = fmha.attention(*sets[0][:3], backend="reference")
    p = fmha.problem.validate(*sets[0][:3], None, None, True, None)
    variant, s0 = plan(p, 0)
    units = cb._grid_ctas(p)
    rows = T * (Hq // Hkv)
    cands = [s for s in range(s0 - 1, max(1, s0 // 3) - 1, -1)
             if b._cluster_merge(D, cb.DEEP, s, units, rows) != 0][:5] if variant == cb.DEEP and s0 > 1 else []
    if "--small" in sys.argv:
        cands = [s for s in (16, 12, 8) if s < s0 and b._cluster_merge(D, cb.DEEP, s, units, rows) != 0]
    plans = [None] + [(cb.DEEP, s) for s in cands] + ["triton"]
    times, launches = {}, {}
    for r in range(rounds):
        for pl in plans:
            backend = "triton" if pl == "triton" else "cuda"
            if backend == "cuda":
                b.launch_plan = plan if pl is None else (lambda p, i, x=pl: x)
                b._launches = {}
            launches[pl] = fmha.explain(*sets[0][:3], backend=backend).launch
            fn = lambda i, be=backend: fmha.attention(*sets[i][:3], backend=be, out=sets[i][3])
            fn(0)
            err = (sets[0][3].float() - ref.float()).abs().max().item()
            assert err < 2e-2, (shape, pl, err)
            times.setdefault(pl, []).append(measure(fn, n_sets, dev, replays=30, settle_s=0.2)["graph_us"])
    b.launch_plan = plan
    b._launches = {}
    base = statistics.median(times[None])
    for pl, t in times.items():
        us = statistics.median(t)
        print(f"{shape} plan={pl}: {us:.2f} us ({us / base:.3f}x) {gbps(nbytes, us):.0f} GB/s "
              f"(rounds {', '.join(f'{x:.2f}' for x in t)}) [{launches[pl].split(';')[-1].strip()}]", flush=True)
