"""The "cuda" backend: the hand-written CUDA decode kernels (Hopper: TMA + WGMMA, sm_90a; Blackwell: TMA +
tcgen05 with Tensor Memory accumulators, sm_100a, compiled for it and never run on hardware).

The library is built for one architecture (`fmha_arch()` says which: the current device's, sm_100a on compute
capability 10.0, else sm_90a) and exposes the same C API
(fmha_capi.h) on every one; this module chooses a configuration and a split count per problem. A paged
problem (a block table over page pools) is planned as the contiguous one of S = its capacity
(max_blocks_per_seq * page_size), with the paged exceptions of launch_plan.

DeepSeek's shared latent (a v_cache that is k_cache's memory: `Problem.kv_shared`) at (512, 512) and
(576, 512) runs the LATENT configurations (sm_90a's, and sm_100a's one latent kernel): one K/V ring, each
latent tile read once. (576, 512) with a V tensor of its own is refused (`auto` takes Triton); a shared latent
at D <= 256 is read twice (as K and as V). Attention sinks join in the epilogue, or in the merge of split launches (the
combine kernel or the dealt-rows cluster merge; never the pair merge).
"""
from __future__ import annotations

import ctypes
import enum
import functools
import os
import struct
import threading
from typing import Optional

import torch

from ..base import Backend, forget_decisions
from ..problem import Problem, token_indices_too_large
from ..splits import cdiv, choose_num_splits, num_sms
from . import loader

SUPPORTED_HEAD_DIMS = (64, 128, 256, 512, 576)  # keys' (576: DeepSeek's latent, sm_90a, shared only)
BLOCK_M = 64  # packed query rows per CTA (one WGMMA M)


class Config(enum.IntEnum):
    """The C API's FmhaConfig: a (K/V ring, CTAs per SM, consumer loop) choice, named by what it is."""

    WIDE = 0  # D = 64, 128, 256: a shallow ring, several CTAs per SM where D <= 128 (grids that fill the GPU)
    DEEP = 1  # D = 64, 128, 256: one CTA per SM, a deeper ring (small grids, split-KV)
    STREAM = 2  # D = 128: WIDE's ring with the narrow loop (narrow grids of one wave)
    KV_HEAD_PAIRS = 3  # D = 64, KV heads side by side: STREAM's D = 128 kernel reads two heads as one
    SEESAW = 4  # D = 512, more than 64 packed rows: the two consumer warpgroups take turns over the tiles
    SPLIT_QK = 5  # D = 512, one 64-row block: the two consumer warpgroups split Q K^T's head dim
    LATENT_SEESAW = 6  # SEESAW over one ring: D = 512 with V = K, D = 576 with V = K's first 512 columns
    LATENT_SPLIT_QK = 7  # SPLIT_QK over that ring
    LATENT_NARROW = 8  # the narrow loop over that ring (at most 32 packed rows)
    LATENT_SEESAW64 = 9  # LATENT_SEESAW over 64-key tiles: two ring stages that fill and free by halves
    WIDE_GATHER = 10  # D = 64: WIDE with four gathering producer warps (paged launches that gather)
    LATENT_SEESAW48 = 11  # D = 512, 576: LATENT_SEESAW64's loop on three ring stages of 48-key tiles


# What explain() says of each configuration (the CTAs-per-SM clause is filled in per launch).
_DESCRIPTION = {
    Config.WIDE: "wide ({per_sm})",
    Config.DEEP: "deep (one CTA per SM, deeper K/V ring)",
    Config.STREAM: "stream (the wide configuration's K/V ring, {per_sm})",
    Config.KV_HEAD_PAIRS: ("kv_head_pairs (KV-head pairs: the D = 128 stream kernel reads KV heads 2i and 2i + 1 as one "
                           "128-wide head, 256 contiguous bytes of each token's row, {per_sm})"),
    Config.SEESAW: "seesaw (two consumer warpgroups over the whole head dim, {per_sm})",
    Config.SPLIT_QK: "split_qk (two consumer warpgroups, each with half of Q K^T's head dim, {per_sm})",
    Config.LATENT_SEESAW: "latent_seesaw (seesaw over one K/V ring: the latent is read once, {per_sm})",
    Config.LATENT_SPLIT_QK: "latent_split_qk (split_qk over one K/V ring: the latent is read once, {per_sm})",
    Config.LATENT_NARROW: "latent_narrow (one consumer warpgroup over one K/V ring: the latent is read once, {per_sm})",
    Config.WIDE_GATHER: "wide_gather (the wide configuration with four gathering producer warps, {per_sm})",
    Config.LATENT_SEESAW64: ("latent_seesaw64 (seesaw over 64-key tiles of one K/V ring: the latent is read once, "
                             "{per_sm})"),
    Config.LATENT_SEESAW48: ("latent_seesaw48 (seesaw over three stages of 48-key tiles of one K/V ring: the latent is "
                             "read once, {per_sm})"),
}
# The 64-row loop of each D = 512 configuration, by what it does.
_D512_LOOP = {
    Config.SEESAW: "seesaw loop (the warpgroups take turns: each computes S and the softmax of every other tile "
                   "and hands P to the other; both accumulate P V over their 256 output columns)",
    Config.SPLIT_QK: "split-QK loop (one 64-row block: each warpgroup computes Q K^T over its half of the head dim "
                     "and they exchange partial scores)",
}
_D512_LOOP[Config.LATENT_SEESAW] = _D512_LOOP[Config.SEESAW] + "; P V reads V from the K stage"
_D512_LOOP[Config.LATENT_SPLIT_QK] = _D512_LOOP[Config.SPLIT_QK] + "; P V reads V from the K stage"
_D512_LOOP[Config.LATENT_SEESAW64] = (_D512_LOOP[Config.SEESAW] + "; P V reads V from the K stage, whose halves "
                                      "each warpgroup frees after its P V")
