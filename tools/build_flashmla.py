"""Build FlashMLA's SM90 dense MLA decode, and nothing else, as the extension module `flash_mla.cuda`.

    python tools/build_flashmla.py --flashmla DIR --cutlass DIR [--jobs N] [--arch sm_90a] [--dry-run]

The perf suite's `flashmla` contender calls only `flash_mla.get_mla_metadata` (pure Python in FlashMLA 9241ae3)
and `flash_mla.flash_mla_with_kvcache` on bf16/fp16 KV caches, which reaches the extension's `dense_decode_fwd`.
So instead of FlashMLA's setup.py (about 25 kernels for sm_90a and sm_100f, a long build) this compiles four
sources for one architecture: the dense decode kernel for bf16 and for fp16, the split-KV combine kernel and the
scheduling-metadata kernel, plus a small registration source written into the build directory that binds
`dense_decode_fwd` alone (the sparse and prefill entry points of the interface then raise AttributeError).
The result, `DIR/flash_mla/cuda*.so`, is what `import flash_mla.cuda` loads with DIR on the PYTHONPATH.

Two adjustments for CUDA 13 with a torch built for it:
- CUTLASS includes <cuda/std/...>, which CUDA 13 keeps under include/cccl: that directory goes on the include
  path of the host compiler too (nvcc adds it by itself).
- FlashMLA includes ATen/cuda/CUDAContext.h, which pulls in cuBLAS, cuSPARSE and cuSOLVER headers that a bare
  toolkit lacks; a stand-in header, first on the include path, declares only what the dense decode uses (the
  current stream and device properties), resolved from libtorch_cuda when the module loads.
Needs nvcc (CUDA_HOME/bin or PATH), a CUDA build of torch with a matching CUDA major, and ninja for parallel
compiles (without it torch compiles the sources one after another).
"""
from __future__ import annotations

import argparse
import glob
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time

SOURCES = (  # relative to the FlashMLA checkout
    "csrc/sm90/decode/dense/instantiations/bf16.cu",
    "csrc/sm90/decode/dense/instantiations/fp16.cu",
    "csrc/smxx/decode/combine/combine.cu",
    "csrc/smxx/decode/get_decoding_sched_meta/get_decoding_sched_meta.cu",
)
FLASHMLA_INCLUDES = ("csrc", "csrc/kerutils/include", "csrc/sm90")  # as FlashMLA's setup.py
CUTLASS_INCLUDES = ("include", "tools/util/include")
# FlashMLA's setup.py flags at 9241ae3, less `--threads` (it only parallelizes over several architectures)
CXX_FLAGS = ["-O3", "-std=c++20", "-DNDEBUG", "-Wno-deprecated-declarations"]
NVCC_FLAGS = [
    "-O3", "-std=c++20", "-DNDEBUG", "-D_USE_MATH_DEFINES", "-Wno-deprecated-declarations",
    "-U__CUDA_NO_HALF_OPERATORS__", "-U__CUDA_NO_HALF_CONVERSIONS__", "-U__CUDA_NO_HALF2_OPERATORS__",
    "-U__CUDA_NO_BFLOAT16_CONVERSIONS__", "--expt-relaxed-constexpr", "--expt-extended-lambda", "--use_fast_math",
    "--ptxas-options=-v,--register-usage-level=10,--warn-on-spills,--warn-on-local-memory-usage,"
    "--warn-on-double-precision-use",
    "-lineinfo", "--source-in-ptx",
]

BINDING = """\
// Written by build_flashmla.py: the dense MLA decode entry point alone, under the name FlashMLA's Python uses.
#include <pybind11/pybind11.h>

#include "api/dense_decode.h"

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
    m.doc() = "FlashMLA, SM90 dense MLA decode only";
    m.def("dense_decode_fwd", &dense_attn_decode_interface);
}
"""

SHIM = """\
// Written by build_flashmla.py: stands in for torch's ATen/cuda/CUDAContext.h, whose cuBLAS/cuSPARSE/cuSOLVER
// includes a bare CUDA toolkit cannot serve. FlashMLA's dense decode uses at::cuda::getCurrentCUDAStream
// (c10/cuda/CUDAStream.h; at::cuda aliases c10::cuda) and at::cuda::getCurrentDeviceProperties (libtorch_cuda).
#pragma once
#include <cuda_runtime_api.h>
#include <c10/cuda/CUDAStream.h>

namespace at::cuda {
cudaDeviceProp* getCurrentDeviceProperties();
}
"""


