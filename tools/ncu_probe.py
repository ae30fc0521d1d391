"""Run one decode shape a few times, for a profiler to look at (ncu, nsys, compute-sanitizer).

    ncu --section SpeedOfLight -k regex:decode python tools/ncu_probe.py --shape 32,4,32,8,4096,128 --causal
    ncu --section SpeedOfLight -k regex:decode python tools/ncu_probe.py --shape 1,1,32,8,65536,128 --probe stream_only

--shape is B,T,Hq,Hkv,S,D (bf16, full cache); --latent makes v_cache a view of k_cache (DeepSeek's latent:
D = 576 reads its first 512 columns as V, D = 512 all of it). --iters calls follow one warm-up call; with --clocks the
script also prints the SM clock and power NVML reports while it loops --seconds long (no profiler),
to tell a power- or clock-limited kernel from a bandwidth-limited one. --probe MODE runs the cuda backend
on a probe build of the library (fmha.cuda.loader.load_probe: timestamps, stream_only, no_combine; the
last two give wrong results by design). Extra nvcc flags for the product build: FMHA_NVCC_FLAGS. --plan
'@latent_seesaw64 @splits=2' forces the product library's launch plan (tools/_cuda.py force_plan).
"""
from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # run from a checkout

import torch  # noqa: E402

import fmha  # noqa: E402

# Cache storage orders the tools build (random_cache; --kv-layout of tools/variants.py and tools/stream_probe.py).
KV_LAYOUTS = ("bshd", "bhsd")


def random_cache(B: int, S: int, Hkv: int, D: int, kv_layout: str = "bshd"):
    """A bf16 cache of logical shape [B, S, Hkv, D]: stored so (bshd, the tokens of all heads side by side,
    as flash_attn_with_kvcache's cache), or stored [B, Hkv, S, D] and viewed transposed (bhsd: each head's
    tokens contiguous)."""
    if kv_layout == "bshd":
        return torch.randn(B, S, Hkv, D, device="cuda", dtype=torch.bfloat16)
    if kv_layout == "bhsd":
        return torch.randn(B, Hkv, S, D, device="cuda", dtype=torch.bfloat16).transpose(1, 2)
    raise ValueError(f"kv_layout must be one of {KV_LAYOUTS}, got {kv_layout!r}")


def random_inputs(shape: str, kv_layout: str = "bshd", latent: bool = False):
    """bf16 q, k_cache, v_cache (full caches, see random_cache) and an output buffer for a "B,T,Hq,Hkv,S,D" shape.
    latent: DeepSeek's shared latent, v_cache a view of k_cache (its first 512 columns at D = 576, all of it at
    D = 512)."""
    B, T, Hq, Hkv, S, D = (int(x) for x in shape.split(","))
    q = torch.randn(B, T, Hq, D, device="cuda", dtype=torch.bfloat16)
    k = random_cache(B, S, Hkv, D, kv_layout)
    if latent:
        if D not in (512, 576):
            raise ValueError(f"latent: D must be 512 or 576, got {D}")
        v = k[..., :512]
        return q, k, v, torch.empty(B, T, Hq, 512, device="cuda", dtype=torch.bfloat16)
    return q, k, random_cache(B, S, Hkv, D, kv_layout), torch.empty_like(q)


