"""Run every available fmha backend on built-in decode problems and print an A/B table.

On a GPU: small latency-bound caches, long-context serving, T=4 speculative
decode, MQA D=512 and DeepSeek's shared latent (576/512, V = K's first 512
columns). On a CPU: the reference and the Triton interpreter on small problems.
Exits 1 if any backend fails or disagrees with the reference.
"""
from __future__ import annotations

import argparse
import os
import sys


def problems(on_gpu: bool):
    """(label, B, T, Hq, Hkv, S, D, varlen) decode problems; D = 576: DeepSeek's latent, V = K[..., :512]."""
    if on_gpu:
        return [
            ("small cache", 4, 1, 32, 8, 512, 128, False),
            ("small cache", 4, 1, 32, 8, 128, 128, False),
            ("long context", 128, 1, 32, 8, 8192, 128, False),
            ("long context", 1, 1, 32, 8, 65536, 128, False),
            ("long, varlen", 16, 1, 32, 8, 16384, 128, True),
            ("speculative T=4", 32, 4, 32, 8, 4096, 128, False),
            ("MQA D=512", 32, 1, 16, 1, 4096, 512, False),
            ("DeepSeek latent", 128, 1, 16, 1, 4096, 576, False),
            ("DeepSeek latent", 16, 1, 128, 1, 4096, 576, False),
        ]
    return [
        ("small cache", 2, 1, 8, 2, 128, 64, False),
        ("varlen", 3, 1, 28, 4, 129, 128, True),
        ("speculative T=4", 2, 4, 8, 2, 200, 128, False),
        ("DeepSeek latent", 1, 1, 16, 1, 64, 576, False),
    ]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m fmha", description=__doc__.split("\n\n")[0])
    ap.add_argument("--dtype", choices=["bf16", "fp16"], default="bf16", help="data type of q and the caches")
    ap.add_argument("--no-timing", action="store_true", help="check correctness only")
    args = ap.parse_args(argv)

    import torch
    on_gpu = torch.cuda.is_available()
    set_interpreter = not on_gpu and "TRITON_INTERPRET" not in os.environ
    if set_interpreter:
        os.environ["TRITON_INTERPRET"] = "1"  # before fmha imports triton
    import fmha
    from fmha.backends import registry
    from fmha.compare import GBPS_NOTE, CompareReport, compare, format_table

    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[args.dtype]
    device = "cuda" if on_gpu else "cpu"
    print(f"fmha {fmha.__version__} on {torch.cuda.get_device_name() if on_gpu else 'CPU (no CUDA GPU)'}; "
          f"torch {torch.__version__}")
    if set_interpreter:
        print("  no CUDA GPU: this command set TRITON_INTERPRET=1, so the triton backend runs under the Triton "
              "interpreter on the CPU (your own scripts list triton in fmha.available_backends() only with a GPU "
              "or with TRITON_INTERPRET=1 set before their first fmha call, which imports Triton)")
    for name, b in registry().items():
        why = b.unavailable_reason()
        print(f"  {name:10s} {'available' if why is None else 'unavailable: ' + why}")
    rows, remarks, all_ok = [], [], True
    for label, B, T, Hq, Hkv, S, D, varlen in problems(on_gpu):
        g = torch.Generator().manual_seed(B * S + D)
        q = torch.randn(B, T, Hq, D, generator=g).to(device, dtype)
        k = torch.randn(B, S, Hkv, D, generator=g).to(device, dtype)
        v = k[..., :512] if D == 576 else torch.randn(B, S, Hkv, D, generator=g).to(device, dtype)
        sl = None
        if varlen:
            sl = torch.randint(0, S + 1, (B,), generator=g, dtype=torch.int32).to(device)
        backends = [n for n in fmha.available_backends() if not (on_gpu and n == "reference" and B * S > 2 ** 16)]
        report = compare(q, k, v, sl, backends=backends, timing=not args.no_timing)
        all_ok &= report.ok
        rows += [[label] + r for r in report.rows()]
        if report.auto_remark():
            remarks.append(f"  {label} ({report.problem}): {report.auto_remark()}")
        print(f"  done: {label} {report.problem}", file=sys.stderr, flush=True)
    print()
    print(format_table(["", *CompareReport.HEADER], rows))
    print("\nerrors are against the fp32 reference; time is the median of CUDA-graph replays on a GPU, "
          f"wall clock on a CPU; {GBPS_NOTE}")
    if remarks:
        print("\nhow close auto's picks were:")
        print("\n".join(remarks))
    if not all_ok:
        print("SOME BACKENDS FAILED OR DISAGREED (see status)")
    return 0 if all_ok else 1


if __name__ == "__main__":
    sys.exit(main())