def fail(msg: str) -> None:
    sys.exit(f"build_flashmla: {msg}")


def find_toolkit() -> tuple[str, str]:
    """(nvcc, toolkit root): nvcc from CUDA_HOME/bin or PATH; the root as nvcc itself reports it (a wrapper
    script on PATH, e.g. /usr/local/bin/nvcc, would otherwise make torch guess /usr/local)."""
    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    nvcc = os.path.join(home, "bin", "nvcc") if home and os.path.isfile(os.path.join(home, "bin", "nvcc")) else None
    nvcc = nvcc or shutil.which("nvcc")
    if not nvcc:
        fail("nvcc not found (neither $CUDA_HOME/bin/nvcc nor on PATH)")
    with tempfile.TemporaryDirectory() as tmp:  # -dryrun prints nvcc's own variables, _HERE_ = its bin dir
        probe = os.path.join(tmp, "probe.cu")
        open(probe, "w").close()
        out = subprocess.run([nvcc, "-dryrun", "-c", probe, "-o", os.path.join(tmp, "probe.o")],
                             capture_output=True, text=True, timeout=120).stderr
    here = re.search(r"^#\$ _HERE_=(.*)$", out, re.M)
    root = os.path.realpath(os.path.join(here.group(1).strip(), "..")) if here else None
    if not root or not os.path.isfile(os.path.join(root, "bin", "nvcc")):
        fail(f"cannot tell the CUDA toolkit directory of {nvcc} (set CUDA_HOME to it)")
    return nvcc, root


def find_cccl(root: str) -> str:
    """CUDA 13's include/cccl (libcu++, CUB, Thrust), under the toolkit root or its targets/<arch>/."""
    candidates = [os.path.join(root, "include", "cccl")]
    candidates += sorted(glob.glob(os.path.join(root, "targets", "*", "include", "cccl")))
    for d in candidates:
        if os.path.isdir(os.path.join(d, "cuda", "std")):
            return d
    fail(f"no include/cccl/cuda/std under {root} or {root}/targets/*/ (CUTLASS needs <cuda/std/...>)")