_D512_LOOP[Config.LATENT_SEESAW48] = (_D512_LOOP[Config.LATENT_SEESAW64] + "; each Q K^T is issued a tile ahead, "
                                      "during the other warpgroup's softmax")
# The configurations of the 64-key seesaw's loop (consumer_loop_seesaw64), on 64- and 48-key tiles.
SEESAW64_LOOP = (Config.LATENT_SEESAW64, Config.LATENT_SEESAW48)

# Narrow grids (<= 16 packed rows) filling at least this share of one wave, unsplit or in the splits the deep
# plan chose, stream faster from the shallow 64 KB ring (WIDE at D = 64, STREAM at D = 128) than from DEEP's
# 192 KB one (docs/design-sm90.md); split grids run one CTA per SM (the C API launches one-wave split grids so).
# D = 256 measured level, so it stays deep.
SHALLOW_RING_MIN_FILL = 0.8
# Measured from this many keys a CTA (the cache's keys over the splits) up; shorter shares keep the deep plan.
SHALLOW_RING_MIN_KEYS = 2048
_SHALLOW_RING_CONFIG = {64: Config.WIDE, 128: Config.STREAM}
# Short split-KV problems: 64 CTAs whose splits merge inside clusters (no combine kernel) beat the ~128-CTA
# plan that needs the combine kernel while a CTA's K/V share is at most 1 MiB (docs/design-sm90.md); longer
# shares, D = 64, grids of fewer than 8 clusters (they gather on few GPCs) and grids other than exactly 64 CTAs
# gain less or lose.
CLUSTER_PLAN_CTAS = 64
CLUSTER_PLAN_MIN_CLUSTERS = 8
CLUSTER_PLAN_MAX_KV_BYTES_PER_CTA = {128: 1 << 20, 256: 1 << 20}
# D = 64 grids of at least this share of the SMs in KV-head pairs run as pairs: one CTA streams each token's
# 256 contiguous bytes where single heads would run twice the CTAs on 128-byte pieces; fewer pairs leave SMs
# idle.
HEAD_PAIRS_MIN_FILL = 0.8
# Paged caches at D = 128 run DEEP where they gather (fmha_paged_gather): one CTA per SM gathers with four warps
# where WIDE's and STREAM's CTAs have two (docs/paged.md); and with more CTAs than SMs at any page size, which the
# C API then gathers too. D = 64 measured slower so.
GATHER_DEEP_HEAD_DIMS = (128,)
_DTYPE_CODE = {torch.float16: 0, torch.bfloat16: 1}
# `auto` leaves the sm_100a kernel, which no Blackwell GPU has run yet, to callers who ask for it (read when a shape is
# first decided).
SM100_AUTO_ENV = "FMHA_CUDA_SM100"


@functools.lru_cache(maxsize=16)
def _capability(index: int):
    return torch.cuda.get_device_capability(index)


def _device_index(dev: torch.device) -> int:
    return dev.index if dev.index is not None else torch.cuda.current_device()


def _target_arch() -> str:
    """The architecture the loader builds: the current device's (sm_100a on compute capability 10.0), else
    sm_90a (also without a GPU)."""
    if torch.cuda.is_available():
        arch = loader.arch_for_capability(_capability(torch.cuda.current_device()))
        if arch is not None:
            return arch
    return loader.DEFAULT_ARCH


def _arch_capability(arch) -> tuple:
    """(major, minor) of an architecture: fmha_arch()'s 90, or a build name such as "sm_90a"."""
    if isinstance(arch, str):
        arch = int("".join(c for c in arch.lower().removeprefix("sm_") if c.isdigit()))
    return divmod(int(arch), 10)


LATENT_NARROW_ROWS = 32  # the latent narrow loop's widest N (fmha_config_narrow_rows)
# It takes up to 16 packed rows on any grid, 17-32 (N = 32) only on an unsplit grid of one wave filling at least
# this share of the SMs: there the 64-key seesaw, which multiplies those rows padded to 64, runs at the power cap;
# on split and multi-wave grids the seesaw is the faster (docs/deepseek.md).
LATENT_NARROW_ANY_GRID_ROWS = 16
LATENT_NARROW32_MIN_FILL = 0.875
# A CTA of the 64-key seesaw's loop (SEESAW64_LOOP) streams at the pace of its own hand-off chain, so a grid of a
# few more CTAs than SMs runs a second wave nearly as long as the first; split, every CTA is shorter
# (docs/deepseek.md, "Splits for grids just past one wave").
PAST_WAVE_SPLITS = 3  # two or four were at most 3% better on the grids measured, and worse on most
PAST_WAVE_MAX_FILL = 1.3  # past this many waves of CTAs, the waves a split adds outweigh what it takes off each
PAST_WAVE_MIN_TILES = 64  # of 64 keys, on 48-key tiles too: shorter CTAs save less than the merge costs
BALANCED_MAX_ROWS = 65535  # packed rows (T x G) of a balanced launch: its combine's grid.y (kBalancedMaxRows)


