"""The "cuda" backend: the hand-written sm_90a TMA + WGMMA decode kernel."""
from __future__ import annotations

import ctypes
import functools
import struct
import threading
from typing import Optional

import torch

from ..backends import Backend
from ..problem import Problem
from ..splits import cdiv, choose_num_splits, num_sms
from . import loader

SUPPORTED_HEAD_DIMS = (64, 128, 256, 512)
BLOCK_M = 64  # packed query rows per CTA (one WGMMA M)
# Kernel instantiations (fmha_capi.h): WIDE packs several CTAs per SM (grids that fill the GPU),
# DEEP runs one CTA per SM with a deeper K/V ring (small grids, split-KV), STREAM (D = 128) is WIDE's
# ring with the narrow loop.
WIDE, DEEP, STREAM = 0, 1, 2
# Not an instantiation: a D = 64 problem whose KV heads lie side by side, run by the D = 128 stream
# instantiation as pairs of heads read as one 128-wide head (fmha_capi.h variant 3, DecodeParams::head_pairs).
PAIRS = 3
VARIANTS = (WIDE, DEEP, STREAM, PAIRS)
# Narrow grids (<= 16 packed rows) of at least this share of one wave, unsplit or in the splits the deep plan
# chose, stream faster with the shallow 64 KB ring of WIDE (D = 64) / STREAM (D = 128) than with DEEP's 192 KB
# one; split grids once each of their CTAs has an SM to itself (the C API launches them so: capi.cu
# exclusive_sms). H200 (us, deep -> shallow; runs ec, ed, ee): B16 Hkv8 D128 S8192 120.8 -> 119.7, S16384
# 242.9 -> 239.2, S32768 468.5 -> 462.8 (cuDNN 464.2), S65536 955.1 -> 940.2, T4 S32768 469.7 -> 464.1;
# D64 B16 S65536 480.5 -> 471.9; with an add after each call S32768 480.7 -> 474.0. D = 256 level (the wide
# instantiation's 128 KB ring 474.3 vs deep 474.8, run ec), so it stays deep. Split grids, one CTA per SM (run ek):
# B1 S65536 66.1 -> 65.3 (16 splits), S262144 239.4 -> 237.4, D64 B1 S65536 37.0 -> 36.8; without an SM each
# (two CTAs on some SMs, others idle) 74.2 and 275.4.
# Measured from 2048 keys a CTA up (SHALLOW_RING_MIN_KEYS: the cache's keys over the splits; B1 S32768 in 16 splits
# 37.4 -> 36.7, run el); shorter shares keep the deep plan until measured.
SHALLOW_RING_MIN_FILL = 0.8
SHALLOW_RING_MIN_KEYS = 2048
_SHALLOW_RING_VARIANT = {64: WIDE, 128: STREAM}
# Short split-KV problems: 64 CTAs whose splits merge inside clusters (no combine kernel) beat the
# ~128-CTA plan that needs the combine kernel, while a CTA's K/V share is small enough that 64 SMs
# stream it about as fast as 128 (H200, runs dh and di, perf/RESULTS.md; us, plan -> 64 clustered CTAs):
# D=128 B1 S4096 11.5 -> 8.9, S8192 (512 KiB a CTA) 15.5 -> 13.2, S16384 (1 MiB) 22.8 -> 21.0; B2 S8192
# 22.9 -> 21.0; B4 S4096 22.8 -> 21.0; D=256 B1 S8192 (1 MiB) 23.2 -> 21.2. Longer shares gain less or lose
# (D=128 B1 S65536, 4 MiB: 68.0 -> 66.1 in run dh, but 72.7 us in run dl's suite on another H200; the
# combine-kernel plan took 68.0 in run df on an H200 of that read ceiling; B1 S262144 239.8 -> 244.8; D=256 B1
# S32768 66.9 -> 72.0), and so does D=64 (B1 S32768, 1 MiB: 22.4 -> 27.8). Only grids of at least 8 clusters (spread over the GPCs: B1
# Hkv=4 S32768 in 4 clusters of 16 took 23.9 -> 28.2) and 64 CTAs exactly (B3 S32768 in 24 clusters of 4,
# 96 CTAs: 97.5 -> 107.6).
# D = 64 grids of at least HEAD_PAIRS_MIN_FILL x SMs KV-head pairs (PAIRS) run as pairs: a CTA streams 256
# contiguous bytes of each token's row, where the plan's grid of single heads runs twice as many CTAs on 128-byte
# pieces. H200 (us, pairs vs that plan, cuDNN; per replay, 5-6 rounds, runs fo, fp): Hq32 Hkv8 S8192 B32 (128
# pairs) 122.7 vs 124.1 (123.3), B31 119.0 vs 123.3 (119.9), B33 126.3 vs 126.4 (127.1), B64 237.7 vs 240.7
# (241.7); Hq64 B32 121.6 vs 122.0 (121.6); B32 S2048 35.8 vs 36.1 (36.4), S32768 469.3 vs 476.2 (468.6); B128
# S4096 240.3 vs 244.4 (242.3); B32 S8192 sustained 120.0 vs 121.3 (120.5), with an add after each call 123.7 vs
# 124.7 (124.6). Fewer pairs leave SMs idle: B16 S32768 (64 pairs) 323.1 vs 236.3. With two single-head CTAs an
# SM the slowest streamed 40-50% longer than the fastest (runs eu, fj); 128 pairs, one an SM, within 6% (run fn).
HEAD_PAIRS_MIN_FILL = 0.8
CLUSTER_PLAN_CTAS = 64
CLUSTER_PLAN_MIN_CLUSTERS = 8
CLUSTER_PLAN_MAX_KV_BYTES_PER_CTA = {128: 1 << 20, 256: 1 << 20}
_DTYPE_CODE = {torch.float16: 0, torch.bfloat16: 1}


