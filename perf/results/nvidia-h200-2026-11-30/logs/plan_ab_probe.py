"""Run do: the clustered plan (fmha's launch_plan) against the plan before it (the shape-only split count of
fmha.splits.choose_num_splits, + combine kernel) at the 1 MiB-a-CTA edge and below, on whichever H200 the call
gets, in both regimes of the suite: calls back to back, and each call followed by a one-element add (no PDL
overlap of consecutive calls). Interleaved round-robin in one process; median of per-round medians."""
import statistics, sys
import torch
import fmha
from fmha.backends import registry
from fmha.cuda import backend as cb
from fmha.splits import choose_num_splits, num_sms
from perf.timing import measure, rotation_count, l2_cache_bytes
from perf.ncu_probe import random_cache

dev = torch.device("cuda")
torch.zeros(1, device=dev)
b = registry()["cuda"]
b._bind()
plan = b.launch_plan
rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 5
tiny = torch.zeros(1, device=dev)
shapes = [(1, 1, 32, 8, 8192, 128), (1, 1, 32, 8, 16384, 128), (2, 1, 32, 8, 8192, 128), (4, 1, 32, 8, 4096, 128),
          (1, 4, 32, 8, 8192, 128), (1, 1, 16, 8, 8192, 256)]
for shape in shapes:
    B, T, Hq, Hkv, S, D = shape
    nbytes = 2 * (2 * B * T * Hq * D + 2 * B * S * Hkv * D)
    n_sets = rotation_count(nbytes, l2_cache_bytes(dev))
    sets = [(torch.randn(B, T, Hq, D, device=dev, dtype=torch.bfloat16), random_cache(B, S, Hkv, D),
             random_cache(B, S, Hkv, D), torch.empty(B, T, Hq, D, device=dev, dtype=torch.bfloat16))
            for _ in range(n_sets)]
    ref = fmha.attention(*sets[0][:3], backend="reference")
    p = fmha.problem.validate(*sets[0][:3], None, None, True, None)
    units = cb._grid_ctas(p)
    old = (cb.DEEP, choose_num_splits(units, S, b._tile_n[(D, cb.DEEP)], num_sms(0) * b._ctas_per_sm[(D, cb.DEEP)]))
    times, launches = {}, {}
    for r in range(rounds):
        for name, pl in (("clustered", None), ("before", old)):
            b.launch_plan = plan if pl is None else (lambda p, i, x=pl: x)
            b._launches = {}
            launches[name] = fmha.explain(*sets[0][:3], backend="cuda").launch.split(";")[-1].strip()
            fn = lambda i: fmha.attention(*sets[i][:3], backend="cuda", out=sets[i][3])
            fn_add = lambda i: (fmha.attention(*sets[i][:3], backend="cuda", out=sets[i][3]), tiny.add_(1))
            fn(0)
            err = (sets[0][3].float() - ref.float()).abs().max().item()
            assert err < 2e-2, (shape, name, err)
            times.setdefault((name, "b2b"), []).append(measure(fn, n_sets, dev, replays=30, settle_s=0.2)["graph_us"])
            times.setdefault((name, "add"), []).append(measure(fn_add, n_sets, dev, replays=30, settle_s=0.2)["graph_us"])
    b.launch_plan = plan
    b._launches = {}
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"{shape}: back to back clustered {med[('clustered', 'b2b')]:.2f} us vs before {med[('before', 'b2b')]:.2f} "
          f"({med[('clustered', 'b2b')] / med[('before', 'b2b')]:.3f}x); with an add {med[('clustered', 'add')]:.2f} vs "
          f"{med[('before', 'add')]:.2f} ({med[('clustered', 'add')] / med[('before', 'add')]:.3f}x) "
          f"[{launches['clustered']} | {launches['before']}]", flush=True)