def main():
    from tools._cuda import PROBE_MODES, check_plan_tokens

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shape", required=True, help="B,T,Hq,Hkv,S,D")
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--backend", default="cuda", help="an fmha backend, or sdpa-cudnn (default %(default)s)")
    ap.add_argument("--probe", choices=sorted(PROBE_MODES), default=None,
                    help="run the cuda backend on this probe build (stream_only, no_combine: wrong results by design)")
    ap.add_argument("--kv-layout", choices=KV_LAYOUTS, default="bshd", help="cache storage order (see random_cache)")
    ap.add_argument("--latent", action="store_true",
                    help="DeepSeek's shared latent: v_cache is k_cache (D = 512) or its first 512 columns (D = 576)")
    ap.add_argument("--iters", type=int, default=3, help="calls after the warm-up call (default %(default)s)")
    ap.add_argument("--clocks", action="store_true", help="also loop --seconds long and print SM clock and power")
    ap.add_argument("--seconds", type=float, default=2.0, help="with --clocks (default %(default)s)")
    ap.add_argument("--plan", default="", help="plan tokens for the cuda backend, e.g. '@latent_seesaw64 @splits=2' "
                                               "(tools/_cuda.py force_plan)")
    a = ap.parse_args()
    for flag, value in (("--probe", a.probe), ("--plan", a.plan)):
        if value and a.backend != "cuda":
            ap.error(f"{flag} runs the cuda backend, got --backend {a.backend}")
    if a.probe and a.plan:
        ap.error("--plan applies to the product library, not to a --probe build")
    try:
        check_plan_tokens(a.plan.split(), "--plan")
    except ValueError as e:
        ap.error(str(e))
    if a.latent and a.backend == "sdpa-cudnn":
        ap.error("--latent: sdpa-cudnn has no kernel for these head dims")
    q, k, v, out = random_inputs(a.shape, a.kv_layout, a.latent)
    if a.backend == "sdpa-cudnn":  # the peer, for a side-by-side profile (no causal mask support here)
        import torch.nn.functional as F
        from torch.nn.attention import SDPBackend, sdpa_kernel

        qt, kt, vt = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)

        def call():
            with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
                out.copy_(F.scaled_dot_product_attention(qt, kt, vt, enable_gqa=True).transpose(1, 2))
    elif a.probe:
        from fmha.problem import validate
        from tools._cuda import bound_backend, probe_library

        b, p = bound_backend(probe_library(a.probe)), validate(q, k, v, causal=a.causal)
        lse = torch.empty(q.shape[0], q.shape[2], q.shape[1], device="cuda")
        call = lambda: b.run(p, q, k, v, None, out, lse)  # noqa: E731
    else:
        if a.plan:
            from fmha.backends import registry
            from fmha.cuda import loader
            from fmha.cuda.backend import _target_arch
            from tools._cuda import force_plan

            b = registry()["cuda"]
            if b._fn is None:
                b._bind()
            force_plan(b, loader.load(_target_arch()), a.plan.split())
            print(fmha.explain(q, k, v, causal=a.causal, backend="cuda"), flush=True)  # what the plan launches
        call = lambda: fmha.attention(q, k, v, causal=a.causal, backend=a.backend, out=out)  # noqa: E731
    call()
    torch.cuda.synchronize()
    for _ in range(a.iters):
        call()
    torch.cuda.synchronize()
    if not a.clocks:
        return
    import subprocess

    def sample():  # nvidia-smi, not pynvml: it is on every driver install
        r = subprocess.run(["nvidia-smi", "-i", str(torch.cuda.current_device()), "--query-gpu=clocks.sm,power.draw,"
                            "clocks_throttle_reasons.active", "--format=csv,noheader,nounits"],
                           capture_output=True, text=True)
        f = [x.strip() for x in r.stdout.strip().split(",")]
        return (int(float(f[0])), float(f[1]), f[2]) if len(f) == 3 else (0, 0.0, r.stderr.strip()[:40])

    import threading

    samples, done = [], threading.Event()

    def sampler():  # in a thread, so the launch loop never pauses
        while not done.is_set():
            samples.append(sample())
            time.sleep(0.05)

    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    th = threading.Thread(target=sampler, daemon=True)
    n = 0
    th.start()
    t0 = time.perf_counter()
    start.record()
    while time.perf_counter() - t0 < a.seconds:
        for _ in range(20):
            call()
        n += 20
    end.record()
    torch.cuda.synchronize()
    done.set()
    th.join()
    us = start.elapsed_time(end) * 1e3 / n
    kv_bytes = k.numel() * 2 * (1 if a.latent else 2)  # a shared latent is read once
    gb = (q.numel() * 2 + kv_bytes + out.numel() * 2) / us / 1e3
    tail = samples[len(samples) // 2:]
    print(f"{a.backend} shape={a.shape} causal={a.causal}: {us:.1f} us/call (eager, back to back) {gb:.0f} GB/s; "
          f"SM clock median {sorted(s[0] for s in tail)[len(tail) // 2]} MHz, power median "
          f"{sorted(s[1] for s in tail)[len(tail) // 2]:.0f} W, throttle reasons {sorted({s[2] for s in tail})}")


if __name__ == "__main__":
    main()