@functools.lru_cache(maxsize=16)
def _capability(index: int):
    return torch.cuda.get_device_capability(index)


def _device_index(dev: torch.device) -> int:
    return dev.index if dev.index is not None else torch.cuda.current_device()


def _d512_loop(p: Problem, variant: int) -> int:
    """`variant`, except at D = 512, whose two instantiations share one configuration and differ in the consumer
    loop: WIDE (the warpgroup seesaw) for more than one 64-row block, DEEP (the split-Q K^T loop) for one.
    H200 (us, sustained, seesaw vs split, runs fd and ff): MQA B64 Hq=128 176.5 vs 199.9 and 173.5 vs 197.9,
    T=4 Hq=32 102.1 vs 108.8; one row block: Hq=64 149.9 vs 148.7, Hq=32 135.2 vs 134.3, T=4 Hq=16 82.1 vs 80.7."""
    if p.head_dim != 512:
        return variant
    return WIDE if p.seqlen_q * p.group_size > BLOCK_M else DEEP


def clustered_splits(p: Problem, ctas: int, num_splits: int, merge_mode) -> int:
    """`num_splits`, or CLUSTER_PLAN_CTAS // ctas splits where those merge inside clusters and the plan's
    splits would need the combine kernel (see CLUSTER_PLAN_CTAS). merge_mode(splits) is the C API's
    ClusterMergeMode of a deep launch of `ctas` x splits CTAs (0: combine kernel, 1: inside clusters)."""
    max_bytes = CLUSTER_PLAN_MAX_KV_BYTES_PER_CTA.get(p.head_dim)
    if max_bytes is None or ctas < CLUSTER_PLAN_MIN_CLUSTERS or CLUSTER_PLAN_CTAS % ctas:
        return num_splits
    fewer = CLUSTER_PLAN_CTAS // ctas
    kv_bytes_per_cta = 2 * p.batch * p.heads_kv * p.seqlen_k * p.head_dim * p.dtype.itemsize // CLUSTER_PLAN_CTAS
    if not 2 <= fewer < num_splits or kv_bytes_per_cta > max_bytes:
        return num_splits
    return fewer if merge_mode(num_splits) == 0 and merge_mode(fewer) == 1 else num_splits


