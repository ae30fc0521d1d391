"""Host-side cost of one eager `fmha.attention` call (argument checks, dispatch, launch).

python perf/overhead.py  — on a GPU. For a tiny problem the GPU finishes each kernel before the
host issues the next, so the wall time per call of a long loop is the host cost; the pieces
(validate, decide, backend.run) are timed separately the same way.
"""
from __future__ import annotations

import time

import torch

import fmha
from fmha.backends import registry
from fmha.dispatch import decide
from fmha.problem import validate


def per_call_us(fn, n=2000):
    for _ in range(50):
        fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / n * 1e6


def main():
    B, T, Hq, Hkv, S, D = 4, 1, 32, 8, 128, 128
    q = torch.randn(B, T, Hq, D, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(B, S, Hkv, D, device="cuda", dtype=torch.bfloat16)
    v = torch.randn_like(k)
    out = torch.empty_like(q)
    lse = torch.empty(B, Hq, T, device="cuda")
    p = validate(q, k, v, None, None, True, out)
    print(f"problem {p.describe()}; {torch.cuda.get_device_name()}; torch {torch.__version__}")
    print(f"  validate()                 {per_call_us(lambda: validate(q, k, v, None, None, True, out)):6.1f} us")
    print(f"  decide()                   {per_call_us(lambda: decide(p, 'auto')):6.1f} us")
    for name in fmha.available_backends():
        if name == "reference":
            continue
        b = registry()[name]
        run = per_call_us(lambda: b.run(p, q, k, v, None, out, lse))
        full = per_call_us(lambda: fmha.attention(q, k, v, backend=name, out=out))
        print(f"  {name:7s} backend.run()       {run:6.1f} us")
        print(f"  {name:7s} fmha.attention()    {full:6.1f} us  (eager, end to end)")


if __name__ == "__main__":
    main()
