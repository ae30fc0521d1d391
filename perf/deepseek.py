"""DeepSeek decode over a shared latent cache: `python -m perf --preset deepseek`.

For each shape of the `deepseek` preset (perf/shapes.py, issue 27), MQA with one KV head whose
latent vector per token is both K and V: (D_qk, D_v) = (576, 512) for V3 / R1 (K = all 576
columns, V = the first 512) or (512, 512) for V4 (K = V). Timed in one run:

- fmha-cuda, fmha-triton: `fmha.attention(q, kv, kv[..., :D_v], cache_seqlens, backend=...)`
  (`kv` itself as V when D_v = D_qk) on a contiguous latent cache [B, S, 1, D_qk];
- fmha-cuda-paged64: the same call on a pool of 64-token pages behind a shuffled block table;
- fmha-cuda-separate: today's call for such a model, D = 512 with K and V separate tensors
  (q and K of 512 columns, a V of its own: 2 x 512 columns read per token);
- flashinfer-mla: `flashinfer.mla.BatchMLAPagedAttentionWrapper` on the same page pool, its
  ckv and kpe caches the pool's columns [:D_v] and [D_v:] (kpe 0 columns wide for V4), q split
  the same way, plan() once per input set outside the timed region;
- flashmla: FlashMLA's SM90 dense decode (`flash_mla.flash_mla_with_kvcache`; FlashMLA built from source
  and importable, docs/deepseek.md says how) on the same page pool [num_pages, 64, 1, D_qk] and block table,
  get_mla_metadata() once per input set and one untimed call per set (which fills FlashMLA's tile-scheduler
  metadata) in prepare(); its kernel is compiled for D_qk 576 / D_v 512 only, so the V4 shapes say so.

Every call gets softmax_scale = 1/sqrt(D_qk) and cache_seqlens = S. A contender that cannot serve
a shape (a backend refusing the shared latent, FlashInfer or FlashMLA missing or refusing) shows its reason;
the rest runs. Timing, rotation (cold L2), the correctness gate and the ceilings are the suite's
own (perf/timing.py, perf/bench.py), run through the paged preset's helpers (perf/paged.py).
Results: deepseek.json and deepseek.md next to the suite's results, the table printed at the end.
"""
from __future__ import annotations

import math
import statistics
import sys
import time

import torch

from perf import paged
from perf.paged import (FLASHINFER_WORKSPACE_BYTES, FlashInferPaged, _cell, _figure, _note, _ok_us, _run,
                        flashinfer_plan_args, flashinfer_version, import_flashinfer, log, page_pools)
from perf.peers import FmhaBackendContender, PeerLibraryContender, Unsupported
from perf.timing import ceiling_text

CONTENDERS = ("fmha-cuda", "fmha-cuda-paged64", "fmha-triton", "fmha-cuda-separate", "flashinfer-mla", "flashmla")
PAGE_SIZE = 64
SEPARATE_D = 512  # the separate call's head dim: q, K and V of 512 columns
ELEMENT_BYTES = 2  # bf16 and fp16
# Targets of issue 27, for fmha-cuda on the contiguous latent.
TARGET_READ_FRACTION = 0.95  # memory-bound table shapes: latent bytes per second / the read ceiling
TARGET_TFLOPS = 600.0  # shapes of 128 query heads
TARGET_SEPARATE_SPEEDUP = 1.8  # memory-bound V4 shapes: fmha-cuda-separate time / fmha-cuda time
# A latent byte feeds Hq * T * (D_qk + D_v) / D_qk FLOPs: 121-128 at 64 query rows, 242-256 at 128, either
# side of an H200's ~206 (989 dense bf16 TFLOP/s over 4.8 TB/s).
MEMORY_BOUND_ROWS = 64


# ---- the problem ---------------------------------------------------------------------------------

def latent_bytes(shape) -> int:
    """The latent cache read once: B * S * Hkv * D_qk elements."""
    return shape.B * shape.S * shape.Hkv * shape.D * ELEMENT_BYTES


