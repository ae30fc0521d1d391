"""First-light check of the CUDA backend on a GPU: `python -m fmha.cuda.selftest [-k SUBSTR]`.

Builds the library, runs a handful of small cases through the backend directly
(no dispatcher), compares with fmha.reference and prints, per case, the max
output / LSE errors and hints that localise a bug (NaNs, which rows/columns
are wrong, the ratio to the reference). The paged cases ("paged" in the name)
scatter the cache into shuffled pages of a NaN-filled pool (TMA boxes for pages
of a multiple of 32 tokens, the gather otherwise) and compare with the reference
on the contiguous cache. In the latent cases ("latent" in the name) v_cache is k_cache itself, or its first 512
columns at D = 576 (DeepSeek's latent, read once by the LATENT configurations), and a contiguous cache holds NaN
past each length (the V tail the kernel clears in the K stage). Exit status 0 when every case passes.
"""
from __future__ import annotations

import argparse
import sys
import time
import traceback
import zlib

import torch

from ..compare import LSE_ATOL, tolerance
from ..problem import validate
from ..reference import attention_reference
from .backend import CudaBackend


def _inputs(B, T, Hq, Hkv, S, D, dtype, seqlens, fused, seed):
    g = torch.Generator().manual_seed(seed)

    def rnd(*shape):
        return torch.randn(*shape, generator=g).to(dtype=dtype, device="cuda")

    if fused:
        q = rnd(B, T, Hq + 2 * Hkv, D)[:, :, :Hq]
    else:
        q = rnd(B, T, Hq, D)
    k, v = rnd(B, S, Hkv, D), rnd(B, S, Hkv, D)
    sl = torch.tensor(seqlens, dtype=torch.int32, device="cuda") if seqlens is not None else None
    return q, k, v, sl


