"""Build the CUDA kernels ahead of time (no GPU needed).

    python -m fmha.cuda.build --arch sm_90a [--out DIR] [--force] [--probe MODE]

Prints the path of the shared library. With --out DIR the library goes there
(point FMHA_CACHE_DIR at DIR to have `fmha` load it). --probe builds a timing-probe
library for tools/ instead (modes: timestamps, stream_only, no_combine); the
product library never contains the probe.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .loader import CudaBuildError, DEFAULT_ARCH, KERNEL_ARCHS, PROBE_MODES, build


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m fmha.cuda.build", description=__doc__.splitlines()[0])
    ap.add_argument("--arch", default=DEFAULT_ARCH,
                    help=f"target (default {DEFAULT_ARCH}; kernels exist for {', '.join(KERNEL_ARCHS)})")
    ap.add_argument("--out", type=Path, default=None, help="output directory (default: the fmha cache dir)")
    ap.add_argument("--force", action="store_true", help="rebuild even if a cached library exists")
    ap.add_argument("--probe", choices=sorted(PROBE_MODES), default=None,
                    help="build the timing-probe library in this mode instead of the product one")
    args = ap.parse_args(argv)
    try:
        path = build(args.arch, out_dir=args.out, force=args.force, probe=args.probe)
    except CudaBuildError as e:
        print(str(e), file=sys.stderr)
        return 1
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