def flops(shape, d_qk=None, d_v=None) -> int:
    """2 * B * Hq * (D_qk + D_v) per key each query row sees: all S, or S - T + 1 + t for row t when causal."""
    T, S = shape.T, shape.S
    keys = T * S - (T * (T - 1) // 2 if shape.masked else 0)
    return 2 * shape.B * shape.Hq * keys * ((d_qk or shape.D) + (d_v or shape.Dv))


def memory_bound(shape) -> bool:
    """Is the shape bound by reading the latent (MEMORY_BOUND_ROWS)?"""
    return shape.Hq * shape.T <= MEMORY_BOUND_ROWS


class LatentInputs:
    """One shape's rotating input sets: sets[i] = (q [B, T, Hq, D_qk], kv [B, S, 1, D_qk]);
    after build_separate(), separate_sets[i] = (q, k, v) at 512 columns holding the same values
    in separate tensors; after build_pages(), paged_sets[i] = (q, kv_pool [num_blocks, 64, 1, D_qk],
    block_table). cache_seqlens (int32 [B], all S) and softmax_scale serve every call."""

    def __init__(self, shape, n_sets, device, seed, dtype):
        self.shape, self.device, self.n_sets, self.dtype, self.seed = shape, device, n_sets, dtype, seed
        s = shape
        gen = torch.Generator(device=device).manual_seed(seed)

        def rnd(*dims):
            return torch.randn(*dims, generator=gen, device=device, dtype=dtype)

        self.sets = [(rnd(s.B, s.T, s.Hq, s.D), rnd(s.B, s.S, s.Hkv, s.D)) for _ in range(n_sets)]
        self.cache_seqlens = torch.full((s.B,), s.S, dtype=torch.int32, device=device)
        self.softmax_scale = 1.0 / math.sqrt(s.D)
        self.separate_sets = self.paged_sets = self.page_size = None

    @classmethod
    def of_tensors(cls, shape, sets, cache_seqlens, block_table, page_size):
        """Input sets of given tensors: sets[i] = (q, the contiguous latent kv, its page pool), the pools behind one
        block_table, and the lengths; for tools that time the peers on a batch of their own
        (tools/latent_lengths.py)."""
        self = cls.__new__(cls)
        q = sets[0][0]
        self.shape, self.device, self.n_sets, self.dtype, self.seed = shape, q.device, len(sets), q.dtype, 0
        self.sets = [(q, kv) for q, kv, _ in sets]
        self.cache_seqlens = cache_seqlens
        self.softmax_scale = 1.0 / math.sqrt(shape.D)
        self.separate_sets = None
        self.paged_sets, self.page_size = [(q, pool, block_table) for q, _, pool in sets], page_size
        return self

    def build_separate(self):
        d = SEPARATE_D
        self.separate_sets = []
        for q, kv in self.sets:
            k = kv[..., :d].contiguous()  # kv itself when it is 512 wide
            self.separate_sets.append((q[..., :d].contiguous(), k, k.clone()))

    def build_pages(self, page_size: int):
        gen = torch.Generator().manual_seed(self.seed * 1000 + page_size)
        self.paged_sets = []
        for q, kv in self.sets:
            (pool,), block_table = page_pools((kv,), page_size, gen)
            self.paged_sets.append((q, pool, block_table))
        self.page_size = page_size

    def references(self):
        """(rows, {"latent": out, "separate": out}): fmha's fp32 reference on the first and last sequence of
        set 0, for the shared-latent problem and for the separate call's 512-column one."""
        from fmha.reference import attention_reference
        s = self.shape
        rows = [0] if s.B == 1 else [0, s.B - 1]
        q, kv = (t[rows] for t in self.sets[0])
        d = SEPARATE_D
        latent, _ = attention_reference(q, kv, kv[..., :s.Dv], None, self.softmax_scale, s.causal)
        separate, _ = attention_reference(q[..., :d], kv[..., :d], kv[..., :d], None, self.softmax_scale, s.causal)
        return rows, {"latent": latent, "separate": separate}

    def release(self):
        self.sets = self.separate_sets = self.paged_sets = self.cache_seqlens = None


# ---- contenders ----------------------------------------------------------------------------------

class FmhaCall(FmhaBackendContender):
    """An fmha backend on the shared latent ("latent"), on its 64-token page pool ("paged"), or today's
    D = 512 call with separate K and V ("separate")."""
    is_fmha = True

    def __init__(self, name: str, backend: str, layout: str):
        self.name, self.backend, self.layout = name, backend, layout
        self.reference = "separate" if layout == "separate" else "latent"
        self.note = {
            "latent": f"fmha.attention(q, kv, kv[..., :D_v], cache_seqlens, backend={backend!r})",
            "paged": (f"fmha.attention(q, kv_pool, kv_pool[..., :D_v], cache_seqlens, block_table=bt, "
                      f"backend={backend!r}), {PAGE_SIZE}-token pages"),
            "separate": (f"fmha.attention(q[..., :512], k, v, cache_seqlens, backend={backend!r}), "
                         "k and v separate [B, S, 1, 512] tensors"),
        }[layout]

    def prepare(self, inputs):
        import fmha
        from fmha.dispatch import why_not
        from fmha.problem import validate
        s, seqlens, scale, backend = inputs.shape, inputs.cache_seqlens, inputs.softmax_scale, self.backend

        def v_of(kv):  # V as a view of the latent: the tensor itself where it is as wide as V
            return kv if kv.shape[-1] == s.Dv else kv[..., :s.Dv]

        if self.layout == "paged":
            calls = [(q, pool, v_of(pool), {"block_table": bt}) for q, pool, bt in inputs.paged_sets]
        elif self.layout == "separate":
            calls = [(q, k, v, {}) for q, k, v in inputs.separate_sets]
        else:
            calls = [(q, kv, v_of(kv), {}) for q, kv in inputs.sets]
        q, k, v, kw = calls[0]
        why = why_not(backend, validate(q, k, v, seqlens, scale, True, **kw))
        if why is not None:
            raise Unsupported(why)

        def fn(i):
            q, k, v, kw = calls[i]
            return fmha.attention(q, k, v, seqlens, softmax_scale=scale, causal=True, backend=backend, **kw)

        return fn


class FlashInferMLA(FlashInferPaged):
    """FlashInfer's MLA decode on the same page pools: one BatchMLAPagedAttentionWrapper per input set,
    planned in prepare() (outside any timing; the first plan of a head-dim pair JIT-compiles its module),
    sharing one zeroed float workspace."""
    name = "flashinfer-mla"
    layout, reference = "paged", "latent"

    def __init__(self, loader=import_flashinfer, require_cuda: bool = True, backend: str = "auto"):
        super().__init__(loader, require_cuda)
        self.backend = backend
        self.note = self.generic_note = (f"flashinfer.mla.BatchMLAPagedAttentionWrapper(backend={backend!r}), "
                                         f"{PAGE_SIZE}-token pages, plan() per input set outside timing")

    @staticmethod
    def module_key(shape, dtype):
        return (shape.D, shape.Dv, str(dtype))

    def prepare(self, inputs):
        self.note = self.generic_note
        fi = self.loader()
        s, dev, dtype, P = inputs.shape, inputs.device, inputs.dtype, inputs.page_size
        if dev.type != "cuda" and self.require_cuda:
            raise Unsupported("FlashInfer runs on CUDA GPUs only (dry run on the CPU)")
        mla = getattr(fi, "mla", None)
        Wrapper, Metadata = (getattr(mla, n, None) for n in ("BatchMLAPagedAttentionWrapper", "MLAPlanMetadata"))
        if Wrapper is None or Metadata is None:
            raise Unsupported(f"flashinfer {getattr(fi, '__version__', '?')} has no flashinfer.mla."
                              "BatchMLAPagedAttentionWrapper with MLAPlanMetadata (the 0.7 plan API)")
        ckv, kpe = s.Dv, s.D - s.Dv  # K = [ckv | kpe] columns, V = the ckv columns
        B, T, Hq, D = s.B, s.T, s.Hq, s.D

        def plan():
            workspace = torch.zeros(FLASHINFER_WORKSPACE_BYTES, dtype=torch.uint8, device=dev)
            qo_indptr = torch.arange(B + 1, dtype=torch.int32, device=dev) * T
            wrappers, calls = [], []
            for q, pool, bt in inputs.paged_sets:
                indptr, indices, _ = flashinfer_plan_args(bt, inputs.cache_seqlens, P)
                w = Wrapper(workspace, backend=self.backend)
                w.plan(metadata=Metadata.csr(qo_indptr, indptr, indices, inputs.cache_seqlens),
                       num_heads=Hq, head_dim_ckv=ckv, head_dim_kpe=kpe, page_size=P, causal=s.masked,
                       sm_scale=inputs.softmax_scale, q_data_type=dtype, kv_data_type=dtype)
                wrappers.append(w)
                # MLA's layouts: q [tokens, heads, D], caches [pages, P, D] (no KV-head dimension)
                q3, kv3 = q.view(B * T, Hq, D), pool.view(pool.shape[0], P, D)
                calls.append(((q3[..., :ckv], q3[..., ckv:]), (kv3[..., :ckv], kv3[..., ckv:]),
                              q.new_empty(B * T, Hq, ckv)))
            return workspace, wrappers, calls

        what = f"MLA ckv {ckv} + kpe {kpe}"
        workspace, wrappers, calls = self.plan_once(self.module_key(s, dtype), what, what, dev, plan)
        planned = getattr(wrappers[0], "_planned_backend_name", None) or "?"
        self.note = (f"flashinfer.mla.BatchMLAPagedAttentionWrapper(backend={self.backend!r}) planned {planned!r}, "
                     f"head_dim_ckv {ckv}, head_dim_kpe {kpe}, {PAGE_SIZE}-token pages, ckv / kpe and q_nope / q_pe "
                     f"views of one tensor each, causal={s.masked}, plan() per input set outside timing")

        def fn(i):
            query, kv_cache, out = calls[i]
            return wrappers[i].run(query=query, kv_cache=kv_cache, out=out).view(B, T, Hq, ckv)

        fn.wrappers, fn.workspace = wrappers, workspace  # kept alive with fn
        return fn


_FLASH_MLA = {}  # "module" or "reason", once the import was tried
# What FlashMLA's SM90 dense decode serves (flash_mla 9241ae3: csrc/sm90/decode/dense/config.h and the checks of
# csrc/api/dense_decode.h). Its kernel is compiled for 576 / 512 and stops the whole process (exit(1), no
# exception) on another head dim, so the adapter refuses such shapes before calling it.
FLASH_MLA_D_QK, FLASH_MLA_D_V, FLASH_MLA_PAGE = 576, 512, 64


def import_flash_mla():
    """The flash_mla module (FlashMLA's Python package) with its compiled extension, imported once; raises
    Unsupported with the reason when it cannot be (FlashMLA not built or not on the PYTHONPATH)."""
    return paged.import_peer(_FLASH_MLA, "flash_mla", extension="cuda",
                             hint=" (build FlashMLA and put its package on the PYTHONPATH)")


def flash_mla_version():
    m = _FLASH_MLA.get("module")
    return getattr(m, "__version__", "?") if m is not None else None


class FlashMLA(PeerLibraryContender):
    """FlashMLA's SM90 dense decode (flash_mla.flash_mla_with_kvcache) on the same page pools as flashinfer-mla:
    q [B, T, Hq, 576] and the pool [num_pages, 64, 1, 576] as they are, the block table and cache_seqlens of the
    suite. get_mla_metadata() once per input set in prepare(), and one call per set there too (outside timing):
    FlashMLA's current API returns an empty FlashMLASchedMeta that its first call fills (the scheduling kernel);
    the older one returned (tile_scheduler_metadata, num_splits) tensors. Both are called the same way here."""
    name = "flashmla"
    layout, reference = "paged", "latent"

    def __init__(self, loader=import_flash_mla, require_cuda: bool = True):
        self.loader, self.require_cuda = loader, require_cuda
        self.note = ("flash_mla.flash_mla_with_kvcache(q, kv_pool, block_table, cache_seqlens, head_dim_v=D_v, "
                     "sched_meta, softmax_scale=1/sqrt(D_qk), causal=T > 1) (SM90 dense decode) on the "
                     f"{PAGE_SIZE}-token page pool [num_pages, {PAGE_SIZE}, 1, D_qk] of flashinfer-mla, "
                     "get_mla_metadata() and a first call per input set outside timing")

    def prepare(self, inputs):
        fm = self.loader()
        s, dev, dtype, P = inputs.shape, inputs.device, inputs.dtype, inputs.page_size
        if dev.type != "cuda" and self.require_cuda:
            raise Unsupported("FlashMLA runs on CUDA GPUs only (dry run on the CPU)")
        get_meta, attend = (getattr(fm, n, None) for n in ("get_mla_metadata", "flash_mla_with_kvcache"))
        if get_meta is None or attend is None:
            raise Unsupported(f"flash_mla {getattr(fm, '__version__', '?')} has no get_mla_metadata / "
                              "flash_mla_with_kvcache")
        if (s.D, s.Dv) != (FLASH_MLA_D_QK, FLASH_MLA_D_V):
            raise Unsupported(f"FlashMLA's dense decode takes D_qk {FLASH_MLA_D_QK} with D_v {FLASH_MLA_D_V} only "
                              f"(its SM90 kernel is compiled for them); this shape is {s.D}/{s.Dv}")
        if dtype not in (torch.bfloat16, torch.float16):
            raise Unsupported(f"FlashMLA's dense decode takes bf16 or fp16, not {dtype}")
        if P != FLASH_MLA_PAGE:
            raise Unsupported(f"FlashMLA's dense decode takes {FLASH_MLA_PAGE}-token pages, not {P}")
        if s.Hq % s.Hkv:
            raise Unsupported(f"FlashMLA needs Hq a multiple of Hkv ({s.Hq} / {s.Hkv})")
        if dev.type == "cuda":
            cc = torch.cuda.get_device_capability(dev)
            if cc != (9, 0):  # its C++ says so too, but only after the metadata calls
                raise Unsupported(f"FlashMLA's dense decode runs on SM90 (Hopper) only; this GPU is sm_{cc[0]}{cc[1]}")
        seqlens, scale, causal = inputs.cache_seqlens, inputs.softmax_scale, s.masked
        T, Hq, Hkv = s.T, s.Hq, s.Hkv
        calls = []
        for q, pool, bt in inputs.paged_sets:
            # old API: (cache_seqlens, q rows per KV head, KV heads) -> tensors; current: arguments ignored
            meta, splits = get_meta(seqlens, T * Hq // Hkv, Hkv)
            calls.append((q, pool, bt, meta, splits))

        def fn(i):
            q, pool, bt, meta, splits = calls[i]
            out, _lse = attend(q, pool, bt, seqlens, s.Dv, meta, splits, softmax_scale=scale, causal=causal)
            return out

        for i in range(len(calls)):  # fills each set's scheduling metadata outside timing (current API)
            self.first_call(fn, i)
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)
        fn.calls = calls  # kept alive with fn
        return fn


def make_contenders(args) -> list:
    """The contenders of --preset deepseek, from --contenders / --no-flashinfer."""
    names = paged.chosen_contenders(args, CONTENDERS, "deepseek", "flashinfer-mla")
    made = {"fmha-cuda": lambda: FmhaCall("fmha-cuda", "cuda", "latent"),
            "fmha-cuda-paged64": lambda: FmhaCall("fmha-cuda-paged64", "cuda", "paged"),
            "fmha-triton": lambda: FmhaCall("fmha-triton", "triton", "latent"),
            "fmha-cuda-separate": lambda: FmhaCall("fmha-cuda-separate", "cuda", "separate"),
            "flashinfer-mla": FlashInferMLA,
            "flashmla": FlashMLA}
    return [made[n]() for n in names]


# ---- the sweep -----------------------------------------------------------------------------------

def cases(args) -> list:
    """The deepseek preset's shapes after --shapes and --dry-run (tiny stand-ins, each once, as the suite's)."""
    from perf.shapes import select
    shapes = select("deepseek", args.shapes)
    return list({s.tiny().name: s.tiny() for s in shapes}.values()) if args.dry_run else shapes


def _line(name, r) -> str:
    if r.get("us"):
        return f"{name} {r['us']:.1f}us{'' if r['status'] == 'ok' else ' ' + r['status']}"
    return f"{name} {r['status']} ({(r.get('reason') or '')[:90]})"


def sweep(shapes, contenders, args, device, ceilings, t_start) -> list:
    from perf.bench import DTYPES, more_rounds
    from perf.timing import free_inputs, gbps, l2_cache_bytes, round_order, rotation_count
    l2 = l2_cache_bytes(device)
    deadline = t_start + args.budget_s
    dtype_name = DTYPES[args.dtype]
    dtype = getattr(torch, dtype_name)
    need_pages = any(c.layout == "paged" for c in contenders)
    need_separate = any(c.layout == "separate" for c in contenders)
    records = []
    for si, shape in enumerate(shapes):
        nbytes = latent_bytes(shape)
        # every contender reads at least the latent, so N sets of it exceed the rotation's L2 multiple
        n_sets = 2 if args.dry_run else rotation_count(nbytes, l2, args.rotate_factor)
        rec = {"name": shape.name, "family": shape.family, "B": shape.B, "T": shape.T, "Hq": shape.Hq,
               "Hkv": shape.Hkv, "S": shape.S, "D_qk": shape.D, "D_v": shape.Dv, "causal": shape.causal,
               "dtype": dtype_name, "latent_bytes": nbytes, "flops": flops(shape),
               "memory_bound": memory_bound(shape), "n_sets": n_sets, "rotation_bytes": n_sets * nbytes,
               "page_size": PAGE_SIZE, "results": {}}
        log(f"[{si + 1}/{len(shapes)}] {shape.name}: {n_sets} input sets, latent {nbytes / 2 ** 20:.0f} MiB "
            f"({time.monotonic() - t_start:.0f} s)")
        inputs = None
        try:
            inputs = LatentInputs(shape, n_sets, device, args.seed + si, dtype)
            if need_separate:
                inputs.build_separate()
            if need_pages:
                inputs.build_pages(PAGE_SIZE)
            rows, refs = inputs.references()
            rec["checked_rows"] = rows
            kept = {}
            for c in round_order(contenders, si):  # (no contender always the first after the reference)
                rec["results"][c.name] = _run(c, inputs, rows, refs[c.reference], args, device, deadline,
                                              keep=kept)
            rec["results"] = {c.name: rec["results"][c.name] for c in contenders}  # (the tables' order)
            more_rounds(rec["results"], contenders, kept, inputs.n_sets, args, device, deadline, start=si)
            del kept
        except torch.cuda.OutOfMemoryError as e:
            rec["error"] = f"out of memory building inputs ({e})"[:300]
            log(f"  {rec['error']}")
        finally:
            free_inputs(inputs, device)
            del inputs
        for c in contenders:
            r = rec["results"].get(c.name)
            if r and r.get("us"):
                d = SEPARATE_D if c.reference == "separate" else None
                r["gbps_latent"] = gbps(nbytes, r["us"])
                r["pct_read_ceiling"] = 100.0 * r["gbps_latent"] / ceilings["read_gbps"]
                r["tflops"] = flops(shape, d, d) / r["us"] / 1e6
        log("  " + "; ".join(_line(n, r) for n, r in rec["results"].items()))
        records.append(rec)
    return records


# ---- summary -------------------------------------------------------------------------------------

def _verdict(label, met, figure) -> dict:
    return {"target": label, "met": met, "figure": figure}


def _times(ratio, bound=1.0) -> str:
    return _figure(ratio, bound, 2) + "x"


def targets(rec, read_gbps) -> list:
    """Issue 27's targets that apply to a shape, judged on fmha-cuda: [{target, met, figure}], met None
    when a time it needs is missing."""
    res = rec["results"]
    cuda = res.get("fmha-cuda") or {}
    us = _ok_us(cuda)
    why = f"fmha-cuda {cuda.get('status', 'not run')}"
    out = []
    if rec["family"] == "mla":
        fi = _ok_us(res.get("flashinfer-mla"))
        out.append(_verdict("faster than flashinfer-mla", us < fi if us and fi else None,
                            _times(fi / us) if us and fi else (why if not us else "no flashinfer-mla time")))
        if rec["memory_bound"]:
            limit_us = rec["latent_bytes"] / (TARGET_READ_FRACTION * read_gbps * 1e3)
            pct = _figure(cuda["pct_read_ceiling"], 100 * TARGET_READ_FRACTION, 1) if us else None
            out.append(_verdict(f">= {TARGET_READ_FRACTION:.0%} of the read ceiling (<= {limit_us:.1f} µs)",
                                us <= limit_us if us else None, f"{pct}%, {us:.1f} µs" if us else why))
    if rec["Hq"] == 128:
        out.append(_verdict(f">= {TARGET_TFLOPS:.0f} TFLOP/s", cuda["tflops"] >= TARGET_TFLOPS if us else None,
                            f"{_figure(cuda['tflops'], TARGET_TFLOPS, 0)} TFLOP/s" if us else why))
    if rec["family"] == "v4" and rec["memory_bound"]:
        sep = _ok_us(res.get("fmha-cuda-separate"))
        out.append(_verdict(f">= {TARGET_SEPARATE_SPEEDUP}x fmha-cuda-separate",
                            sep / us >= TARGET_SEPARATE_SPEEDUP if us and sep else None,
                            _times(sep / us, TARGET_SEPARATE_SPEEDUP) if us and sep
                            else (why if not us else "no fmha-cuda-separate time")))
    return out


def summary_rows(records, read_gbps) -> list:
    """One row per shape: fmha-cuda's time, its speed-ups over FlashInfer (and, on the same page pool as
    FlashInfer's, fmha-cuda-paged64's) and the separate call, the targets."""
    rows = []
    for rec in records:
        res = rec["results"]
        us, fi, sep, paged = (_ok_us(res.get(n)) for n in ("fmha-cuda", "flashinfer-mla", "fmha-cuda-separate",
                                                           "fmha-cuda-paged64"))
        rows.append({"shape": rec["name"], "fmha_cuda_us": us, "flashinfer_mla_us": fi, "separate_us": sep,
                     "speedup_vs_flashinfer": fi / us if us and fi else None,
                     "paged_speedup_vs_flashinfer": fi / paged if paged and fi else None,
                     "speedup_vs_separate": sep / us if us and sep else None,
                     "targets": targets(rec, read_gbps)})
    return rows


def _label(rec) -> str:
    return (f"{rec['family']} B{rec['B']} T{rec['T']} {rec['Hq']}h S{rec['S']} {rec['D_qk']}/{rec['D_v']}"
            f"{' causal' if rec['causal'] and rec['T'] > 1 else ''}")


def _targets_cell(row) -> str:
    parts = []
    for t in row["targets"]:
        verdict = "n/a" if t["met"] is None else "met" if t["met"] else "**MISSED**"
        parts.append(f"{t['target']}: {verdict} ({t['figure']})")
    return "; ".join(parts) or "—"


def tables(results) -> tuple:
    """The Markdown tables (time and targets; throughput), as lists of lines, and their notes."""
    notes: list = []
    names = list(results["contenders"])
    rows = {r["shape"]: r for r in results["rows"]}
    times = ["| shape | " + " | ".join(f"{n} µs" for n in names)
             + " | flashinfer-mla ÷ fmha-cuda | the same, both paged (÷ fmha-cuda-paged64) | separate ÷ fmha-cuda "
             "| targets (fmha-cuda) |",
             "|---|" + "--:|" * len(names) + "--:|--:|--:|---|"]
    rates = ["| shape | latent MB | GFLOP | " + " | ".join(f"{n} GB/s (% read) · TFLOP/s" for n in names) + " |",
             "|---|--:|--:|" + "--:|" * len(names)]
    clocks = ["| shape | " + " | ".join(f"{n} MHz" for n in names) + " |", "|---|" + "--:|" * len(names)]
    rounds = ["| shape | " + " | ".join(names) + " |", "|---|" + "--:|" * len(names)]
    any_clock = any_rounds = False
    for rec in results["shapes"]:
        res, row = rec["results"], rows[rec["name"]]
        if rec.get("error"):
            times.append(f"| {_label(rec)} | error: {rec['error'][:60]} [{_note(rec['error'], notes)}] |")
            continue
        ratios = [_times(row[k], bound) if row[k] else "—"
                  for k, bound in (("speedup_vs_flashinfer", 1.0), ("paged_speedup_vs_flashinfer", 1.0),
                                   ("speedup_vs_separate", TARGET_SEPARATE_SPEEDUP))]
        times.append(f"| {_label(rec)} | " + " | ".join(_cell(res.get(n), notes) for n in names)
                     + f" | {ratios[0]} | {ratios[1]} | {ratios[2]} | {_targets_cell(row)} |")
        cells = []
        for n in names:
            r = res.get(n) or {}
            cells.append(f"{r['gbps_latent']:.0f} ({r['pct_read_ceiling']:.0f}%) · {r['tflops']:.0f}"
                         if r.get("us") and r.get("status") == "ok" else "—")
        rates.append(f"| {_label(rec)} | {rec['latent_bytes'] / 1e6:.0f} | {rec['flops'] / 1e9:.1f} | "
                     + " | ".join(cells) + " |")
        cells = [clock_cell(res.get(n)) for n in names]
        any_clock |= any(c != "—" for c in cells)
        clocks.append(f"| {_label(rec)} | " + " | ".join(cells) + " |")
        cells = [rounds_cell(res.get(n)) for n in names]
        any_rounds |= any(c != "—" for c in cells)
        rounds.append(f"| {_label(rec)} | " + " | ".join(cells) + " |")
    return times, rates, (clocks if any_clock else []), (rounds if any_rounds else []), notes


def clock_cell(r) -> str:
    """The SM clock a result was timed at, with the share of samples the power cap held it down in."""
    if not r or r.get("sm_mhz") is None:
        return "—"
    capped = r.get("power_capped") or 0.0
    return f"{r['sm_mhz']:.0f}" + (f" (cap {capped:.0%})" if capped else "")


def rounds_cell(r) -> str:
    """Each round's time and SM clock in the order they ran, where a result was timed in more than one round."""
    us = (r or {}).get("round_us") or ()
    if len(us) < 2:
        return "—"
    mhz = r.get("round_mhz") or [None] * len(us)
    return " · ".join(f"{u:.1f}" + (f" @ {m:.0f}" if m is not None else "") for u, m in zip(us, mhz))


def _rounds_text(meta) -> str:
    n = meta.get("rounds") or 1
    order = ("each round starting one contender later" if meta.get("round_order") == "rotated"
             else "every other round in reversed order")  # (runs before the order was recorded reversed it)
    return ("one round" if n == 1 else
            f"the median of {n} such rounds, which time a shape's contenders in turn, {order}")


def markdown(results) -> str:
    meta, ceil = results["meta"], results["ceilings"]
    L = paged.header_lines(meta, "fmha DeepSeek decode (shared latent) beside FlashInfer's MLA decode")
    L += [f"{meta.get('dtype', 'bfloat16')}, MQA (one KV head), cache_seqlens = S, softmax_scale = 1/sqrt(D_qk) for "
          f"every contender. Time: µs per call, median over {meta['replays']} CUDA-graph replays, each calling the "
          "contender once on each of N rotating input sets (together > 3x L2: cold L2), after "
          f"{meta['settle_ms']:.0f} ms of untimed replays; {_rounds_text(meta)}. Paged: {PAGE_SIZE}-token pages "
          "behind a block table that is a random permutation of the pages, the same pool for fmha-cuda-paged64 "
          "and flashinfer-mla. "
          "fmha-cuda-separate is today's D = 512 call (q, K and V of 512 columns, K and V separate tensors). "
          "GB/s: latent bytes (B x S x D_qk x 2, read once) per second, decimal, for every contender; % of the "
          f"measured read ceiling ({ceiling_text(ceil)}). TFLOP/s: 2 x B x Hq x "
          "(D_qk + D_v) x the keys each query row sees (causal rows see fewer), of the contender's own head dims. "
          f"Targets (issue 27), on fmha-cuda: faster than flashinfer-mla on the mla shapes; >= "
          f"{TARGET_READ_FRACTION:.0%} of the read ceiling on the memory-bound mla shapes (Hq x T <= "
          f"{MEMORY_BOUND_ROWS}); >= {TARGET_TFLOPS:.0f} TFLOP/s at 128 heads; >= {TARGET_SEPARATE_SPEEDUP}x "
          "fmha-cuda-separate on the memory-bound V4 shapes. Every output passed the suite's correctness gate "
          f"(cosine over the whole output and over each row >= {meta['min_cosine']} against the fp32 reference) "
          "unless marked WRONG.", ""]
    times, rates, clocks, rounds, notes = tables(results)
    L += ["## Time per call", ""] + times + ["", "## Throughput", ""] + rates
    if clocks:
        L += ["", "## SM clock while timed", "",
              "Median SM clock (NVML) over the timed replays, and the share of those samples in which the power "
              "cap held the clock down (perf/clocks.py).", ""] + clocks
    if rounds:
        L += ["", "## Rounds", "",
              "Each round's µs @ median SM MHz, in the order run. Under the power cap the clock moves between "
              "rounds; a shape the tensor cores bound slows with it, so compare two contenders at a similar "
              "clock as well as by their medians.", ""] + rounds
    if notes:
        L += ["", "Notes:", ""] + [f"{i + 1}. {n}" for i, n in enumerate(notes)]
    L += ["", "Calls:", ""] + [f"- {n}: {what}" for n, what in results["contenders"].items()]
    fi = sorted({r["note"] for rec in results["shapes"] for n, r in rec["results"].items()
                 if n == "flashinfer-mla" and r.get("status") == "ok" and r.get("note")})
    L += [f"- flashinfer-mla as run: {n}" for n in fi]
    if meta.get("flash_mla") or meta.get("flash_mla_unavailable"):
        L += [f"- flashmla: flash_mla {meta['flash_mla']}" if meta.get("flash_mla")
              else f"- flashmla: {meta['flash_mla_unavailable']}"]
    return "\n".join(L) + "\n"


# ---- entry point ---------------------------------------------------------------------------------

def write(results, out_dir) -> list:
    return paged.write_preset(results, out_dir, "deepseek", markdown(results))


def main(args, argv) -> int:
    from perf.bench import FmhaContender, environment, mirror_results, prewarm, results_dir, run_device
    from perf.timing import measure_ceilings, read_again
    t_start = time.monotonic()
    shapes = cases(args)
    device = run_device(args)
    contenders = make_contenders(args)
    env = environment(args, argv, device)
    out_dir = results_dir(args, env, "deepseek")
    log(f"fmha perf --preset deepseek: {env['gpu']}, torch {env['torch']}, triton {env['triton']}; "
        f"{len(shapes)} shapes x {len(contenders)} contenders ({', '.join(c.name for c in contenders)}); "
        f"budget {args.budget_s:.0f} s; output {out_dir}")
    for name, why in env["fmha_backends_unavailable"].items():
        log(f"  fmha backend {name!r} unavailable: {why}")
    prewarm([FmhaContender(b) for b in dict.fromkeys(c.backend for c in contenders if c.is_fmha)], device)
    if any(isinstance(c, FlashInferMLA) for c in contenders) and not args.dry_run:
        try:
            import_flashinfer()
        except Unsupported:
            pass  # said so; the flashinfer-mla column carries the reason
    if any(isinstance(c, FlashMLA) for c in contenders) and not args.dry_run:
        try:
            import_flash_mla()
        except Unsupported:
            pass  # said so; the flashmla column carries the reason
    torch.manual_seed(args.seed)
    t0 = time.monotonic()
    # the dry run leaves the Triton read kernel out: under the interpreter it takes longer than the rest
    ceilings = measure_ceilings(device, gib=(1 / 1024 if args.dry_run else args.ceiling_gib),
                                triton_kernel=not args.dry_run)
    log(f"HBM ceilings (GB/s, decimal): copy {ceilings['copy_gbps']:.0f}, read {ceilings['read_gbps']:.0f} "
        f"({ceilings['read_source']}); {time.monotonic() - t0:.1f} s")
    records = sweep(shapes, contenders, args, device, ceilings, t_start)
    read_again(device, ceilings)
    env["flashinfer"] = flashinfer_version()
    env["flashinfer_unavailable"] = paged._FLASHINFER.get("reason")
    env["flash_mla"] = flash_mla_version()
    env["flash_mla_unavailable"] = _FLASH_MLA.get("reason")
    results = {"meta": {**env, "elapsed_s": round(time.monotonic() - t_start, 1)},
               "ceilings": ceilings,
               "targets": {"faster_than_flashinfer_mla": "mla shapes: fmha-cuda time < flashinfer-mla time",
                           "read_ceiling_fraction": TARGET_READ_FRACTION, "tflops_at_128_heads": TARGET_TFLOPS,
                           "v4_speedup_vs_separate": TARGET_SEPARATE_SPEEDUP,
                           "memory_bound": f"Hq * T <= {MEMORY_BOUND_ROWS}"},
               "contenders": {c.name: c.note for c in contenders},
               "shapes": records}
    results["rows"] = summary_rows(records, ceilings["read_gbps"])
    written = write(results, out_dir)
    mirror_results(args, env, out_dir, written)
    log("")
    times, _, clocks, rounds, notes = tables(results)
    log("\n".join(times + [line for table in (clocks, rounds) if table for line in [""] + table]))
    for i, n in enumerate(notes):
        log(f"  [{i + 1}] {n}")
    judged = [t for r in results["rows"] for t in r["targets"] if t["met"] is not None]
    log(f"targets met: {sum(t['met'] for t in judged)} of {len(judged)} judged "
        f"({sum(len(r['targets']) for r in results['rows'])} in all; fmha-cuda)")
    log(f"done in {time.monotonic() - t_start:.0f} s; wrote:")
    for path in written:
        log(f"  {path}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    from perf.bench import main as bench_main
    sys.exit(bench_main(["--preset", "deepseek"] + sys.argv[1:]))