def need_dir(path: str, what: str) -> str:
    if not os.path.isdir(path):
        fail(f"missing {what}: directory {path}")
    return os.path.abspath(path)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--flashmla", required=True, help="FlashMLA checkout (the .so lands in its flash_mla/)")
    ap.add_argument("--cutlass", required=True, help="CUTLASS checkout (FlashMLA pins 147f567)")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="parallel compiles (ninja's MAX_JOBS)")
    ap.add_argument("--arch", default="sm_90a", choices=["sm_90a"],
                    help="the architecture (FlashMLA's dense decode built here is its SM90 kernel)")
    ap.add_argument("--build-dir", help="object files and generated sources (default DIR/build/dense_decode)")
    ap.add_argument("--dry-run", action="store_true", help="print sources, includes and flags; build nothing")
    ap.add_argument("--no-import-check", action="store_true", help="skip importing the built module")
    args = ap.parse_args(argv)

    fm = need_dir(args.flashmla, "FlashMLA checkout")
    cutlass = need_dir(args.cutlass, "CUTLASS checkout")
    need_dir(os.path.join(fm, "flash_mla"), "FlashMLA Python package")
    for src in SOURCES + ("csrc/api/dense_decode.h", "csrc/api/common.h"):
        if not os.path.isfile(os.path.join(fm, src)):
            fail(f"missing FlashMLA source file {os.path.join(fm, src)}")
    includes = [need_dir(os.path.join(fm, d), "FlashMLA include dir") for d in FLASHMLA_INCLUDES]
    includes += [need_dir(os.path.join(cutlass, d), "CUTLASS include dir") for d in CUTLASS_INCLUDES]
    if not os.path.isfile(os.path.join(cutlass, "include", "cutlass", "cutlass.h")):
        fail(f"missing {cutlass}/include/cutlass/cutlass.h (is --cutlass a CUTLASS checkout?)")
    py_include = sysconfig.get_paths()["include"]
    if not os.path.isfile(os.path.join(py_include, "Python.h")):
        fail(f"missing Python.h in {py_include} (the Python development headers)")
    nvcc, cuda_home = find_toolkit()
    cccl = find_cccl(cuda_home)
    os.environ["CUDA_HOME"] = cuda_home  # read by torch.utils.cpp_extension at import
    build = os.path.abspath(args.build_dir or os.path.join(fm, "build", "dense_decode"))
    shim = os.path.join(build, "shim")
    binding = os.path.join(build, "dense_decode_binding.cpp")
    sources = [binding] + [os.path.join(fm, s) for s in SOURCES]
    includes.insert(0, shim)  # first, so that it wins over torch's own CUDAContext.h
    cc = args.arch[len("sm_"):]  # 90a
    nvcc_flags = NVCC_FLAGS + ["-gencode", f"arch=compute_{cc},code=sm_{cc}", "-isystem", cccl]
    cxx_flags = CXX_FLAGS + ["-isystem", cccl]

    print(f"nvcc         {nvcc} (CUDA_HOME={cuda_home})")
    print(f"cccl         {cccl}")
    print(f"ninja        {shutil.which('ninja') or 'absent: the sources compile one after another'}")
    print(f"build dir    {build}")
    print("sources      " + "\n             ".join(sources))
    print("includes     " + "\n             ".join(includes) + "\n             (then torch's, python's, CUDA's)")
    print(f"cxx flags    {' '.join(cxx_flags)}")
    print(f"nvcc flags   {' '.join(nvcc_flags)}")
    if args.dry_run:
        return 0

    try:
        import torch
        from setuptools import setup
        import torch.utils.cpp_extension as cpp_ext
        from torch.utils.cpp_extension import BuildExtension, CUDAExtension
    except ImportError as e:
        fail(f"cannot import torch / setuptools: {e}")
    if torch.version.cuda is None:  # a CPU torch: compile anyway (a check without GPU), the link will fail
        print(f"build_flashmla: warning: torch {torch.__version__} has no CUDA; sources will compile but the link "
              "needs libtorch_cuda and will fail", file=sys.stderr)
        cpp_ext.CUDA_HOME = cuda_home  # torch leaves it unset without CUDA
    os.makedirs(os.path.join(shim, "ATen", "cuda"), exist_ok=True)
    with open(os.path.join(shim, "ATen", "cuda", "CUDAContext.h"), "w") as f:
        f.write(SHIM)
    with open(binding, "w") as f:
        f.write(BINDING)
    os.environ["MAX_JOBS"] = str(args.jobs)
    ext = CUDAExtension(name="flash_mla.cuda", sources=sources, include_dirs=includes,
                        extra_compile_args={"cxx": cxx_flags, "nvcc": nvcc_flags})
    lib = os.path.join(build, "lib")
    shutil.rmtree(lib, ignore_errors=True)  # so that the glob below finds this build's .so only
    t0 = time.monotonic()
    cwd = os.getcwd()
    os.chdir(build)  # setuptools writes relative to the current directory
    try:
        setup(name="flash_mla_dense_decode", ext_modules=[ext], cmdclass={"build_ext": BuildExtension},
              script_args=["-q", "build_ext", "--build-temp", os.path.join(build, "obj"), "--build-lib", lib])
    except (SystemExit, Exception) as e:  # distutils reports compiler failures as SystemExit
        fail(f"build failed after {time.monotonic() - t0:.0f} s: {e}")
    finally:
        os.chdir(cwd)
    built = glob.glob(os.path.join(lib, "flash_mla", "cuda*.so"))
    if len(built) != 1:
        fail(f"expected one flash_mla/cuda*.so under {lib}, found {built}")
    for old in glob.glob(os.path.join(fm, "flash_mla", "cuda*.so")):  # a stale one could shadow the new one
        print(f"replacing {old}")
        os.remove(old)
    dest = os.path.join(fm, "flash_mla", os.path.basename(built[0]))
    shutil.copy2(built[0], dest)
    print(f"built {dest} in {time.monotonic() - t0:.0f} s")

    if not args.no_import_check:  # in a child, with the checkout first on the path
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([fm] + [p for p in [os.environ.get("PYTHONPATH")] if p]))
        r = subprocess.run([sys.executable, "-c", "import flash_mla, flash_mla.cuda as c; print(c.dense_decode_fwd)"],
                           env=env, capture_output=True, text=True)
        if r.returncode:
            fail(f"built, but `import flash_mla.cuda` fails:\n{r.stderr.strip()[-2000:]}")
        print(f"import check ok: {r.stdout.strip()}")
    print(f"use: PYTHONPATH={fm} python -c 'import flash_mla, flash_mla.cuda'")
    return 0


if __name__ == "__main__":
    sys.exit(main())
