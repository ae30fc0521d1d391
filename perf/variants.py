"""Time build variants of the CUDA kernel (tuning knobs passed through FMHA_NVCC_FLAGS).

    python perf/variants.py --variant base= --variant two_ctas="-DFMHA_SM90_SMALL_D_STAGES=2 -DFMHA_SM90_SMALL_D_CTAS_PER_SM=2"

Each variant runs in its own process (its own build of the library), checks the cuda backend
against the triton backend on every shape, and times it by CUDA-graph replay over rotating inputs
larger than L2 (median of 30 replays). The parent prints one table; cuDNN SDPA and Triton are timed
once for reference. Units: us per call, GB/s decimal (q + k + v + out bytes).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

SHAPES = [  # B, T, Hq, Hkv, S, D (FMHA_VARIANT_SHAPES=first:N keeps the first N)
    (128, 1, 32, 8, 8192, 128), (32, 1, 32, 8, 4096, 128), (1, 1, 32, 8, 65536, 128), (4, 1, 32, 8, 512, 128),
    (32, 4, 32, 8, 4096, 128), (8, 16, 32, 8, 8192, 128), (32, 1, 32, 8, 8192, 64), (32, 1, 16, 8, 8192, 256),
    (128, 1, 16, 1, 4096, 512), (64, 1, 128, 1, 4096, 512),
]


def child(contenders):
    shapes = SHAPES[:int(os.environ.get("FMHA_VARIANT_SHAPES", len(SHAPES)))]
    import statistics

    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    import fmha
    from fmha.problem import validate

    def graph_time_us(calls, replays=30):
        for c in calls:
            c()
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for c in calls:
                c()
        g.replay()
        torch.cuda.synchronize()
        times = []
        for _ in range(replays):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            g.replay()
            b.record()
            b.synchronize()
            times.append(a.elapsed_time(b) * 1e3 / len(calls))
        return statistics.median(times)

    def cudnn_call(q, k, v, causal):
        T, S = q.shape[1], k.shape[1]
        mask = None
        if causal:
            j, t = torch.arange(S, device="cuda"), torch.arange(T, device="cuda")
            mask = j[None, :] <= S - T + t[:, None]  # bottom-right
        qt, kt, vt = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)

        def call():
            with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
                return F.scaled_dot_product_attention(qt, kt, vt, attn_mask=mask, enable_gqa=True)
        try:
            call()
            return call
        except Exception:
            return None
    results = {}
    for shape in shapes:
        B, T, Hq, Hkv, S, D = shape
        per = 2 * B * S * Hkv * D * 2
        n = max(2, min(16, -(-3 * 60 * 2 ** 20 // per)))
        sets = [(torch.randn(B, T, Hq, D, device="cuda", dtype=torch.bfloat16),
                 torch.randn(B, S, Hkv, D, device="cuda", dtype=torch.bfloat16),
                 torch.randn(B, S, Hkv, D, device="cuda", dtype=torch.bfloat16)) for _ in range(n)]
        p = validate(*sets[0], None, None, True, None)
        row = {"GB": p.bytes_moved() / 1e9}
        for name in contenders:
            outs = [torch.empty_like(q) for q, _, _ in sets]
            if name in ("cuda", "triton"):
                calls = [lambda q=q, k=k, v=v, o=o, name=name: fmha.attention(q, k, v, backend=name, out=o)
                         for (q, k, v), o in zip(sets, outs)]
            else:
                calls = [cudnn_call(q, k, v, T > 1) for (q, k, v) in sets]
                if any(c is None for c in calls):
                    row[name] = None
                    continue
            try:
                row[name] = graph_time_us(calls)
            except Exception as e:  # report, keep going
                row[name] = f"error: {type(e).__name__}: {e}"[:120]
            if name == "cuda":
                q, k, v = sets[0]
                ref = fmha.attention(q, k, v, backend="triton")
                row["cuda_vs_triton_maxdiff"] = (outs[0].float() - ref.float()).abs().max().item()
        results[str(shape)] = row
        del sets
        torch.cuda.empty_cache()
    print("RESULT " + json.dumps(results), flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--variant", action="append", default=[], help="NAME=FLAGS")
    ap.add_argument("--child", default=None)
    args = ap.parse_args()
    if args.child:
        child(args.child.split(","))
        return
    table = {}
    variants = [v.split("=", 1) for v in args.variant] or [["base", ""]]
    for i, (name, flags) in enumerate(variants):
        contenders = "cuda,triton,sdpa-cudnn" if i == 0 else "cuda"
        env = dict(os.environ, FMHA_NVCC_FLAGS=flags)
        r = subprocess.run([sys.executable, __file__, "--child", contenders], env=env, capture_output=True, text=True)
        line = [ln for ln in r.stdout.splitlines() if ln.startswith("RESULT ")]
        if not line:
            print(f"variant {name} failed:\n{r.stderr[-3000:]}", flush=True)
            continue
        for shape, row in json.loads(line[0][7:]).items():
            t = table.setdefault(shape, {"GB": row["GB"]})
            for k, val in row.items():
                if k != "GB":
                    t[k if k not in ("cuda", "cuda_vs_triton_maxdiff") else f"{k}[{name}]"] = val
        print(f"variant {name} ({flags or 'defaults'}) done", flush=True)
    for shape, t in table.items():
        gb = t.pop("GB")
        cells = []
        for k, val in t.items():
            if isinstance(val, float) and not k.startswith("cuda_vs"):
                cells.append(f"{k} {val:.1f}us {gb / val * 1e6:.0f}GB/s")
            else:
                cells.append(f"{k} {val if not isinstance(val, float) else f'{val:.1e}'}")
        print(f"{shape}: " + "; ".join(cells), flush=True)


if __name__ == "__main__":
    main()