def _page(k, v, seqlens, page_size, seed):
    """(k_pool, v_pool, block_table): each sequence's tokens below its length scattered into shuffled pages of
    NaN-filled pools [num_blocks, page_size, Hkv, D (D_v)], two pages no sequence references."""
    B, S, Hkv, D = k.shape
    max_blocks = -(-S // page_size)
    num_blocks = B * max_blocks + 2
    ids = torch.randperm(num_blocks, generator=torch.Generator().manual_seed(seed))[:B * max_blocks]
    ids = ids.view(B, max_blocks).cuda()
    k_pool = torch.full((num_blocks, page_size, Hkv, D), float("nan"), dtype=k.dtype, device="cuda")
    v_pool = torch.full((num_blocks, page_size, Hkv, v.shape[-1]), float("nan"), dtype=v.dtype, device="cuda")
    for b in range(B):
        j = torch.arange(S if seqlens is None else min(seqlens[b], S), device="cuda")
        k_pool[ids[b][j // page_size], j % page_size] = k[b, j]
        v_pool[ids[b][j // page_size], j % page_size] = v[b, j]
    return k_pool, v_pool, ids.to(torch.int32)


CASES = [
    # name, B, T, Hq, Hkv, S, D, dtype, seqlens, causal, fused
    ("mha-d64-t1-s128", 1, 1, 8, 8, 128, 64, torch.bfloat16, None, True, False),
    ("mha-d128-t1-s128", 1, 1, 8, 8, 128, 128, torch.bfloat16, None, True, False),
    ("mha-d256-t1-s128", 1, 1, 8, 8, 128, 256, torch.bfloat16, None, True, False),
    ("mqa-d512-t1-s128", 1, 1, 16, 1, 128, 512, torch.bfloat16, None, True, False),
    ("mha-d128-t1-s64-one-tile", 2, 1, 4, 4, 64, 128, torch.bfloat16, None, False, False),
    ("mha-d128-t4-s300-tail", 2, 4, 8, 8, 300, 128, torch.bfloat16, None, True, False),
    ("gqa-d128-32/8-t3-s129", 2, 3, 32, 8, 129, 128, torch.bfloat16, None, True, False),
    ("gqa-d64-28/4-t3-s7", 2, 3, 28, 4, 7, 64, torch.bfloat16, None, True, False),
    ("gqa-d256-32/8-t32-s384-2rowblocks", 1, 32, 32, 8, 384, 256, torch.bfloat16, None, True, False),
    ("mqa-d512-t3-s1000", 2, 3, 16, 1, 1000, 512, torch.bfloat16, None, True, False),
    # 128 query heads: two 64-row blocks, the seesaw configuration (16 and 48 rows above: split_qk)
    ("mqa-d512-128heads-s300-varlen", 2, 1, 128, 1, 300, 512, torch.bfloat16, [300, 33], True, False),
    ("varlen-d128-empty-row", 4, 3, 8, 2, 300, 128, torch.bfloat16, [0, 1, 150, 300], True, False),
    ("varlen-d512-empty-row", 3, 2, 16, 1, 300, 512, torch.bfloat16, [0, 77, 300], False, False),
    ("fp16-d128-t4-s384", 2, 4, 8, 8, 384, 128, torch.float16, None, True, False),
    ("fp16-d512-t1-s384", 1, 1, 16, 1, 384, 512, torch.float16, None, True, False),
    ("fused-q-d128", 2, 2, 8, 2, 200, 128, torch.bfloat16, None, True, True),
    # 128 KV-head pairs: the plan reads D = 64 heads in pairs on the D = 128 stream kernel (>= 0.8 x SMs pairs)
    ("kv-head-pairs-d64-32/8-b32-varlen", 32, 1, 32, 8, 300, 64, torch.bfloat16, [300, 0, 129, 64] * 8, True, False),
    ("split-d64-s65536", 1, 1, 8, 8, 65536, 64, torch.bfloat16, None, True, False),
    ("split-d128-s65536", 1, 1, 8, 8, 65536, 128, torch.bfloat16, None, True, False),
    ("split-d256-s16384-varlen", 2, 2, 8, 8, 16384, 256, torch.bfloat16, [16384, 3], True, False),
    ("split-d512-s65536", 1, 1, 16, 1, 65536, 512, torch.bfloat16, None, True, False),
    # paged caches (a twelfth field: tokens a page): TMA boxes for multiples of 32, the gather for the rest
    ("paged-d128-p16-varlen", 3, 1, 32, 8, 1000, 128, torch.bfloat16, [1000, 0, 333], True, False, 16),
    ("paged-d128-p32-t3", 2, 3, 32, 8, 300, 128, torch.bfloat16, [300, 70], True, False, 32),
    ("paged-d64-p13-gather-t3", 2, 3, 28, 4, 300, 64, torch.bfloat16, [300, 129], True, False, 13),
    ("paged-d128-p24-t4", 2, 4, 8, 8, 300, 128, torch.bfloat16, None, True, False, 24),
    ("paged-d256-p64-t3", 2, 3, 16, 8, 500, 256, torch.bfloat16, [500, 77], True, False, 64),
    ("paged-d512-p1-gather", 2, 1, 16, 1, 200, 512, torch.bfloat16, [200, 33], True, False, 1),
    ("paged-d512-128heads-p256", 2, 1, 128, 1, 1000, 512, torch.bfloat16, [1000, 1], True, False, 256),
    ("paged-fp16-d128-p64", 2, 2, 8, 2, 384, 128, torch.float16, [384, 100], True, False, 64),
    ("paged-split-d128-p64-s65536", 1, 1, 8, 8, 65536, 128, torch.bfloat16, [65536], True, False, 64),
    ("paged-split-d64-p13-s16384", 2, 1, 8, 8, 16384, 64, torch.bfloat16, [16384, 5000], True, False, 13),
    # the gather with more CTAs than SMs (D = 128 runs it DEEP, D = 64 WIDE_GATHER: two CTAs per SM, four
    # gathering warps each): the overlapped loop waits for K two tiles ahead
    ("paged-d128-p13-gather-wide", 160, 1, 32, 8, 1000, 128, torch.bfloat16, None, True, False, 13),
    ("paged-d64-p13-gather-wide", 160, 1, 32, 8, 1000, 64, torch.bfloat16, None, True, False, 13),
    # paged plans of their own on a 132-SM GPU: KV-head pairs over 64-token pages, STREAM for 256 CTAs of 16 rows
    ("paged-d64-p64-head-pairs", 32, 1, 32, 8, 300, 64, torch.bfloat16, [300, 0] * 16, True, False, 64),
    ("paged-d128-p96-t4-stream", 32, 4, 32, 8, 300, 128, torch.bfloat16, [300, 1] * 16, True, False, 96),
    # K = V: one ring, P V reading the K stage
    ("latent-d512-t1-s1000", 2, 1, 16, 1, 1000, 512, torch.bfloat16, [1000, 77], True, False),
    ("latent-d512-128heads-t2-s300", 2, 2, 128, 1, 300, 512, torch.bfloat16, [300, 1], True, False),
    ("latent-split-d512-s65536", 1, 1, 16, 1, 65536, 512, torch.bfloat16, None, True, False),
    ("paged-latent-d512-p64", 2, 1, 64, 1, 1000, 512, torch.bfloat16, [1000, 33], True, False, 64),
    ("latent-d576-t2-s1000", 2, 2, 16, 1, 1000, 576, torch.bfloat16, [1000, 0], True, False),
    ("paged-latent-d576-p64", 2, 1, 16, 1, 1000, 576, torch.float16, [1000, 5], True, False, 64),
    # ... 1, 3, 4 and 5 tiles of 32 keys and a partial one (the ring's first rounds), and the gather
    ("latent-d512-few-tiles", 6, 1, 16, 1, 160, 512, torch.bfloat16, [1, 32, 96, 128, 160, 45], True, False),
    ("paged-latent-d512-p13-gather", 2, 1, 16, 1, 1000, 512, torch.bfloat16, [1000, 77], True, False, 13),
]


def run_case(backend, case) -> bool:
    name, B, T, Hq, Hkv, S, D, dtype, seqlens, causal, fused = case[:11]
    page_size = case[11] if len(case) > 11 else None
    seed = zlib.crc32(name.encode()) % 1000
    q, k, v, sl = _inputs(B, T, Hq, Hkv, S, D, dtype, seqlens, fused, seed=seed)
    latent = "latent" in name
    v = k[..., :512] if latent else v  # (k itself below 576)
    k_in, v_in, block_table = k, v, None
    if latent and page_size is None and sl is not None:  # NaN past each length; the reference reads k
        k_in = k.clone()
        for b, n in enumerate(seqlens):
            k_in[b, n:] = float("nan")
        v_in = k_in[..., :v.shape[-1]]
    if page_size is not None:  # the reference below reads the contiguous cache
        if sl is None:
            sl = torch.full((B,), S, dtype=torch.int32, device="cuda")
        k_in, v_in, block_table = _page(k, v, seqlens, page_size, seed)
        v_in = k_in[..., :512] if latent else v_in
    out = torch.full((*q.shape[:3], v.shape[-1]), float("nan"), dtype=dtype, device="cuda")
    lse = torch.full((B, Hq, T), float("nan"), dtype=torch.float32, device="cuda")
    p = validate(q, k_in, v_in, sl, None, causal, out, block_table)
    config, splits = backend.launch_plan(p, torch.cuda.current_device()) if backend._tile_n else ("?", "?")
    why = backend.unsupported_reason(p)
    if why:
        print(f"  {name:36s} UNSUPPORTED: {why}")
        return False
    t0 = time.perf_counter()
    try:
        backend.run(p, q, k_in, v_in, sl, out, lse, block_table=block_table)
        torch.cuda.synchronize()
    except Exception as e:  # report and go on with the next case
        print(f"  {name:36s} ERROR: {type(e).__name__}: {e}")
        return False
    ms = (time.perf_counter() - t0) * 1e3
    ref, ref_lse = attention_reference(q, k, v, sl, p.softmax_scale, causal)
    o, r = out.float(), ref.float()
    nan_o = int(torch.isnan(o).sum())
    nan_l = int(torch.isnan(lse).sum())
    err = (o - r).abs().nan_to_num(float("inf"))
    max_err = err.max().item()
    fin = torch.isfinite(ref_lse)
    lse_err = (lse[fin] - ref_lse[fin]).abs().nan_to_num(float("inf")).max().item() if fin.any() else 0.0
    inf_ok = torch.equal(torch.isneginf(lse), torch.isneginf(ref_lse))
    atol = tolerance(dtype, v.abs().max().item())
    ok = nan_o == 0 and nan_l == 0 and max_err <= atol and lse_err <= LSE_ATOL and inf_ok
    config = getattr(config, "name", config).lower()
    print(f"  {name:36s} {'ok  ' if ok else 'FAIL'} out_err={max_err:.3e} lse_err={lse_err:.3e} "
          f"nan(out,lse)=({nan_o},{nan_l}) -inf-pattern={'ok' if inf_ok else 'DIFF'} config={config} "
          f"splits={splits} {ms:.1f} ms")
    if not ok:
        bad = err > atol
        if bad.any():
            idx = bad.nonzero()
            bs, ts, hs, ds = (idx[:, i].unique().tolist() for i in range(4))
            print(f"      bad elements {int(bad.sum())}/{bad.numel()}: b={bs[:8]} t={ts[:8]} hq={hs[:8]} "
                  f"d(first 16)={ds[:16]}{' ...' if len(ds) > 16 else ''}")
            denom = (r * r).sum().clamp_min(1e-30)
            ratio = ((o.nan_to_num(0) * r).sum() / denom).item()
            print(f"      <out, ref>/<ref, ref> = {ratio:.4f} (1.0 = right scale), |out| max {o.abs().max().item():.3f} "
                  f"vs |ref| max {r.abs().max().item():.3f}")
        lse_bad = ((lse - ref_lse).abs() > 1e-3) & fin
        if lse_bad.any():
            idx = lse_bad.nonzero()
            print(f"      bad lse entries {int(lse_bad.sum())}: first (b, hq, t) {idx[:4].tolist()}; "
                  f"got {lse[tuple(idx[0])].item():.4f} want {ref_lse[tuple(idx[0])].item():.4f}")
    return ok


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m fmha.cuda.selftest",
                                 description="First-light check of the CUDA backend on a GPU: small cases against "
                                             "the fp32 reference, with hints that localise a wrong result.")
    ap.add_argument("-k", default="", help="only cases whose name contains this")
    args = ap.parse_args(argv)
    b = CudaBackend()
    why = b.unavailable_reason()
    if why:
        print(f"fmha cuda backend unavailable: {why}")
        return 2
    t0 = time.perf_counter()
    b._bind()
    tiles = ", ".join(f"D={d} {c.name.lower()} {n}" for (d, c), n in b._tile_n.items() if n)
    print(f"library for sm_{b._arch}a ready in {time.perf_counter() - t0:.1f} s; device {torch.cuda.get_device_name()}; "
          f"tokens a tile: {tiles}")
    n_ok = n = 0
    for case in CASES:
        if args.k and args.k not in case[0]:
            continue
        n += 1
        try:
            n_ok += run_case(b, case)
        except Exception:
            traceback.print_exc()
    print(f"{n_ok}/{n} cases passed")
    return 0 if n_ok == n else 1


if __name__ == "__main__":
    sys.exit(main())