def _grid_ctas(p: Problem) -> int:
    """CTAs of the unsplit grid: one per (block of 64 packed query rows, KV head, sequence)."""
    return p.batch * p.heads_kv * cdiv(p.seqlen_q * p.group_size, BLOCK_M)


class CudaSm90Backend(Backend):
    name = "cuda"
    summary = ("hand-written sm_90a decode kernel: TMA K/V ring, WGMMA QK^T and PV, GQA rows packed into M, "
               "split-KV merged inside thread-block clusters or by a combine kernel (Hopper only; built with nvcc "
               "on first use)")

    def __init__(self):
        self._fn = None
        self._tile_n = None
        self._ws_bytes = None
        self._last_error = None
        self._launches = {}  # id(Problem) -> run's per-problem constants (see _launch_constants)
        self._build_error = None

    # -- availability -----------------------------------------------------
    def unavailable_reason(self) -> Optional[str]:
        if not torch.cuda.is_available():
            return "no CUDA GPU (torch.cuda.is_available() is False)"
        caps = [_capability(i) for i in range(torch.cuda.device_count())]
        if (9, 0) not in caps:
            return (f"needs a Hopper GPU (compute capability 9.0, sm_90a); found "
                    f"{', '.join(f'{a}.{b}' for a, b in caps)}")
        if self._build_error is not None:
            return f"the CUDA library could not be built or loaded: {self._build_error}"
        return loader.buildable()

    def unsupported_reason(self, p: Problem) -> Optional[str]:
        if p.device.type != "cuda":
            return f"tensors on {p.device}: the sm_90a kernel needs CUDA tensors"
        cap = _capability(_device_index(p.device))
        if cap != (9, 0):
            return f"device {p.device} has compute capability {cap[0]}.{cap[1]}; the kernel is built for sm_90a (9.0)"
        if p.dtype not in _DTYPE_CODE:
            return f"dtype {p.dtype} not supported (bfloat16, float16)"
        if p.head_dim not in SUPPORTED_HEAD_DIMS:
            return f"head_dim {p.head_dim} not supported (64, 128, 256, 512)"
        if not p.aligned_16b:
            return ("q/k_cache/v_cache/out must start on 16-byte boundaries with every non-unit stride a nonzero multiple "
                    "of 16 bytes (TMA and 16-byte loads)")
        if p.batch > 65535 or p.heads_kv > 65535:
            return f"batch {p.batch} or heads_kv {p.heads_kv} above the grid limit 65535"
        if p.seqlen_k >= 2 ** 31 - 256:
            return f"seqlen_k {p.seqlen_k} too large for 32-bit TMA coordinates"
        return None

    # -- execution --------------------------------------------------------
    def _bind(self):
        try:
            lib = loader.load()
        except loader.CudaBuildError as e:
            # Remember it: `auto` stops choosing this backend (and stops rebuilding on every call).
            self._build_error = str(e).strip().splitlines()[0]
            from ..dispatch import forget_decisions
            forget_decisions()
            raise
        self._tile_n = {(d, v): lib.fmha_sm90_tile_n(d, v) for d in SUPPORTED_HEAD_DIMS for v in VARIANTS}
        self._ctas_per_sm = {(d, v): lib.fmha_sm90_ctas_per_sm(d, v) for d in SUPPORTED_HEAD_DIMS for v in VARIANTS}
        self._narrow_rows = {(d, v): lib.fmha_sm90_narrow_rows(d, v) for d in SUPPORTED_HEAD_DIMS for v in VARIANTS}
        self._cluster_merge = lib.fmha_sm90_cluster_merge
        self._multi_gpu = torch.cuda.device_count() > 1  # else no device guard is ever needed
        self._ws_bytes = lib.fmha_sm90_workspace_bytes
        self._last_error = lib.fmha_last_error
        self._fn = lib.fmha_sm90_decode_packed
        return self._fn

    def launch_plan(self, p: Problem, index: int):
        """(variant, num_splits) for a problem on device `index`.

        D = 64 problems of enough KV-head pairs to fill most SMs run as pairs (_head_pairs). Otherwise a grid
        of more CTAs than SMs runs WIDE and unsplit (several CTAs share an SM, one's
        prologue and epilogue hide behind another's streaming). Otherwise the keys are split when the
        grid would leave SMs idle (one deep CTA per SM fills them), and short split problems take fewer
        splits, on 64 CTAs, where those merge inside clusters (clustered_splits). That grid, unsplit or
        split, runs the shallow ring where it is narrow, fills nearly one wave (SHALLOW_RING_MIN_FILL) and
        gives each CTA at least SHALLOW_RING_MIN_KEYS keys, else DEEP: one CTA per SM with the deeper ring.
        """
        if self._fn is None:
            self._bind()
        if self._head_pairs(p, index):
            return PAIRS, 1
        ctas = _grid_ctas(p)
        if ctas > num_sms(index):
            return _d512_loop(p, WIDE), 1
        splits = clustered_splits(p, ctas, self._occupancy_splits(p, index), self._merge_modes(p, index, DEEP))
        shallow = self._shallow_ring_variant(p, index, splits)
        return _d512_loop(p, DEEP if shallow is None else shallow), splits

    def _head_pairs(self, p: Problem, index: int) -> bool:
        """Whether p runs as KV-head pairs (PAIRS, see HEAD_PAIRS_MIN_FILL): D = 64 with its KV heads side by
        side, an even number of them, at most the narrow loop's rows a pair, and at least HEAD_PAIRS_MIN_FILL x
        SMs pairs (unsplit)."""
        if p.head_dim != 64 or p.heads_kv % 2 or not p.kv_heads_adjacent:
            return False
        if 2 * p.seqlen_q * p.group_size > self._narrow_rows[(64, PAIRS)]:
            return False
        return p.batch * p.heads_kv // 2 >= HEAD_PAIRS_MIN_FILL * num_sms(index)

    def _shallow_ring_variant(self, p: Problem, index: int, num_splits: int) -> Optional[int]:
        """The variant of launch_plan's shallow-ring rule for p in num_splits splits (WIDE at D = 64, STREAM at
        D = 128), or None where the rule does not apply: a grid of at most the SMs and at least
        SHALLOW_RING_MIN_FILL of them, at most the narrow loop's rows, at least SHALLOW_RING_MIN_KEYS keys a CTA."""
        shallow = _SHALLOW_RING_VARIANT.get(p.head_dim)
        ctas, sms = _grid_ctas(p) * num_splits, num_sms(index)
        if (shallow is None or not SHALLOW_RING_MIN_FILL * sms <= ctas <= sms
                or cdiv(p.seqlen_k, num_splits) < SHALLOW_RING_MIN_KEYS
                or p.seqlen_q * p.group_size > self._narrow_rows[(p.head_dim, shallow)]):
            return None
        return shallow

    def _merge_modes(self, p: Problem, index: int, variant: int):
        """splits -> the C API's ClusterMergeMode of a `variant` launch of p in that many splits (it reads the
        device's cluster occupancy)."""
        ctas, rows, dtype = _grid_ctas(p), p.seqlen_q * p.group_size, _DTYPE_CODE[p.dtype]

        def merge_mode(splits: int) -> int:
            with torch.cuda.device(index):
                return self._cluster_merge(p.head_dim, dtype, variant, splits, ctas, rows)

        return merge_mode

    def _occupancy_splits(self, p: Problem, index: int) -> int:
        """The split count of a deep launch that fills the GPU's CTA slots (fmha.splits), before clustered_splits."""
        slots = num_sms(index) * self._ctas_per_sm[(p.head_dim, DEEP)]
        return choose_num_splits(_grid_ctas(p), p.seqlen_k, self._tile_n[(p.head_dim, DEEP)], slots)

    def launch_details(self, p: Problem) -> Optional[str]:
        index = _device_index(p.device)
        variant, num_splits = self.launch_plan(p, index)
        # A split grid of at most one wave runs one CTA per SM whatever its shared memory (capi.cu exclusive_sms;
        # a library built with FMHA_SM90_ONE_WAVE_EXCLUSIVE=0, an experiment, packs them and is misdescribed here).
        one_per_sm = self._ctas_per_sm[(p.head_dim, variant)] == 1 or (
            num_splits > 1 and _grid_ctas(p) * num_splits <= num_sms(index))
        per_sm = "one CTA per SM" if one_per_sm else "several CTAs per SM"
        ctas = _grid_ctas(p)
        if variant == PAIRS:
            ctas //= 2
            kind = ("KV-head pairs: the D = 128 stream kernel reads KV heads 2i and 2i + 1 as one 128-wide head "
                    f"(256 contiguous bytes of each token's row), "
                    f"{'one CTA' if ctas <= num_sms(index) else 'several CTAs'} per SM")
        elif p.head_dim == 512:
            kind = ("wide: the two consumer warpgroups take turns over the tiles (seesaw)" if variant == WIDE else
                    "deep: the two consumer warpgroups split Q K^T's head dim and exchange their scores")
        elif variant == DEEP:
            kind = "deep (one CTA per SM, deeper K/V ring)"
        elif variant == STREAM:
            kind = f"stream (the wide configuration's K/V ring, {per_sm})"
        else:
            kind = f"wide ({per_sm})"
        if variant == self._shallow_ring_variant(p, index, num_splits):
            kind += f", shallow ring for {'an unsplit' if num_splits == 1 else 'a split'} grid of one wave"
        rows = p.seqlen_q * p.group_size
        loop = ("narrow loop (keys in the MMA's M, query rows in N)" if rows <= self._narrow_rows[(p.head_dim, variant)]
                else "64-row loop (packed query rows in the MMA's M)")
        merge = ""
        if num_splits > 1:
            merge_mode = self._merge_modes(p, index, variant)
            mode = merge_mode(num_splits)
            merge = {1: f", merged inside clusters of {num_splits} CTAs (distributed shared memory)",
                     2: ", merged inside clusters of 2 CTAs as each finishes (distributed shared memory)"}.get(
                         mode, " + combine kernel")
            occupancy = self._occupancy_splits(p, index) if variant == DEEP else num_splits
            if (mode == 1 and occupancy > num_splits  # say so where clustered_splits chose this count
                    and clustered_splits(p, _grid_ctas(p), occupancy, merge_mode) == num_splits):
                merge += (f", fewer splits than the {occupancy} that fill the SMs but need the combine kernel "
                          f"(a short problem: CLUSTER_PLAN_CTAS in fmha/cuda/backend.py)")
        return (f"variant {kind}, {self._tile_n[(p.head_dim, variant)]}-token tiles, {loop}; {ctas} CTAs x "
                f"{num_splits} KV split(s){merge}")

    def run(self, p: Problem, q, k_cache, v_cache, cache_seqlens, out, lse) -> None:
        fn = self._fn or self._bind()
        # Keyed on the Problem's identity: fmha.attention passes one memoised object per call
        # shape, and an identity lookup skips hashing and comparing a Problem's 13 fields.
        launch = self._launches.get(id(p))
        if launch is None or launch[0] is not p:  # the entry keeps p alive, so its id is not reused
            launch = self._launch_constants(p)
        _, index, device, _, ws_bytes, shape_bytes, scalar_bytes = launch
        ws_ptr = 0
        if ws_bytes:  # the combine kernel's partials; sized from shapes: safe under CUDA-graph capture
            workspace = torch.empty(ws_bytes, dtype=torch.uint8, device=device)
            ws_ptr = workspace.data_ptr()
        qs, ks, vs, os_ = q.stride(), k_cache.stride(), v_cache.stride(), out.stride()
        # One FmhaDecodeArgs struct packed into a per-thread buffer: one FFI argument, not 31.
        args = _ARGS.buffer
        _PACKED_PER_CALL.pack_into(
            args.raw, 0, q.data_ptr(), k_cache.data_ptr(), v_cache.data_ptr(), out.data_ptr(), lse.data_ptr(),
            cache_seqlens.data_ptr() if cache_seqlens is not None else 0, shape_bytes,
            qs[0], qs[1], qs[2], ks[0], ks[1], ks[2], vs[0], vs[1], vs[2], os_[0], os_[1], os_[2],
            scalar_bytes, ws_ptr, ws_bytes, _current_stream(index))
        if self._multi_gpu and index != _current_device():
            with torch.cuda.device(index):
                status = fn(args.address)
        else:
            status = fn(args.address)
        if status != 0:
            msg = self._last_error().decode(errors="replace")
            raise RuntimeError(f"fmha cuda backend: {msg} ({p.describe()})")

    def _launch_constants(self, p: Problem):
        """What `run` packs the same way for every call of `p`, from shapes only: (p, device index,
        device, num_splits, workspace bytes, the shape fields and the scale..variant fields as
        packed bytes)."""
        index = _device_index(p.device)
        variant, num_splits = self.launch_plan(p, index)
        ws_bytes = 0  # splits merged inside clusters need no workspace (nor an allocation per call)
        if num_splits > 1 and self._merge_modes(p, index, variant)(num_splits) == 0:
            ws_bytes = self._ws_bytes(p.batch, p.seqlen_q, p.heads_q, p.head_dim, num_splits)
        shape_args = (p.batch, p.seqlen_q, p.heads_q, p.heads_kv, p.seqlen_k, p.head_dim, _DTYPE_CODE[p.dtype])
        scalar_args = (p.softmax_scale, 1 if p.causal else 0, num_splits, variant)
        packed = _PACKED.pack(*[0] * 6, *shape_args, *[0] * 12, *scalar_args, 0, 0, 0)
        launch = (p, index, torch.device("cuda", index), num_splits, ws_bytes,
                  packed[_SHAPE_FIELDS], packed[_SCALAR_FIELDS])
        if len(self._launches) >= 1024:  # only a cache (a graph keeps no reference to it): start over
            self._launches.clear()
        self._launches[id(p)] = launch
        return launch