# Which schedule latent narrow and 64-key seesaw launches with cache lengths take: "static" (each sequence and KV
# head split over the plan's num_splits CTAs) or "balanced" (the tiles dealt over the same CTAs, at most one per SM,
# by cache length, fmha_capi.h); "auto", the default, is balanced where the static grid, splits included, has more
# CTAs than the SMs (its last wave ragged), for the seesaw only where its unsplit grid is past one wave by at most
# PAST_WAVE_MAX_FILL waves, else static. Balanced is faster where lengths differ and a few percent slower where
# they are equal in one wave (docs/deepseek.md); read when a call shape is first planned.
SCHEDULE_ENV = "FMHA_CUDA_SCHEDULE"
SCHEDULES = ("auto", "static", "balanced")


def schedule_env() -> str:
    value = os.environ.get(SCHEDULE_ENV, "") or "auto"
    if value not in SCHEDULES:
        raise ValueError(f"{SCHEDULE_ENV}: got {value!r}; allowed: {', '.join(SCHEDULES)} (or unset: auto)")
    return value


def balanced_schedule(p: Problem, config, arch: int, sms: int, num_splits: int) -> bool:
    """Whether the launch asks for the balanced schedule (fmha_capi.h): for the latent narrow loop or 64-key seesaw
    with cache lengths to deal the tiles by, over the plan's CTAs, split or not, where SCHEDULE_ENV says balanced,
    or auto and the unsplit grid has more CTAs than the `sms` SMs (the narrow loop: splits included; the seesaw: up
    to PAST_WAVE_MAX_FILL waves) (docs/deepseek.md); never past BALANCED_MAX_ROWS packed rows."""
    if not (arch == 90 and config in (Config.LATENT_NARROW, *SEESAW64_LOOP) and p.has_cache_seqlens
            and p.seqlen_q * p.group_size <= BALANCED_MAX_ROWS):
        return False
    schedule = schedule_env()
    if config in SEESAW64_LOOP:  # (slower than static on equal lengths past 1.3 waves and within one)
        return schedule == "balanced" or (schedule == "auto" and sms < _grid_ctas(p) <= PAST_WAVE_MAX_FILL * sms)
    return schedule == "balanced" or (schedule == "auto" and _grid_ctas(p) * num_splits > sms)


def latent_ring(p: Problem, arch: int = 90) -> bool:
    """Whether p runs a LATENT configuration (one ring, the latent read once): a shared latent at D = 512 or
    576, on sm_90a and sm_100a."""
    return arch in (90, 100) and p.kv_shared and p.head_dim in (512, 576)


def d512_config(p: Problem, arch: int = 90, sms: Optional[int] = None) -> Config:
    """D = 512's (and 576's) configuration, by its packed rows (all share one CTA per SM): SEESAW for more
    than one 64-row block, SPLIT_QK for one, where each is the faster (docs/design-sm90.md); for a shared latent
    (latent_ring) LATENT_NARROW up to 16 rows, and up to 32 where its unsplit grid fills one wave of `sms` SMs
    (LATENT_NARROW32_MIN_FILL), else LATENT_SEESAW64, or on a contiguous cache LATENT_SEESAW48
    (docs/deepseek.md); sm_100a has one kernel for each ring (SEESAW and LATENT_SEESAW name SPLIT_QK's and
    LATENT_SPLIT_QK's)."""
    if latent_ring(p, arch) and arch == 100:
        return Config.LATENT_SPLIT_QK
    if latent_ring(p, arch):
        rows, ctas = p.seqlen_q * p.group_size, _grid_ctas(p)
        one_wave = sms is not None and LATENT_NARROW32_MIN_FILL * sms <= ctas <= sms
        narrow = rows <= LATENT_NARROW_ANY_GRID_ROWS or (rows <= LATENT_NARROW_ROWS and one_wave)
        if narrow:
            return Config.LATENT_NARROW
        # (a paged box lies inside one page and one tile: 48-key tiles in 64-token pages read 16-row boxes)
        return Config.LATENT_SEESAW64 if p.has_block_table else Config.LATENT_SEESAW48
    return Config.SEESAW if p.seqlen_q * p.group_size > BLOCK_M else Config.SPLIT_QK


def split_config(head_dim: int, latent: bool = False) -> Config:
    """The one-CTA-per-SM configuration whose tile and occupancy plan the split count: DEEP, or at D = 512
    SPLIT_QK (D = 512's configurations share their CTAs per SM; LATENT_SPLIT_QK for the latent ring, whose
    32-key tile also plans the splits of LATENT_SEESAW64 and LATENT_SEESAW48: each split then gets at least one of
    their 64- or 48-key tiles, the plan measured against the 32-key seesaw in docs/deepseek.md)."""
    if head_dim >= 512:
        return Config.LATENT_SPLIT_QK if latent else Config.SPLIT_QK
    return Config.DEEP


def clustered_splits(p: Problem, ctas: int, num_splits: int, merge_mode) -> int:
    """`num_splits`, or CLUSTER_PLAN_CTAS // ctas splits where those merge inside clusters and the plan's
    splits would need the combine kernel (see CLUSTER_PLAN_CTAS). merge_mode(splits) is the C API's
    cluster merge mode of a split_config launch of `ctas` x splits CTAs (0: combine kernel, 1: inside clusters of
    dealt rows, 2: as cluster pairs)."""
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


