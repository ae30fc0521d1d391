"""Cycles per wgmma of the shapes and shared-memory layouts the sm_90a loops issue (tools/wgmma_rate.cu), with
one and two warpgroups per SM issuing at once: what a Q K^T or P V chain of each shape can reach, and the
shared-memory bytes per cycle that rate reads.

    python tools/wgmma_rate.py                 # builds tools/wgmma_rate.cu with nvcc, runs on GPU 0
    python tools/wgmma_rate.py --lib PATH.so   # a library built elsewhere (nvcc ... --shared)

Each warpgroup issues groups of 36 wgmmas into one accumulator (one Q K^T over 576 columns), two groups in
flight; the time is clock64 cycles around the loop, the median over the SMs. Operands are zeros.
"""
from __future__ import annotations

import argparse
import ctypes
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))  # run from a checkout
# shape id -> (name, N, shared-memory bytes one wgmma reads: A 64 x 16 plus B N x 16, bf16)
SHAPES = {
    0: ("narrow Q K^T  ss m64n16k16, A K-major", 16, 2048 + 512),
    1: ("narrow P V    ss m64n16k16, A MN-major", 16, 2048 + 512),
    2: ("             ss m64n32k16, A K-major", 32, 2048 + 1024),
    3: ("seesaw Q K^T  ss m64n64k16", 64, 2048 + 2048),
    4: ("seesaw P V    ss m64n256k16, B MN-major", 256, 2048 + 8192),
}


def build_command(nvcc: str, out: str) -> list:
    return [nvcc, "-O3", "-std=c++17", "-gencode=arch=compute_90a,code=sm_90a", "-Xcompiler", "-fPIC", "--shared",
            "-o", out, os.path.join(HERE, "wgmma_rate.cu")]


def build(out: str) -> str:
    from fmha.cuda import loader

    nvcc = loader.find_nvcc()
    if nvcc is None:
        raise SystemExit("nvcc not found (set CUDA_HOME or FMHA_NVCC)")
    subprocess.run(build_command(nvcc, out), check=True)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lib", default=None, help="a prebuilt tools/wgmma_rate.cu library")
    ap.add_argument("--iters", type=int, default=2000, help="groups of 36 wgmmas per warpgroup")
    a = ap.parse_args()
    import torch

    lib_path = a.lib or build(os.path.join(tempfile.mkdtemp(prefix="wgmma_rate_"), "wgmma_rate.so"))
    lib = ctypes.CDLL(lib_path)
    lib.wgmma_rate.argtypes = [ctypes.c_int] * 4 + [ctypes.c_void_p] * 2
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    cycles = torch.zeros(2 * sms, dtype=torch.int64, device="cuda")
    sink = torch.zeros(256, device="cuda")
    print(f"{torch.cuda.get_device_name(0)}, {sms} SMs, {a.iters} x 36 wgmmas per warpgroup, one CTA per SM")
    print(f"{'shape':44} {'WGs':>3} {'cycles/wgmma/WG':>16} {'SM: wgmma/kcycle':>17} {'smem B/cycle':>13} "
          f"{'MAC/cycle':>10}")
    for shape, (name, n, nbytes) in SHAPES.items():
        for wgs in (1, 2):
            lib.wgmma_rate(shape, sms, 2, wgs, cycles.data_ptr(), sink.data_ptr())  # warm-up
            rc = lib.wgmma_rate(shape, sms, a.iters, wgs, cycles.data_ptr(), sink.data_ptr())
            if rc:
                print(f"{name:44} {wgs:>3} launch failed ({rc})")
                continue
            c = cycles.view(sms, 2)[:, :wgs].float().median().item()
            per_wg = c / (a.iters * 36)
            per_sm = wgs / per_wg  # wgmmas per cycle on the SM
            print(f"{name:44} {wgs:>3} {per_wg:16.1f} {1000 * per_sm:17.1f} {per_sm * nbytes:13.1f} "
                  f"{per_sm * 64 * n * 16:10.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