# Layout of FmhaDecodeArgs (fmha_capi.h): 6 pointers, 7 shape ints, 12 strides, the scale,
# causal, num_splits, variant, workspace pointer and size, stream; all 8-byte fields.
_PACKED = struct.Struct("<6Q7q12qd3q3Q")
# The same bytes with the per-problem constants (7 shape ints; scale, causal, num_splits, variant)
# as two precomputed byte strings: 23 values to pack per call instead of 38.
_PACKED_PER_CALL = struct.Struct("<6Q56s12q32s3Q")
_SHAPE_FIELDS = slice(6 * 8, 13 * 8)
_SCALAR_FIELDS = slice(25 * 8, 29 * 8)


def _check_per_call_layout():
    shape, strides, scalars, tail = tuple(range(1, 8)), tuple(range(10, 22)), (0.125, 1, 3, 1), (7, 8, 9)
    packed = _PACKED.pack(*range(100, 106), *shape, *strides, *scalars, *tail)
    if _PACKED_PER_CALL.pack(*range(100, 106), packed[_SHAPE_FIELDS], *strides, packed[_SCALAR_FIELDS],
                             *tail) != packed:
        raise RuntimeError("fmha.cuda.backend: _PACKED_PER_CALL no longer matches the _PACKED layout")


_check_per_call_layout()


class _ArgsBuffer:
    def __init__(self):
        self.raw = bytearray(_PACKED.size)
        self._c = (ctypes.c_char * _PACKED.size).from_buffer(self.raw)  # keeps the address stable
        self.address = ctypes.addressof(self._c)


class _ThreadArgs(threading.local):
    """One argument buffer per thread, so concurrent callers never share one."""

    def __init__(self):
        self.buffer = _ArgsBuffer()


_ARGS = _ThreadArgs()


def _stream_of(index: int) -> int:
    """The raw cudaStream_t of PyTorch's current stream on device `index`."""
    return torch.cuda.current_stream(index).cuda_stream


# The same value without building a Stream object (~2 us per call), where this torch has it.
_current_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None) or _stream_of
# torch.cuda.current_device() without its Python wrapper (lazy-init check), where this torch has it;
# run only asks once CUDA tensors exist.
_current_device = getattr(torch._C, "_cuda_getDevice", None) or torch.cuda.current_device