class CudaBackend(Backend):
    name = "cuda"
    summary = ("hand-written CUDA decode kernel (Hopper, sm_90a; a Blackwell sm_100a kernel is compiled for compute "
               "capability 10.0, never run on hardware): TMA K/V ring, WGMMA QK^T and PV, GQA rows packed "
               "into M, split-KV merged inside thread-block clusters or by a combine kernel (built with nvcc on "
               "first use)")
    eager_call_us = 20.0  # host time of an eager call (perf/overhead.py)

    def __init__(self):
        self._fn = None
        self._tile_n = None
        self._ws_bytes = None
        self._balanced_ws_bytes = None
        self._balanced_deals = None
        self._half_partials_query = None
        self._last_error = None
        self._arch = None  # fmha_arch() of the loaded library
        self._launches = {}  # id(Problem) -> run's per-problem constants (see _launch_constants)
        self._build_error = None

    @property
    def capability(self) -> tuple:
        """(major, minor) compute capability the library runs on: the loaded one's fmha_arch(), else the
        architecture the loader builds."""
        return _arch_capability(self._arch if self._arch is not None else _target_arch())

    # -- availability -----------------------------------------------------
    def auto_reason(self, p: Problem) -> Optional[str]:
        if self.capability == (10, 0) and os.environ.get(SM100_AUTO_ENV, "") != "1":
            return (f"the sm_100a kernel has never run on a Blackwell GPU: auto takes it only with {SM100_AUTO_ENV}=1 "
                    "(backend='cuda' runs it)")
        return None

    def unavailable_reason(self) -> Optional[str]:
        if not torch.cuda.is_available():
            return "no CUDA GPU (torch.cuda.is_available() is False)"
        want = self.capability
        caps = [_capability(i) for i in range(torch.cuda.device_count())]
        if want not in caps:
            return (f"the library is built for compute capability {want[0]}.{want[1]} (sm_{want[0]}{want[1]}a); "
                    f"found {', '.join(f'{a}.{b}' for a, b in caps)}")
        if self._build_error is not None:
            return f"the CUDA library could not be built or loaded: {self._build_error}"
        if self._fn is not None:  # loaded: what the build needs (and hashing its sources, ~3 ms) no longer matters
            return None
        return loader.buildable(_target_arch())

    def unsupported_reason(self, p: Problem) -> Optional[str]:
        if p.device.type != "cuda":
            return f"tensors on {p.device}: the CUDA kernel needs CUDA tensors"
        cap, want = _capability(_device_index(p.device)), self.capability
        if cap != want:
            return (f"device {p.device} has compute capability {cap[0]}.{cap[1]}; the kernel is built for "
                    f"sm_{want[0]}{want[1]}a ({want[0]}.{want[1]})")
        if p.dtype not in _DTYPE_CODE:
            return f"dtype {p.dtype} not supported (bfloat16, float16)"
        if p.head_dim_v != p.head_dim or p.head_dim == 576:
            if (p.head_dim, p.head_dim_v) != (576, 512):
                return (f"head dims (D_qk, D_v) = ({p.head_dim}, {p.head_dim_v}): the CUDA kernel serves (D, D) and "
                        "(576, 512)")
            if not p.kv_shared:
                return (f"head dims (D_qk, D_v) = ({p.head_dim}, {p.head_dim_v}) with a V tensor of its own: the CUDA "
                        f"kernel reads V as K's first {p.head_dim_v} columns; pass v_cache = k_cache[..., "
                        f":{p.head_dim_v}]")
        if p.has_window:
            return (f"sliding window {(p.window_left, p.window_right)}: the CUDA kernels attend to every key up to "
                    "cache_seqlens (and the diagonal); the Triton kernel serves windows")
        if p.softcap:
            return f"softcap {p.softcap:g}: the CUDA kernels do not cap scores; the Triton kernel does"
        if p.has_leftpad:
            return "cache_leftpad: the CUDA kernels read every cache from key 0; the Triton kernel takes left padding"
        if p.head_dim not in SUPPORTED_HEAD_DIMS:
            return f"head_dim {p.head_dim} not supported (64, 128, 256, 512; 576 with D_v = 512)"
        if not p.aligned_16b:
            return (f"{p.misalignment or 'a tensor is misaligned'}: q, k_cache, v_cache and out must start on 16-byte "
                    "boundaries with every stride but the last a nonzero multiple of 16 bytes (below 2^40 elements) "
                    "where its dim has more than one element (TMA and 16-byte loads)")
        if p.batch > 65535 or p.heads_kv > 65535:
            return f"batch {p.batch} or heads_kv {p.heads_kv} above the grid limit 65535"
        too_large = token_indices_too_large(p, 1024)
        if too_large is not None:
            return too_large
        if p.has_block_table:
            if p.num_blocks > 2 ** 31 - 1:
                return f"num_blocks {p.num_blocks} above 2^31 - 1 (32-bit page ids)"
            if not p.block_table_rows_disjoint:
                return ("block_table rows overlap (stride(0) < max_blocks_per_seq, e.g. an expanded row): the CUDA "
                        "kernel takes one row per sequence; pass block_table.contiguous()")
        return None

    # -- execution --------------------------------------------------------
    def prepare(self) -> None:
        if self._fn is None:
            self._bind()

    def _bind(self):
        try:
            lib = loader.load(_target_arch())
        except loader.CudaBuildError as e:
            # Remember it: `auto` stops choosing this backend (and stops rebuilding on every call).
            msg = " ".join(str(e).split())  # (nvcc's own error follows the first line: kept, on one line)
            self._build_error = msg if len(msg) <= 1500 else f"{msg[:700]} ... {msg[-700:]}"
            forget_decisions()
            raise
        keys = [(d, c) for d in SUPPORTED_HEAD_DIMS for c in Config]
        self._tile_n = {k: lib.fmha_config_tile_n(*k) for k in keys}
        self._ctas_per_sm = {k: lib.fmha_config_ctas_per_sm(*k) for k in keys}
        self._narrow_rows = {k: lib.fmha_config_narrow_rows(*k) for k in keys}
        self._cluster_merge = lib.fmha_cluster_merge
        self._row_block_pairs = lib.fmha_row_block_pairs
        self._paged_gather = lib.fmha_paged_gather
        self._multi_gpu = torch.cuda.device_count() > 1  # else no device guard is ever needed
        self._ws_bytes = lib.fmha_workspace_bytes
        self._balanced_ws_bytes = getattr(lib, "fmha_balanced_workspace_bytes", None)
        self._balanced_deals = getattr(lib, "fmha_balanced_deals", None)
        self._half_partials_query = getattr(lib, "fmha_half_partials", None)
        self._last_error = lib.fmha_last_error
        self._arch = lib.fmha_arch()
        self._fn = lib.fmha_decode
        return self._fn

    def launch_plan(self, p: Problem, index: int):
        """(Config, num_splits) for a problem on device `index`.

        D = 64 problems of enough KV-head pairs to fill most SMs run as pairs (_head_pairs). Otherwise a grid
        of more CTAs than SMs runs WIDE and unsplit (at D <= 128 several CTAs share an SM, one's prologue and
        epilogue hide behind another's streaming). Otherwise the keys are split when the grid would leave SMs idle
        (one deep CTA per SM fills them), and short split problems take fewer splits, on 64 CTAs, where those
        merge inside clusters (clustered_splits). That grid, unsplit or split, runs the shallow ring where it
        is narrow, fills nearly one wave (SHALLOW_RING_MIN_FILL) and gives each CTA at least
        SHALLOW_RING_MIN_KEYS keys, else DEEP: one CTA per SM with the deeper ring. D = 512 plans its splits
        the same way and runs the configuration of its row count (d512_config), split or not; its grids of the
        64-key seesaw's loop (SEESAW64_LOOP) just past one wave split as _past_wave_splits says. Paged D = 128
        problems run DEEP where they gather or have more CTAs than SMs (GATHER_DEEP_HEAD_DIMS, sm_90a), except
        narrow grids of more CTAs than SMs that STREAM holds in one wave (_paged_stream); paged D = 64 runs as
        pairs only through TMA boxes (_head_pairs).
        """
        if self._fn is None:
            self._bind()
        if self._head_pairs(p, index):
            return Config.KV_HEAD_PAIRS, 1
        ctas = _grid_ctas(p)
        # (sm_90a's rule: the sm_100a kernel gathers on one warp; ctas = 0 asks by the page size alone)
        gather_deep = p.head_dim in GATHER_DEEP_HEAD_DIMS and p.has_block_table and self._arch != 100 and (
            ctas > num_sms(index) or self._gathers(p, Config.DEEP, 0))
        if ctas > num_sms(index):
            if p.head_dim >= 512:
                config = self._d512_config(p)
                return config, self._past_wave_splits(p, index, config, ctas)
            if gather_deep and self._paged_stream(p, index, ctas):
                return Config.STREAM, 1
            return self._wide_gather(p, Config.DEEP if gather_deep else Config.WIDE, ctas), 1
        splits = clustered_splits(p, ctas, self._occupancy_splits(p, index),
                                  self._merge_modes(p, index, self._split_config(p)))
        if p.head_dim >= 512:  # (LATENT_NARROW's 17-32 rows: unsplit grids only)
            return self._d512_config(p, num_sms(index) if splits == 1 else None), splits
        shallow = None if gather_deep else self._shallow_ring_config(p, index, splits)
        return (Config.DEEP if shallow is None else self._wide_gather(p, shallow, ctas * splits)), splits

    def _d512_config(self, p: Problem, sms: Optional[int] = None) -> Config:
        """d512_config, or LATENT_SEESAW64 where it names LATENT_SEESAW48 and the library has no such kernel (one
        built before it, loaded for an A/B)."""
        config = d512_config(p, self._arch, sms)
        if config == Config.LATENT_SEESAW48 and not self._tile_n.get((p.head_dim, config)):
            return Config.LATENT_SEESAW64
        return config

    def _past_wave_splits(self, p: Problem, index: int, config: Config, ctas: int) -> int:
        """PAST_WAVE_SPLITS for a grid of the 64-key seesaw's loop (SEESAW64_LOOP) of more CTAs than SMs, up to
        PAST_WAVE_MAX_FILL waves of them, whose CTAs have at least PAST_WAVE_MIN_TILES 64-key tiles; else 1 (every
        other configuration of such grids included)."""
        if config not in SEESAW64_LOOP or ctas > PAST_WAVE_MAX_FILL * num_sms(index):
            return 1
        return PAST_WAVE_SPLITS if cdiv(p.seqlen_k, 64) >= PAST_WAVE_MIN_TILES else 1

    def _wide_gather(self, p: Problem, config: Config, ctas: int) -> Config:
        """WIDE_GATHER for a D = 64 WIDE launch that gathers (sm_90a): its four gathering warps outpace WIDE's two,
        and only gathered launches pay its register cap (docs/paged.md)."""
        if config == Config.WIDE and p.head_dim == 64 and self._arch == 90 and self._gathers(p, config, ctas):
            return Config.WIDE_GATHER
        return config

    def _paged_stream(self, p: Problem, index: int, ctas: int) -> bool:
        """Whether a grid of `ctas` > SMs CTAs that the GATHER_DEEP_HEAD_DIMS rule would run DEEP runs STREAM
        instead: at most the narrow loop's rows, and at most the CTAs STREAM holds at once (two a SM), which
        stream faster at every page size through its ring and narrow loop (docs/paged.md)."""
        key = (p.head_dim, Config.STREAM)
        return (p.seqlen_q * p.group_size <= self._narrow_rows[key]
                and ctas <= self._ctas_per_sm[key] * num_sms(index))

    def _head_pairs(self, p: Problem, index: int) -> bool:
        """Whether p runs as KV-head pairs (KV_HEAD_PAIRS, see HEAD_PAIRS_MIN_FILL): D = 64 with its KV heads side
        by side, an even number of them, at most the narrow loop's rows a pair, and at least HEAD_PAIRS_MIN_FILL x
        SMs pairs (unsplit); paged, only through TMA boxes: gathered pages run faster on WIDE_GATHER's four
        warps than on the pairs kernel's two (docs/paged.md)."""
        if p.head_dim != 64 or p.heads_kv % 2 or not p.kv_heads_adjacent:
            return False
        if 2 * p.seqlen_q * p.group_size > self._narrow_rows[(64, Config.KV_HEAD_PAIRS)]:
            return False
        pairs = p.batch * p.heads_kv // 2
        if pairs < HEAD_PAIRS_MIN_FILL * num_sms(index):
            return False
        return not (p.has_block_table and self._gathers(p, Config.KV_HEAD_PAIRS, pairs))

    def _shallow_ring_config(self, p: Problem, index: int, num_splits: int) -> Optional[Config]:
        """The configuration of launch_plan's shallow-ring rule for p in num_splits splits (WIDE at D = 64, STREAM
        at D = 128), or None where the rule does not apply: a grid of at most the SMs and at least
        SHALLOW_RING_MIN_FILL of them, at most the narrow loop's rows, at least SHALLOW_RING_MIN_KEYS keys a CTA."""
        shallow = _SHALLOW_RING_CONFIG.get(p.head_dim)
        ctas, sms = _grid_ctas(p) * num_splits, num_sms(index)
        if (shallow is None or not SHALLOW_RING_MIN_FILL * sms <= ctas <= sms
                or cdiv(p.seqlen_k, num_splits) < SHALLOW_RING_MIN_KEYS
                or p.seqlen_q * p.group_size > self._narrow_rows[(p.head_dim, shallow)]):
            return None
        return shallow

    def _merge_modes(self, p: Problem, index: int, config: Config):
        """splits -> the C API's cluster merge mode of a `config` launch of p in that many splits (it reads the
        device's cluster occupancy)."""
        ctas, rows, dtype = _grid_ctas(p), p.seqlen_q * p.group_size, _DTYPE_CODE[p.dtype]

        def merge_mode(splits: int) -> int:
            with torch.cuda.device(index):
                mode = self._cluster_merge(p.head_dim, dtype, config, splits, ctas, rows)
                gather = self._gathers(p, config, ctas * splits)
            if gather and mode == 1:
                return 0  # the gather path merges by kernel (fmha_capi.h)
            return 0 if p.has_sinks and mode == 2 else mode  # the pair merge has no sinks (fmha_capi.h)

        return merge_mode

    def _gathers(self, p: Problem, config: Config, ctas: int) -> bool:
        """Whether a paged p launched with `config` in a grid of `ctas` CTAs (splits included) takes the gather
        path (cp.async by the producer warps) rather than TMA boxes (fmha_paged_gather; current device)."""
        return p.page_size is not None and self._paged_gather(p.head_dim, int(config), p.page_size, ctas) == 1

    def _occupancy_splits(self, p: Problem, index: int) -> int:
        """The split count that fills the GPU's CTA slots with split_config's CTAs (fmha.splits), before
        clustered_splits."""
        key = (p.head_dim, self._split_config(p))
        slots = num_sms(index) * self._ctas_per_sm[key]
        return choose_num_splits(_grid_ctas(p), p.seqlen_k, self._tile_n[key], slots, one_wave=True)

    def reads_shared_kv_once(self, p: Problem) -> bool:
        return latent_ring(p, self._arch if self._arch is not None else _arch_capability(_target_arch())[0] * 10)

    def _balanced(self, p: Problem, config, num_splits: int, index: int) -> bool:
        """balanced_schedule on device `index`, where the loaded library has it (tools load older ones) and its launch
        deals the tiles (fmha_balanced_deals; elsewhere it runs the static schedule), so that explain and the
        workspace say what runs."""
        if self._balanced_ws_bytes is None or not balanced_schedule(p, config, self._arch, num_sms(index), num_splits):
            return False
        if self._balanced_deals is None:  # (a library of the schedule's first version: tools/ A/B)
            return True
        with torch.cuda.device(index):
            return self._balanced_deals(p.head_dim, int(config), p.batch, p.heads_q, p.heads_kv, p.seqlen_k,
                                        p.page_size if p.has_block_table else 0, _grid_ctas(p) * num_splits) == 1

    def _half_partials(self, p: Problem, config: Config, balanced: bool) -> bool:
        """Whether a launch merged by the combine kernel leaves fp16 partials in the workspace, as the loaded library
        builds them (FMHA_DISABLE_HALF_PARTIALS); a library without the query (tools/ A/B, fp32 pieces) answers by
        its default."""
        if self._half_partials_query is None:
            return not balanced and config in SEESAW64_LOOP and p.dtype == torch.bfloat16 and self._arch == 90
        return self._half_partials_query(p.head_dim, int(p.dtype == torch.bfloat16), int(config)) == 1

    def _split_config(self, p: Problem) -> Config:
        return split_config(p.head_dim, latent_ring(p, self._arch))

    def launch_details(self, p: Problem) -> Optional[str]:
        index = _device_index(p.device)
        config, num_splits = self.launch_plan(p, index)
        config = Config(config)
        ctas, sms = _grid_ctas(p), num_sms(index)
        if config == Config.KV_HEAD_PAIRS:
            ctas //= 2
            one_per_sm = ctas <= sms
        else:  # a split grid of at most one wave runs one CTA per SM whatever its shared memory (the C API)
            one_per_sm = self._ctas_per_sm[(p.head_dim, config)] == 1 or (num_splits > 1 and ctas * num_splits <= sms)
        kind = _DESCRIPTION[config].format(per_sm="one CTA per SM" if one_per_sm else "several CTAs per SM")
        shallow = self._shallow_ring_config(p, index, num_splits)
        if shallow is not None and config == self._wide_gather(p, shallow, _grid_ctas(p) * num_splits):
            kind += f", shallow ring for {'an unsplit' if num_splits == 1 else 'a split'} grid of one wave"
        rows = p.seqlen_q * p.group_size
        if rows <= self._narrow_rows[(p.head_dim, config)]:
            loop = "narrow loop (keys in the MMA's M, query rows in N)"
        else:
            loop = _D512_LOOP.get(config, "64-row loop (packed query rows in the MMA's M)")
        merge = ""
        with torch.cuda.device(index):
            pairs = self._row_block_pairs(p.head_dim, int(config), num_splits, cdiv(rows, BLOCK_M),
                                          _grid_ctas(p) * num_splits) == 1
        if pairs:
            merge = ", the row blocks of a sequence launched in clusters of 2 (they share its latent through L2)"
        if num_splits > 1:
            merge_mode = self._merge_modes(p, index, config)
            mode = merge_mode(num_splits)
            merge = {1: f", merged inside clusters of {num_splits} CTAs (distributed shared memory)",
                     2: ", merged inside clusters of 2 CTAs as each finishes (distributed shared memory)"}.get(
                         mode, " + combine kernel")
            if mode == 0 and self._half_partials(p, config, balanced=False):
                merge += " (fp16 partials, a power-of-two scale a row: DecodeParams::partials_f16)"
            occupancy = self._occupancy_splits(p, index) if config == self._split_config(p) else num_splits
            if (mode == 1 and occupancy > num_splits  # say so where clustered_splits chose this count
                    and clustered_splits(p, _grid_ctas(p), occupancy, merge_mode) == num_splits):
                merge += (f", fewer splits than the {occupancy} that fill the SMs but need the combine kernel "
                          f"(a short problem: CLUSTER_PLAN_CTAS in fmha/cuda/backend.py)")
        paged = ""
        if p.has_block_table:
            with torch.cuda.device(index):
                gathers = self._gathers(p, config, _grid_ctas(p) * num_splits)
            paged = (f"; paged ({p.page_size}-token pages): "
                     + ("the producer warps gather each tile (cp.async)" if gathers else "TMA boxes inside each page"))
        launch = self._launches.get(id(p))  # (planned already: the schedule it took, as FMHA_CUDA_SCHEDULE said then)
        planned = launch is not None and launch[0] is p
        if launch[-1] if planned else self._balanced(p, config, num_splits, index):  # (its last field: balanced)
            merge = (f", the tiles dealt over {self._balanced_ctas(p, config, num_splits, sms)} CTAs in equal shares "
                     "by cache length (balanced schedule; the pieces of a sequence shared by several CTAs + combine "
                     "kernel)")
            if self._half_partials(p, config, balanced=True):
                merge += " (fp16 pieces, a power-of-two scale a row)"
        arch = ""
        if self._arch == 100:
            arch = ("; sm_100a kernel (tcgen05, Tensor Memory): compiled for sm_100a, never run on hardware before "
                    "this GPU")
            loop = "64-row loop (packed query rows in the MMA's M)" + (
                "; P V reads V from the K stage" if config == Config.LATENT_SPLIT_QK else "")
        return (f"config {kind}, {self._tile_n[(p.head_dim, config)]}-token tiles, {loop}; {ctas} CTAs x "
                f"{num_splits} KV split(s){merge}{paged}{arch}")

    def _balanced_ctas(self, p: Problem, config: Config, num_splits: int, sms: int) -> int:
        """The CTAs a balanced launch runs: the planned grid cut to the CTAs the SMs hold at once, by whole row
        blocks for the 64-key seesaw (as fmha/cuda/csrc/sm90/launch.cuh)."""
        ctas, resident = _grid_ctas(p) * num_splits, sms * self._ctas_per_sm[(p.head_dim, config)]
        if resident <= 0:
            return ctas
        if config in SEESAW64_LOOP:
            row_blocks = cdiv(p.seqlen_q * p.group_size, BLOCK_M)
            return row_blocks * min(ctas // row_blocks, max(1, resident // row_blocks))
        return min(ctas, resident)

    def run(self, p: Problem, q, k_cache, v_cache, cache_seqlens, out, lse, block_table=None, sinks=None,
            cache_leftpad=None) -> None:
        if cache_leftpad is not None:
            raise ValueError("cache_leftpad: the CUDA kernels take no left padding (unsupported_reason says so)")
        if (sinks is not None) != p.has_sinks:
            raise ValueError("sinks: given for a problem without sinks, or missing for one with them")
        fn = self._fn or self._bind()
        # Keyed on the Problem's identity: fmha.attention passes one memoised object per call
        # shape, and an identity lookup skips hashing and comparing a Problem's fields.
        launch = self._launches.get(id(p))
        if launch is None or launch[0] is not p:  # the entry keeps p alive, so its id is not reused
            launch = self._launch_constants(p)
        _, index, device, _, ws_bytes, shape_bytes, scalar_bytes, tail_bytes, balanced = launch
        ws_ptr = 0
        if ws_bytes:  # the combine kernel's partials (or the balanced schedule's pieces); sized from shapes: safe
            workspace = torch.empty(ws_bytes, dtype=torch.uint8, device=device)  # under CUDA-graph capture
            ws_ptr = workspace.data_ptr()
        qs, ks, vs, os_ = q.stride(), k_cache.stride(), v_cache.stride(), out.stride()
        # One FmhaDecodeArgs struct packed into a per-thread buffer: one FFI argument instead of one per field.
        args = _ARGS.buffer
        _PACKED_PER_CALL.pack_into(
            args.raw, 0, q.data_ptr(), k_cache.data_ptr(), v_cache.data_ptr(), out.data_ptr(), lse.data_ptr(),
            cache_seqlens.data_ptr() if cache_seqlens is not None else 0, shape_bytes,
            qs[0], qs[1], qs[2], ks[0], ks[1], ks[2], vs[0], vs[1], vs[2], os_[0], os_[1], os_[2],
            scalar_bytes, ws_ptr, ws_bytes, _current_stream(index), tail_bytes,
            sinks.data_ptr() if sinks is not None else 0, 1 if balanced else 0)
        if p.has_block_table or block_table is not None:  # the table's pointer and row stride, per call
            if block_table is None or not p.has_block_table:
                raise ValueError("block_table: given for a contiguous problem, or missing for a paged one")
            stride = block_table.stride(0) if p.batch > 1 else p.max_blocks_per_seq  # one row: any stride
            _BLOCK_TABLE.pack_into(args.raw, _TAIL_FIELDS.start, block_table.data_ptr(), stride)
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
        device, num_splits, workspace bytes, as packed bytes the shape fields, the scale..config fields and
        the block_table..max_blocks_per_seq fields, and whether the launch takes the balanced schedule)."""
        index = _device_index(p.device)
        config, num_splits = self.launch_plan(p, index)
        ws_bytes = 0  # splits merged inside clusters need no workspace (nor an allocation per call)
        if num_splits > 1 and self._merge_modes(p, index, config)(num_splits) == 0:
            ws_bytes = self._ws_bytes(p.batch, p.seqlen_q, p.heads_q, p.head_dim_v, num_splits)
        balanced = self._balanced(p, config, num_splits, index)
        if balanced:  # the pieces of shared sequences and their descriptors
            ws_bytes = self._balanced_ws_bytes(p.batch, p.seqlen_q, p.heads_q, p.heads_kv, p.head_dim_v, num_splits)
        shape_args = (p.batch, p.seqlen_q, p.heads_q, p.heads_kv, p.seqlen_k, p.head_dim, _DTYPE_CODE[p.dtype])
        scalar_args = (p.softmax_scale, 1 if p.causal else 0, num_splits, int(config))
        # Contiguous caches: no block table, no pages; paged ones: the pool's shape here, the table's pointer
        # and row stride per call (run), as the sinks' pointer.
        if p.has_block_table:
            tail_args = (0, 0, p.page_size, p.head_dim_v, p.num_blocks, p.max_blocks_per_seq)
        else:
            tail_args = (0, 0, 0, p.head_dim_v, 0, 0)
        packed = _PACKED.pack(*[0] * 6, *shape_args, *[0] * 12, *scalar_args, 0, 0, 0, *tail_args, 0, 0)
        launch = (p, index, torch.device("cuda", index), num_splits, ws_bytes,
                  packed[_SHAPE_FIELDS], packed[_SCALAR_FIELDS], packed[_TAIL_FIELDS], balanced)
        if len(self._launches) >= 1024:  # only a cache (a graph keeps no reference to it): start over
            self._launches.clear()
        self._launches[id(p)] = launch
        return launch


# Layout of FmhaDecodeArgs (fmha_capi.h), all 8-byte fields: 6 pointers, 7 shape ints, 12 strides, the scale,
# causal, num_splits, config, workspace pointer and size, stream, then block_table (pointer), block_table_stride,
# page_size, head_dim_v, num_blocks, max_blocks_per_seq, sinks (pointer), balanced.
_PACKED = struct.Struct("<6Q7q12qd3q3QQ5qQq")
# The same bytes with the per-problem constants (7 shape ints; scale, causal, num_splits, config; block_table ..
# max_blocks_per_seq) as three precomputed byte strings: 25 values to pack per call instead of 39.
_PACKED_PER_CALL = struct.Struct("<6Q56s12q32s3Q48sQq")
_SHAPE_FIELDS = slice(6 * 8, 13 * 8)
_SCALAR_FIELDS = slice(25 * 8, 29 * 8)
_TAIL_FIELDS = slice(32 * 8, 38 * 8)
# block_table and block_table_stride, the tail's first two fields, packed per call of a paged problem.
_BLOCK_TABLE = struct.Struct("<Qq")


def _check_per_call_layout():
    shape, strides, scalars = tuple(range(1, 8)), tuple(range(10, 22)), (0.125, 1, 3, 1)
    per_call, tail = (7, 8, 9), (0x1000, 40, 64, 512, 1000, 40)
    packed = _PACKED.pack(*range(100, 106), *shape, *strides, *scalars, *per_call, *tail, 0x2000, 1)
    if _PACKED.size != 40 * 8 or _PACKED_PER_CALL.pack(
            *range(100, 106), packed[_SHAPE_FIELDS], *strides, packed[_SCALAR_FIELDS], *per_call,
            packed[_TAIL_FIELDS], 0x2000, 1) != packed:
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
