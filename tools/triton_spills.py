"""Registers and spills of the Triton decode kernel for sm_90, compiled ahead of time (no GPU needed).

    python tools/triton_spills.py                        # every head dim, packed-row count and option set
    python tools/triton_spills.py --head-dims 128 --rows 64

Each launch configuration of fmha/triton/decode.py (launch_config's BLOCK_M, BLOCK_N, warps and stages for a head
dim and a packed-row count) is compiled by the installed Triton for sm_90, with the 16-divisibility the JIT gives
aligned pointers and strides (without it the loads are not vectorised and every configuration looks starved), and
cuobjdump -res-usage from Triton's wheel reads its registers and stack (spills). Rows with a stack are printed
first. The compiler decides: Triton versions differ (the numbers belong to the version printed at the top).
"""
from __future__ import annotations

import argparse
import itertools
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")  # (Triton's default; set, it says nothing about it)

OPTIONS = {  # the kernel's option constexprs per named set
    "plain": dict(PAGED=0, PAGE_SIZE=1, HAS_SINKS=False, WINDOW=False, SOFTCAP=False),
    "paged64": dict(PAGED=2, PAGE_SIZE=64, HAS_SINKS=False, WINDOW=False, SOFTCAP=False),
    "window+softcap+sinks": dict(PAGED=0, PAGE_SIZE=1, HAS_SINKS=True, WINDOW=True, SOFTCAP=True),
}


def compile_config(head_dim: int, rows: int, splits: int, option: str):
    """(launch config, registers, stack bytes) of one configuration; head_dim 576 is the 512 + 64 latent."""
    import triton
    from triton.backends.compiler import GPUTarget
    from fmha.triton import decode

    dv, tail = (512, 64) if head_dim == 576 else (head_dim, 0)
    block_m, block_n, warps, stages = decode.launch_config(head_dim, rows, kv_shared=dv == 512)
    kernel = decode._decode_kernel
    names = kernel.arg_names
    constexprs = dict(HEADS_KV=8, GROUP=rows, NUM_SPLITS=splits, HEAD_DIM=dv, BLOCK_M=block_m, BLOCK_N=block_n,
                      CAUSAL=True, HAS_SEQLENS=True, INTERPRETED=False, OFFS_64=False, QK_TAIL=tail,
                      KV_SHARED=dv == 512, HAS_LEFTPAD=False, SPAN_FROM_LO=False, FLAT_GRID=False, M_BLOCKS=1,
                      **OPTIONS[option])
    pointers = {"Q": "*bf16", "K": "*bf16", "V": "*bf16", "Out": "*bf16", "Lse": "*fp32", "OPart": "*fp32",
                "LsePart": "*fp32", "Sinks": "*fp32", "Seqlens": "*i32", "BlockTable": "*i32", "LeftPad": "*i32"}
    signature = {n: "constexpr" if n in constexprs else pointers.get(n, "fp32" if n in ("qk_scale", "cap_log2")
                                                                     else "i32") for n in names}
    aligned = [n for n in names if n in pointers or n.startswith("stride_") or n in ("S", "tokens_per_split")]
    source = triton.compiler.ASTSource(fn=kernel, signature=signature,
                                       constexprs={(names.index(n),): v for n, v in constexprs.items()},
                                       attrs={(names.index(n),): [["tt.divisibility", 16]] for n in aligned})
    compiled = triton.compile(source, target=GPUTarget("cuda", 90, 32),
                              options={"num_warps": warps, "num_stages": stages})
    cuobjdump = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(compiled.asm["cubin"])
        f.flush()
        usage = subprocess.run([str(cuobjdump), "-res-usage", f.name], capture_output=True, text=True).stdout
    m = re.search(r"REG:(\d+).*?STACK:(\d+)", usage)
    return (block_m, block_n, warps, stages), int(m.group(1)), int(m.group(2))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--head-dims", default="64,128,256,512,576")
    ap.add_argument("--rows", default="1,4,16,32,64,128", help="packed query rows a KV head (T x G)")
    ap.add_argument("--splits", default="1,3")
    ap.add_argument("--options", default=",".join(OPTIONS), help=f"of {', '.join(OPTIONS)}")
    args = ap.parse_args(argv)
    import triton
    print(f"Triton {triton.__version__}, sm_90", flush=True)
    lines = []
    for d, rows, splits, option in itertools.product(*(
            [int(x) for x in getattr(args, a).split(",")] for a in ("head_dims", "rows", "splits")),
            args.options.split(",")):
        (bm, bn, w, st), regs, stack = compile_config(d, rows, splits, option)
        lines.append((stack, f"D={d:<3} rows={rows:<3} splits={splits} {option:<22} BLOCK_M={bm:<2} BLOCK_N={bn:<3} "
                             f"warps={w} stages={st}: {regs} registers, {stack} bytes of stack"))
    for _, line in sorted(lines, key=lambda x: -x[0] if x[0] else 0):
        print(line)
    print(f"{sum(1 for s, _ in lines if s)} of {len(lines)} configurations spill")
    return 0


if __name__ == "__main__":
    sys.exit(main())
