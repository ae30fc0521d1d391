"""The cuda backend's launch plan with the C API's queries stubbed (no GPU or library needed): fewer splits
merged inside clusters (fmha/cuda/backend.py clustered_splits), the shallow ring, KV-head pairs, the
configuration of D = 512 (d512_config), the FmhaDecodeArgs packing and what explain() says."""
from __future__ import annotations

import pytest
import torch

from _util import make_problem as problem

from fmha.cuda import backend as cb
from fmha.cuda.backend import CLUSTER_PLAN_CTAS, Config, clustered_splits, d512_config


def modes(clustered=(), combine_at=None):
    """merge_mode stub: 1 (inside clusters) for split counts in `clustered`, else 0 (combine kernel)."""
    def mode(splits):
        return 1 if splits in clustered else 0
    return mode


@pytest.mark.parametrize("B,S,D,plan,expected", (
    (1, 8192, 128, 16, 8),       # 8 KV heads: 8 clusters of 8
    (2, 8192, 128, 8, 4),        # 16 clusters of 4
    (4, 4096, 128, 4, 2),        # 32 clusters of 2
    (1, 16384, 128, 16, 8),      # 1 MiB of K/V a CTA: the limit
    (1, 32768, 128, 16, 16),     # 2 MiB a CTA: stays
    (2, 65536, 128, 8, 8),       # 8 MiB a CTA: stays
    (1, 8192, 256, 16, 8),       # 1 MiB a CTA
    (1, 16384, 256, 16, 16),     # 2 MiB: stays
    (1, 8192, 64, 16, 16),       # D = 64 streams slower on 64 CTAs: stays
    (1, 8192, 512, 16, 16),      # D = 512: no cluster merge at all
))
def test_rule(B, S, D, plan, expected):
    p = problem(B, 1, 32, 8, S, D)
    assert clustered_splits(p, B * 8, plan, modes(clustered={CLUSTER_PLAN_CTAS // (B * 8)})) == expected


def test_needs_combine_at_plan_and_clusters_at_fewer():
    p = problem(1, 1, 32, 8, 8192, 128)
    assert clustered_splits(p, 8, 16, modes(clustered={8})) == 8
    assert clustered_splits(p, 8, 16, modes(clustered={8, 16})) == 16  # the plan already merges in clusters
    assert clustered_splits(p, 8, 16, modes(clustered=())) == 16       # 8 clusters of 8 do not fit


@pytest.mark.parametrize("Hkv,B,plan", ((4, 1, 22), (1, 1, 22), (8, 3, 11), (8, 8, 2), (8, 16, 1)))
def test_grids_it_leaves_alone(Hkv, B, plan):
    """Fewer than 8 clusters (4 clusters of 16 gather on 4 GPCs), a grid that does not divide 64 (24
    units), one of 64 units (64 // 64 = 1 split) and an unsplit plan, even where every other split
    count would merge in clusters and the plan's would not."""
    p = problem(B, 1, 32, Hkv, 8192, 128)
    assert clustered_splits(p, B * Hkv, plan, modes(clustered=set(range(2, 17)) - {plan})) == plan


class _NoDevice:
    """Stands in for torch.cuda.device on a machine without a GPU."""

    def __init__(self, index):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def stub_backend(monkeypatch, clustered):
    """A cuda backend whose C API queries are stubbed as on an H200 (132 SMs; deep D = 128: 128-token tiles, one
    CTA per SM; the cluster merge fits for the split counts in `clustered`)."""
    monkeypatch.setattr(cb, "num_sms", lambda index: 132)
    monkeypatch.setattr(torch.cuda, "device", _NoDevice)
    b = cb.CudaBackend()
    b._fn = object()  # bound
    W, D_, S_, P = Config.WIDE, Config.DEEP, Config.STREAM, Config.KV_HEAD_PAIRS
    SEESAW, SPLIT_QK = Config.SEESAW, Config.SPLIT_QK
    # (tile_n, CTAs per SM, narrow rows) of each configuration the library has, as fmha/cuda/csrc/sm90/config.h
    shapes = {(128, D_): (128, 1, 16), (128, W): (64, 2, 0), (128, S_): (64, 2, 16), (64, D_): (128, 1, 16),
              (64, W): (128, 2, 16), (256, D_): (64, 1, 16), (256, W): (64, 1, 16), (64, P): (64, 2, 16),
              (512, SEESAW): (32, 1, 0), (512, SPLIT_QK): (32, 1, 0), (64, Config.WIDE_GATHER): (128, 2, 16)}
    keys = [(d, c) for d in (64, 128, 256, 512) for c in Config]
    b._tile_n = {k: shapes.get(k, (0, 0, 0))[0] for k in keys}
    b._ctas_per_sm = {k: shapes.get(k, (0, 0, 0))[1] for k in keys}
    b._narrow_rows = {k: shapes.get(k, (0, 0, 0))[2] for k in keys}
    b.asked = []

    def cluster_merge(D, dtype, config, splits, clusters, rows):
        assert b._tile_n[(D, config)], f"the C API refuses config {config} at D = {D}"
        b.asked.append((D, dtype, config))
        return 1 if splits in clustered else 0

    b._cluster_merge = cluster_merge
    b._ws_bytes = lambda B, T, Hq, D, splits: 4 * splits * B * T * Hq * (D + 1)
    def paged_gather(D, config, page_size, ctas):  # as fmha_paged_gather on sm_90a (sm90/config.h paged_gathers)
        return int((page_size & -page_size) < 32 or (D == 128 and config == D_ and ctas > 132))

    b._paged_gather = paged_gather
    # as fmha_row_block_pairs on sm_90a (sm90/launch.cuh): unsplit 64-key seesaw grids of even row blocks
    b._row_block_pairs = lambda D, config, splits, row_blocks, ctas: int(
        config in cb.SEESAW64_LOOP and splits == 1 and row_blocks % 2 == 0)
    return b


def test_plan_and_explanation(monkeypatch):
    b = stub_backend(monkeypatch, clustered={8})
    p = problem(1, 1, 32, 8, 8192, 128, device="cuda:0")
    assert b.launch_plan(p, 0) == (Config.DEEP, 8)
    text = b.launch_details(p)
    assert "8 CTAs x 8 KV split(s), merged inside clusters of 8 CTAs" in text, text
    assert "fewer splits than the 16 that fill the SMs but need the combine kernel" in text, text
    # the occupancy rule's 16 splits merge in clusters themselves: kept, and no note
    b = stub_backend(monkeypatch, clustered={8, 16})
    assert b.launch_plan(p, 0) == (Config.DEEP, 16)
    assert "fewer splits" not in b.launch_details(p)
    # a grid of more CTAs than SMs: wide, unsplit
    big = problem(32, 1, 32, 8, 8192, 128, device="cuda:0")
    assert b.launch_plan(big, 0) == (Config.WIDE, 1)
    # a plan forced to 4 splits (as tests and tools/variants.py do): no note, the rule did not choose it
    b = stub_backend(monkeypatch, clustered={4})
    monkeypatch.setattr(b, "launch_plan", lambda p, index: (Config.DEEP, 4))
    text = b.launch_details(p)
    assert "merged inside clusters of 4 CTAs" in text and "fewer splits" not in text, text


@pytest.mark.parametrize("B,T,Hq,Hkv,D,config,splits", (
    (16, 1, 32, 8, 128, "STREAM", 1),   # 128 CTAs of 4 rows: one wave, unsplit, the shallow ring
    (16, 4, 32, 8, 128, "STREAM", 1),   # 16 rows: still the narrow loop
    (14, 1, 32, 8, 128, "STREAM", 1),   # 112 CTAs >= 0.8 x 132
    (16, 1, 32, 8, 64, "WIDE", 1),      # D = 64: WIDE is that ring with the narrow loop already
    (16, 16, 32, 8, 128, "DEEP", 1),    # 64 rows: the 64-row loop keeps the deep ring
    (16, 1, 16, 8, 256, "DEEP", 1),     # D = 256: measured level, left deep
    (17, 1, 32, 8, 128, "WIDE", 1),     # 136 CTAs: more than the SMs
))
def test_shallow_ring_for_one_wave(monkeypatch, B, T, Hq, Hkv, D, config, splits):
    b = stub_backend(monkeypatch, clustered=())
    p = problem(B, T, Hq, Hkv, 32768, D, device="cuda:0")
    assert b.launch_plan(p, 0) == (Config[config], splits)
    text = b.launch_details(p)
    assert ("shallow ring for an unsplit grid of one wave" in text) == (config != "DEEP" and B < 17), text
    if config == "STREAM":
        assert text.startswith("config stream (the wide configuration's K/V ring, several CTAs per SM), shallow ring for "
                               "an unsplit grid of one wave, 64-token tiles, narrow loop"), text
    # 104 CTAs, below the share of one wave: split on the deep ring
    assert b.launch_plan(problem(13, 1, 32, 8, 32768, 128, device="cuda:0"), 0)[0] == Config.DEEP
    # fewer keys a CTA than the measured range keep the deep plan
    assert b.launch_plan(problem(B, T, Hq, Hkv, 1024, D, device="cuda:0"), 0)[0] == (Config.WIDE if B == 17 else Config.DEEP)


@pytest.mark.parametrize("B,T,S,D,config,splits", (
    (1, 1, 65536, 128, "STREAM", 16),   # 8 CTAs x 16 splits = 128, 4096 keys a split
    (1, 4, 262144, 128, "STREAM", 16),  # 16 rows
    (1, 1, 65536, 64, "WIDE", 16),      # D = 64: WIDE's ring
    (1, 1, 32768, 128, "STREAM", 16),   # 2048 keys a split: SHALLOW_RING_MIN_KEYS
    (1, 1, 16384, 128, "DEEP", 16),     # 1024 keys a split: below it
    (8, 16, 8192, 128, "DEEP", 2),      # 64 rows: the 64-row loop keeps the deep ring
    (1, 1, 65536, 256, "DEEP", 16),     # D = 256: no shallow-ring configuration
))
def test_shallow_ring_for_split_one_wave(monkeypatch, B, T, S, D, config, splits):
    """The deep plan's split grid of nearly one wave takes the shallow ring the same way (same split count)."""
    b = stub_backend(monkeypatch, clustered=())
    p = problem(B, T, 32, 8, S, D, device="cuda:0")
    assert b.launch_plan(p, 0) == (Config[config], splits)
    text = b.launch_details(p)
    assert ("shallow ring for a split grid of one wave" in text) == (config != "DEEP"), text
    if config != "DEEP":
        kind = "stream (the wide configuration's K/V ring, one CTA per SM)" if D == 128 else "wide (one CTA per SM)"
        assert text.startswith(f"config {kind}, shallow ring for a split grid of one wave"), text


def test_forced_plans_get_no_shallow_ring_note(monkeypatch):
    """launch_details describes a forced plan as it runs: the shallow-ring note only where the rule chose it,
    the stream configuration's 64-row loop where the rows exceed the narrow loop's."""
    b = stub_backend(monkeypatch, clustered=())
    small = problem(1, 1, 16, 8, 32768, 256, device="cuda:0")  # 8 CTAs
    monkeypatch.setattr(b, "launch_plan", lambda p, index: (Config.WIDE, 1))
    assert "shallow ring" not in b.launch_details(small)
    rows21 = problem(16, 3, 56, 8, 32768, 128, device="cuda:0")  # G = 7: 21 rows
    monkeypatch.setattr(b, "launch_plan", lambda p, index: (Config.STREAM, 1))
    text = b.launch_details(rows21)
    assert "shallow ring" not in text and "64-row loop" in text and text.startswith("config stream"), text


@pytest.mark.parametrize("dtype,code", ((torch.bfloat16, 1), (torch.float16, 0)))
def test_merge_query_names_the_dtype(monkeypatch, dtype, code):
    """The plan asks the merge mode of the instantiation that will run (fp16 and bf16 are separate kernels)."""
    b = stub_backend(monkeypatch, clustered={8})
    assert b.launch_plan(problem(1, 1, 32, 8, 8192, 128, device="cuda:0", dtype=dtype), 0) == (Config.DEEP, 8)
    assert b.asked and {dtype for _, dtype, _ in b.asked} == {code}


def test_workspace_only_for_the_combine_kernel(monkeypatch):
    """A launch whose splits merge inside clusters gets no workspace (none is allocated per call); one merged
    by the combine kernel gets the C API's size; an unsplit one none."""
    b = stub_backend(monkeypatch, clustered={8})
    clustered = problem(1, 1, 32, 8, 8192, 128, device="cuda:0")
    assert b._launch_constants(clustered)[3:5] == (8, 0)
    combined = problem(1, 1, 32, 8, 32768, 128, device="cuda:0")  # 2 MiB a CTA at 8 splits: the plan's 16 stay
    assert b._launch_constants(combined)[3:5] == (16, 4 * 16 * 32 * 129)
    unsplit = problem(32, 1, 32, 8, 8192, 128, device="cuda:0")
    assert b._launch_constants(unsplit)[3:5] == (1, 0)


@pytest.mark.parametrize("D", (64, 128, 256, 512))
def test_packed_tail_describes_a_contiguous_cache(monkeypatch, D):
    """block_table, block_table_stride, page_size = 0 (no paged cache), head_dim_v = D, num_blocks and
    max_blocks_per_seq = 0; the configuration field holds the Config's value."""
    import struct

    b = stub_backend(monkeypatch, clustered=())
    p = problem(2, 1, 16, 1 if D == 512 else 8, 4096, D, device="cuda:0")
    launch = b._launch_constants(p)
    assert struct.unpack("<Q5q", launch[7]) == (0, 0, 0, D, 0, 0)
    assert struct.unpack("<d3q", launch[6])[3] == int(b.launch_plan(p, 0)[0])


@pytest.mark.parametrize("T,Hq,expected", (
    (1, 128, Config.SEESAW),  # two 64-row blocks: the warpgroups take turns
    (2, 64, Config.SEESAW),
    (1, 64, Config.SPLIT_QK),  # one row block: the warpgroups split Q K^T's head dim
    (4, 16, Config.SPLIT_QK),
    (1, 16, Config.SPLIT_QK),
))
def test_d512_config_by_rows(T, Hq, expected):
    assert d512_config(problem(8, T, Hq, 1, 4096, 512)) == expected


@pytest.mark.parametrize("D", (512, 576))
@pytest.mark.parametrize("T,Hq", ((1, 16), (1, 128), (4, 16)))
def test_shared_latent_runs_a_latent_loop(D, T, Hq):
    """sm_90a: the narrow loop or the 64-key seesaw, by rows; sm_100a: its one latent kernel."""
    import dataclasses

    from fmha.cuda.backend import latent_ring

    p = dataclasses.replace(problem(8, T, Hq, 1, 4096, D), head_dim_v=512, kv_shared=True)
    assert d512_config(p, 90) == (Config.LATENT_NARROW if T * Hq <= 16 else _seesaw(D))
    assert latent_ring(p, 90) and latent_ring(p, 100)
    assert d512_config(p, 100) == Config.LATENT_SPLIT_QK
    if D == 512:
        separate = dataclasses.replace(p, kv_shared=False)  # K and V of their own: the plain kernel
        assert not latent_ring(separate, 100) and d512_config(separate, 100) in (Config.SEESAW, Config.SPLIT_QK)


@pytest.mark.parametrize("D", (512, 576))
@pytest.mark.parametrize("B,T,Hq,Hkv,sms,expected", (
    (128, 2, 16, 1, 132, Config.LATENT_NARROW),     # 32 rows, an unsplit grid of 128 CTAs on 132 SMs: N = 32
    (64, 1, 24, 1, 132, Config.LATENT_SEESAW64),    # 24 rows on 64 CTAs: the grid is split, the seesaw takes it
    (64, 3, 28, 4, 132, Config.LATENT_SEESAW64),    # 21 rows on 256 CTAs: two waves
    (128, 2, 16, 1, None, Config.LATENT_SEESAW64),  # no SM count (a split grid): the seesaw
    (300, 1, 16, 1, 132, Config.LATENT_NARROW),     # 16 rows: narrow on any grid
    (120, 4, 8, 1, 132, Config.LATENT_NARROW),      # 32 rows of four tokens, 120 of 132 SMs
    (112, 4, 8, 1, 132, Config.LATENT_SEESAW64),    # ... 112 of 132 (under LATENT_NARROW32_MIN_FILL)
    (128, 3, 16, 1, 132, Config.LATENT_SEESAW64),   # 48 rows
))
def test_latent_narrow_takes_32_rows_on_one_wave(D, B, T, Hq, Hkv, sms, expected):
    import dataclasses

    p = dataclasses.replace(problem(B, T, Hq, Hkv, 4096, D), head_dim_v=512, kv_shared=True)
    assert d512_config(p, 90, sms) == (_seesaw(D) if expected == Config.LATENT_SEESAW64 else expected)


def _seesaw(D, paged=False):
    """The 64-key seesaw's configuration the plan takes: 48-key tiles on a contiguous cache."""
    return Config.LATENT_SEESAW64 if paged else Config.LATENT_SEESAW48


@pytest.mark.parametrize("D", (512, 576))
@pytest.mark.parametrize("page_size", (None, 64, 16, 256))
def test_seesaw_tiles_of_48_keys_for_contiguous_latents(D, page_size):
    """A latent (512 or 576 wide) of more rows than the narrow loop takes runs on 48-key tiles (three ring stages)
    where the cache is contiguous, and on 64-key tiles where it is paged: a paged TMA box must divide both the page
    and the tile, and 16-row boxes stream slower."""
    import dataclasses

    if page_size is None:
        p = problem(32, 1, 64, 1, 8192, D)
    else:
        p = _paged_problem(32, 1, 64, 1, page_size, 8192 // page_size, D)
    p = dataclasses.replace(p, head_dim_v=512, kv_shared=True)
    assert d512_config(p, 90, 132) == _seesaw(D, page_size is not None)
    assert d512_config(p, 100, 132) == Config.LATENT_SPLIT_QK


@pytest.mark.parametrize("D", (512, 576))
@pytest.mark.parametrize("has_48", (True, False))
def test_library_without_48_key_tiles_runs_64(monkeypatch, D, has_48):
    """A library built without LATENT_SEESAW48 at D (its tile query answers 0), loaded to compare builds, runs the
    64-key seesaw where the plan would take the 48-key one."""
    import dataclasses

    b = stub_backend(monkeypatch, clustered=set())
    b._arch = 90
    for config, tile_n in ((Config.LATENT_SEESAW64, 64), (Config.LATENT_SEESAW48, 48 if has_48 else 0),
                           (Config.LATENT_NARROW, 32), (Config.LATENT_SPLIT_QK, 32)):
        key = (D, config)
        narrow_rows = 32 if config == Config.LATENT_NARROW else 0
        b._tile_n[key], b._ctas_per_sm[key], b._narrow_rows[key] = tile_n, 1, narrow_rows
    p = dataclasses.replace(problem(64, 1, 128, 1, 4096, D, device="cuda:0"), head_dim_v=512, kv_shared=True)
    want = Config.LATENT_SEESAW48 if has_48 else Config.LATENT_SEESAW64
    assert b.launch_plan(p, 0) == (want, 1)


@pytest.mark.parametrize("Hq,answer", ((128, 1), (128, 0), (64, 0)))
def test_explain_says_row_block_pairs_as_the_library_answers(monkeypatch, Hq, answer):
    """explain's row-block pair clause is the library's answer (fmha_row_block_pairs, which also knows a build
    with the pairs disabled and a device that holds no cluster of two), asked with the launch's row blocks,
    splits and CTAs."""
    import dataclasses

    b = stub_backend(monkeypatch, clustered=set())
    key = (576, Config.LATENT_SEESAW64)  # (the stub's table stops at D = 512)
    b._tile_n[key], b._ctas_per_sm[key], b._narrow_rows[key] = 64, 1, 0
    asked = []
    b._row_block_pairs = lambda D, config, splits, row_blocks, ctas: asked.append(
        (D, config, splits, row_blocks, ctas)) or answer
    p = dataclasses.replace(problem(64, 1, Hq, 1, 4096, 576, device="cuda:0"), head_dim_v=512, kv_shared=True)
    monkeypatch.setattr(b, "launch_plan", lambda p, index: (Config.LATENT_SEESAW64, 1))
    text = b.launch_details(p)
    assert ("launched in clusters of 2" in text) == (answer == 1), text
    row_blocks = Hq // 64
    assert asked == [(576, Config.LATENT_SEESAW64, 1, row_blocks, 64 * row_blocks)]


@pytest.mark.parametrize("ctas,S,block_n,plain,one_wave", (
    (30, 8192, 32, 13, 4),   # 390 CTAs in three waves -> 120 in one
    (48, 4096, 32, 8, 2),    # 384 in three -> 96 in one
    (40, 8192, 128, 13, 3),  # 520 in four -> 120 in one
    (96, 4096, 32, 4, 4),    # no two splits fit one wave: unchanged
    (8, 65536, 128, 16, 16),  # already one wave: unchanged
    (1, 8192, 128, 22, 22),   # one wave (31 splits of 64 tiles, rebalanced to 22 of 3): unchanged
    (30, 129, 32, 2, 2),      # two tiles a split at most: limited either way
    (30, 60, 32, 1, 1),       # too few tiles to split
    (120, 8192, 32, 1, 1),    # most of one wave: unsplit
))
def test_choose_num_splits_one_wave(ctas, S, block_n, plain, one_wave):
    """The CUDA plan's rule (one_wave=True): where the plain rule's count runs several waves and two or more
    splits fit one, the most that fit (rebalanced so that no split is empty); the plain rule unchanged."""
    from fmha.splits import choose_num_splits

    assert choose_num_splits(ctas, S, block_n, 132) == plain
    got = choose_num_splits(ctas, S, block_n, 132, one_wave=True)
    assert got == one_wave
    assert ctas * got <= 132 or got == plain


@pytest.mark.parametrize("B,T,Hq,S,expected,splits", (
    (2, 1, 128, 4096, "SEESAW", 32),     # 4 CTAs (two row blocks a sequence): split
    (64, 1, 128, 4096, "SEESAW", 1),     # 128 CTAs: most of one wave, unsplit
    (128, 1, 128, 4096, "SEESAW", 1),    # more CTAs than SMs: unsplit
    (1, 1, 16, 65536, "SPLIT_QK", 61),   # one CTA: split to fill the SMs
    (8, 4, 16, 4096, "SPLIT_QK", 16),    # 64 rows: one block
    (256, 1, 16, 4096, "SPLIT_QK", 1),   # more CTAs than SMs: unsplit
    (30, 1, 64, 8192, "SPLIT_QK", 4),    # 30 CTAs: the most splits of one wave, not 13 in three waves
))
def test_d512_plan(monkeypatch, B, T, Hq, S, expected, splits):
    """D = 512 is planned as before the configurations were named: the split count of its one-CTA-per-SM
    configuration (32-token tiles), never the combine-or-cluster rule of D = 128 / 256, and the configuration
    of its row count; the C API is only ever asked about D = 512's own configurations."""
    b = stub_backend(monkeypatch, clustered=set(range(2, 17)))
    p = problem(B, T, Hq, 1, S, 512, device="cuda:0")
    ctas = B * -(-T * Hq // 64)
    want = 1 if ctas > 132 else cb.choose_num_splits(ctas, S, 32, 132, one_wave=True)
    assert want == splits
    assert b.launch_plan(p, 0) == (Config[expected], splits)
    text = b.launch_details(p)
    loop = "seesaw loop" if expected == "SEESAW" else "split-QK loop"
    assert text.startswith(f"config {expected.lower()} (two consumer warpgroups") and loop in text, text
    assert all(D == 512 and config in (Config.SEESAW, Config.SPLIT_QK) for D, _, config in b.asked), b.asked


@pytest.mark.parametrize("B,T,Hq,Hkv,adjacent,expected", (
    (32, 1, 32, 8, True, "KV_HEAD_PAIRS"),    # 128 pairs: one wave
    (31, 1, 32, 8, True, "KV_HEAD_PAIRS"),    # 124 pairs
    (33, 1, 32, 8, True, "KV_HEAD_PAIRS"),    # 132 pairs: every SM
    (32, 1, 64, 8, True, "KV_HEAD_PAIRS"),    # 8 rows a head, 16 a pair: the narrow loop's most
    (32, 2, 64, 8, True, "WIDE"),     # 32 rows a pair: too many
    (34, 1, 32, 8, True, "KV_HEAD_PAIRS"),    # 136 pairs: more than the SMs, two CTAs on some
    (128, 1, 32, 8, True, "KV_HEAD_PAIRS"),   # 512 pairs
    (26, 1, 32, 8, True, "WIDE"),     # 104 pairs < 0.8 x 132
    (32, 1, 32, 8, False, "WIDE"),    # heads not side by side (a [B, Hkv, S, D] cache viewed as bshd)
    (43, 1, 18, 6, True, "KV_HEAD_PAIRS"),    # Hkv = 6: 3 pairs a sequence, 129 in all
    (44, 1, 27, 9, True, "WIDE"),     # odd Hkv
))
def test_head_pairs_plan(monkeypatch, B, T, Hq, Hkv, adjacent, expected):
    import dataclasses

    b = stub_backend(monkeypatch, clustered=())
    p = dataclasses.replace(problem(B, T, Hq, Hkv, 8192, 64, device="cuda:0"), kv_heads_adjacent=adjacent)
    assert b.launch_plan(p, 0) == (Config[expected], 1)
    if expected == "KV_HEAD_PAIRS":
        assert "KV-head pairs" in b.launch_details(p) and f"{B * Hkv // 2} CTAs" in b.launch_details(p)
    assert b.launch_plan(dataclasses.replace(p, head_dim=128, head_dim_v=128), 0)[0] != Config.KV_HEAD_PAIRS  # D = 64 only


def _paged_problem(B, T, Hq, Hkv, page_size, max_blocks, D, num_blocks=1000, adjacent=True):
    import dataclasses

    return dataclasses.replace(problem(B, T, Hq, Hkv, page_size * max_blocks, D, device="cuda:0"),
                               kv_heads_adjacent=adjacent, page_size=page_size, num_blocks=num_blocks,
                               max_blocks_per_seq=max_blocks)


@pytest.mark.parametrize("B,T,Hq,Hkv,D,page_size,max_blocks", (
    (1, 1, 32, 8, 128, 64, 128),    # split, merged in clusters
    (1, 1, 32, 8, 64, 13, 2521),    # capacity 32773: not a multiple of the tile (gathered)
    (16, 1, 32, 8, 128, 64, 512),   # the shallow ring
    (32, 1, 28, 7, 64, 1, 8192),    # more CTAs than SMs: wide (gathered; an odd Hkv: no pairs)
    (2, 1, 128, 1, 512, 256, 16),   # D = 512
    (2, 1, 128, 1, 512, 16, 256),   # D = 512 gathered
))
def test_paged_plan_is_the_contiguous_plan_of_the_capacity(monkeypatch, B, T, Hq, Hkv, D, page_size, max_blocks):
    import dataclasses

    b = stub_backend(monkeypatch, clustered={8})
    p = _paged_problem(B, T, Hq, Hkv, page_size, max_blocks, D)
    flat = dataclasses.replace(p, page_size=None, num_blocks=None, max_blocks_per_seq=None)
    assert p.seqlen_k == page_size * max_blocks and p.has_block_table and not flat.has_block_table
    assert b.launch_plan(p, 0) == b.launch_plan(flat, 0)
    text = b.launch_details(p)
    assert text.startswith(b.launch_details(flat)) and f"; paged ({page_size}-token pages): " in text, text
    gathers = b._paged_gather(D, b.launch_plan(p, 0)[0], page_size, B * Hkv * b.launch_plan(p, 0)[1])
    assert ("the producer warps gather" if gathers else "TMA boxes inside each page") in text, text


@pytest.mark.parametrize("B,page_size,max_blocks", ((1, 16, 4096), (1, 13, 5042), (16, 1, 8192), (64, 24, 342),
                                                     (64, 64, 128), (128, 256, 32)))
def test_gathered_d128_pages_run_deep(monkeypatch, B, page_size, max_blocks):
    """D = 128 pages on the gather path run DEEP (four gathering warps a CTA) where the contiguous plan of the
    capacity takes WIDE or the shallow ring (the split count follows the gather's merge, see
    test_gathered_pages_merge_by_kernel); so do pages TMA could serve when the grid outnumbers the SMs (by more
    than STREAM holds at once), which the C API then gathers."""
    import dataclasses

    b = stub_backend(monkeypatch, clustered={8})
    p = _paged_problem(B, 1, 32, 8, page_size, max_blocks, 128)
    flat = dataclasses.replace(p, page_size=None, num_blocks=None, max_blocks_per_seq=None)
    assert b.launch_plan(flat, 0)[0] != Config.DEEP
    assert b.launch_plan(p, 0)[0] == Config.DEEP
    assert "the producer warps gather" in b.launch_details(p)


@pytest.mark.parametrize("B,T,Hq,page_size,expected", (
    (32, 4, 32, 64, "STREAM"),   # 256 CTAs of 16 rows: one wave of STREAM (2 CTAs per SM)
    (32, 4, 32, 16, "STREAM"),   # gathered pages too (STREAM's two gathering warps)
    (32, 1, 32, 1, "STREAM"),
    (33, 1, 32, 256, "STREAM"),  # 264 CTAs: every slot
    (34, 1, 32, 64, "DEEP"),     # 272 CTAs: more than one wave
    (32, 8, 32, 64, "DEEP"),     # 32 rows: beyond the narrow loop
))
def test_paged_narrow_grids_of_one_stream_wave_run_stream(monkeypatch, B, T, Hq, page_size, expected):
    """Paged D = 128 grids of more CTAs than SMs, at most the narrow loop's rows and at most the CTAs STREAM holds
    at once, run STREAM at every page size (else DEEP, which gathers them); an sm_100a library keeps its plan."""
    b = stub_backend(monkeypatch, clustered={8})
    p = _paged_problem(B, T, Hq, 8, page_size, 4096 // page_size, 128)
    assert b.launch_plan(p, 0) == (Config[expected], 1)
    assert b.launch_details(p).startswith(f"config {expected.lower()} ("), b.launch_details(p)
    b._arch = 100
    assert b.launch_plan(p, 0)[0] != Config.STREAM


@pytest.mark.parametrize("page_size,max_blocks,expected", ((16, 512, "WIDE_GATHER"), (1, 8192, "WIDE_GATHER"),
                                                           (13, 631, "WIDE_GATHER"), (64, 128, "WIDE")))
def test_gathered_d64_wide_runs_wide_gather(monkeypatch, page_size, max_blocks, expected):
    """A D = 64 launch the plan gives WIDE runs WIDE_GATHER (four gathering warps) where it gathers, on sm_90a;
    pages TMA serves keep WIDE, and so does an sm_100a library (no such kernel there)."""
    import dataclasses

    b = stub_backend(monkeypatch, clustered={8})
    b._arch = 90
    p = _paged_problem(32, 1, 32, 8, page_size, max_blocks, 64, adjacent=False)
    flat = dataclasses.replace(p, page_size=None, num_blocks=None, max_blocks_per_seq=None)
    assert b.launch_plan(flat, 0)[0] == Config.WIDE
    assert b.launch_plan(p, 0) == (Config[expected], 1)
    text = b.launch_details(p)
    assert text.startswith(f"config {expected.lower()} ("), text
    assert ("the producer warps gather" if expected == "WIDE_GATHER" else "TMA boxes inside each page") in text, text
    b._arch = 100
    assert b.launch_plan(p, 0)[0] == Config.WIDE


def test_sm100_paged_plan_keeps_the_contiguous_plan(monkeypatch):
    """The DEEP rule for paged D = 128 is sm_90a's (four gathering warps): an sm_100a library plans a paged
    problem as the contiguous one of its capacity."""
    import dataclasses

    b = stub_backend(monkeypatch, clustered={8})
    b._arch = 100
    for B, page_size, max_blocks in ((128, 64, 128), (16, 1, 8192)):
        p = _paged_problem(B, 1, 32, 8, page_size, max_blocks, 128)
        flat = dataclasses.replace(p, page_size=None, num_blocks=None, max_blocks_per_seq=None)
        assert b.launch_plan(p, 0)[0] == b.launch_plan(flat, 0)[0] != Config.DEEP


@pytest.mark.parametrize("B,Hq,Hkv", ((32, 32, 8), (128, 32, 8), (43, 18, 6)))
@pytest.mark.parametrize("page_size", (64, 256, 96, 16, 1))
def test_paged_problems_run_as_head_pairs_through_tma(monkeypatch, B, Hq, Hkv, page_size):
    """A paged D = 64 grid the pairs rule takes runs as KV-head pairs where its pages are TMA boxes; gathered
    pages run as single heads (WIDE_GATHER's four gathering warps)."""
    import dataclasses

    b = stub_backend(monkeypatch, clustered=())
    b._arch = 90
    p = _paged_problem(B, 1, Hq, Hkv, page_size, 8192 // page_size, 64)
    flat = dataclasses.replace(p, page_size=None, num_blocks=None, max_blocks_per_seq=None)
    assert b.launch_plan(flat, 0) == (Config.KV_HEAD_PAIRS, 1)
    if page_size % 32 == 0:
        assert b.launch_plan(p, 0) == (Config.KV_HEAD_PAIRS, 1)
        assert "KV-head pairs" in b.launch_details(p) and "TMA boxes inside each page" in b.launch_details(p)
    else:
        assert b.launch_plan(p, 0) == (Config.WIDE_GATHER, 1) and "KV-head pairs" not in b.launch_details(p)


def test_packed_tail_describes_a_paged_cache(monkeypatch):
    """page_size, head_dim_v, num_blocks, max_blocks_per_seq precomputed; the table's pointer and row stride
    (0 until a call packs them) per call."""
    import struct

    b = stub_backend(monkeypatch, clustered=())
    p = _paged_problem(2, 1, 16, 8, 16, 300, 128, num_blocks=777)
    assert struct.unpack("<Q5q", b._launch_constants(p)[7]) == (0, 0, 16, 128, 777, 300)


@pytest.mark.parametrize("layout", ("separate", "stacked", "interleaved", "head_major"))
@pytest.mark.parametrize("B", (1, 33))
def test_run_packs_the_paged_call(monkeypatch, layout, B):
    """What run hands the C API for a paged call: the pools' own pointers and (page, token, head) strides, the
    table's pointer and row stride (max_blocks_per_seq for one sequence, whatever its stride), S = the capacity;
    a later contiguous call sends no table."""
    import ctypes
    import dataclasses

    from _util import make_inputs, make_paged
    from fmha.problem import validate

    b = stub_backend(monkeypatch, clustered=())
    b._multi_gpu = False
    monkeypatch.setattr(cb, "_current_stream", lambda index: 0)
    sent = []

    def fn(address):
        sent.append(cb._PACKED.unpack(ctypes.string_at(address, cb._PACKED.size)))
        return 0

    b._fn = fn
    q, k, v, sl = make_inputs(B, 1, 32, 8, 40, 64, seqlens=[40] * B)
    kp, vp, bt = make_paged(k, v, 16, sl, layout=layout, table_pad=3)
    out, lse = torch.empty_like(q), torch.empty(B, 32, 1)
    p = dataclasses.replace(validate(q, kp, vp, sl, block_table=bt), device=torch.device("cuda:0"))
    b.run(p, q, kp, vp, sl, out, lse, block_table=bt)
    a = sent[-1]
    assert a[1:3] == (kp.data_ptr(), vp.data_ptr()) and a[5] == sl.data_ptr()
    assert a[6:13] == (B, 1, 32, 8, 48, 64, 1)  # S = 3 pages of 16
    assert a[16:19] == kp.stride()[:3] and a[19:22] == vp.stride()[:3]
    assert a[32:] == (bt.data_ptr(), 6 if B > 1 else 3, 16, 64, kp.shape[0], 3, 0, 0)  # no sinks, not balanced
    assert int(b.launch_plan(p, 0)[0]) == a[28] != int(Config.KV_HEAD_PAIRS)
    with pytest.raises(ValueError, match="block_table"):
        b.run(p, q, kp, vp, sl, out, lse)  # a paged problem without its table
    flat = dataclasses.replace(validate(q, k, v, sl), device=torch.device("cuda:0"))
    b.run(flat, q, k, v, sl, out, lse)
    assert sent[-1][32:] == (0, 0, 0, 64, 0, 0, 0, 0)


@pytest.mark.parametrize("answer", (0, 1, 2))
def test_sinks_keep_the_dealt_rows_merge_but_not_the_pair_merge(monkeypatch, answer):
    """With sinks, a launch merges in clusters of dealt rows as without them (the merge adds the sinks, as the
    combine kernel does), but never as a pair (store_output_pair has no sinks): the plan sees mode 0 there."""
    import dataclasses

    b = stub_backend(monkeypatch, clustered=())
    b._cluster_merge = lambda D, dtype, config, splits, clusters, rows: answer
    p = problem(1, 1, 32, 8, 8192, 128, device="cuda:0")
    assert b._merge_modes(p, 0, Config.DEEP)(8) == answer
    assert b._merge_modes(dataclasses.replace(p, has_sinks=True), 0, Config.DEEP)(8) == (0 if answer == 2 else answer)


@pytest.mark.parametrize("page_size, clustered", ((13, 0), (1, 0), (16, 0), (32, 1), (64, 1)))
def test_gathered_pages_merge_by_kernel(monkeypatch, page_size, clustered):
    """Pages that are no multiple of 32 tokens take the gather path, whose launches merge split partials by
    kernel (the C API never merges them in the ring-backed cluster buffer), so the plan sees merge mode 0
    and run allocates the combine kernel's workspace."""
    b = stub_backend(monkeypatch, clustered={8})
    p = _paged_problem(1, 1, 32, 8, page_size, 8192 // page_size + 1, 128)
    assert b._merge_modes(p, 0, Config.DEEP)(8) == clustered


def test_older_library_answers_the_gather_rule_of_its_time():
    """tools/variants.py --lib: a library from before fmha_paged_gather gathered pages of no multiple of 8
    tokens, which is what the plan must believe of it (its merge modes and workspace follow)."""
    from tools._cuda import _OlderLibrary

    old = _OlderLibrary(object())  # a library without the entry point
    assert [old.fmha_paged_gather(128, 1, page, 0) for page in (1, 13, 16, 64)] == [1, 1, 0, 0]


def _latent_narrow_backend(monkeypatch):
    """stub_backend with the shared latent's configurations at D = 512 and 576 and a library that has the balanced
    schedule (its workspace: 7 B T Hq Hkv Dv splits bytes)."""
    b = stub_backend(monkeypatch, clustered=set())
    b._arch = 90
    latent = {Config.LATENT_NARROW: (64, 1, 32), Config.LATENT_SPLIT_QK: (32, 1, 0), Config.LATENT_SEESAW64: (64, 1, 0)}
    shapes = {(D, c): shape for D in (512, 576) for c, shape in latent.items()}
    shapes[(512, Config.LATENT_SEESAW48)] = (48, 1, 0)
    for key, shape in shapes.items():  # (576 keys added: the stub's table stops at D = 512)
        b._tile_n[key], b._ctas_per_sm[key], b._narrow_rows[key] = shape
    b._row_block_pairs = lambda *args: 0
    b._balanced_ws_bytes = lambda B, T, Hq, Hkv, Dv, splits: 7 * B * T * Hq * Hkv * Dv * splits

    # as fmha_balanced_deals on sm_90a (tests/test_cuda_build.py asks the library itself)
    def balanced_deals(D, config, B, Hq, Hkv, S, page_size, ctas):
        b.asked_deals.append((D, config, B, Hq, Hkv, S, page_size, ctas))
        gather = page_size > 0 and b._paged_gather(D, config, page_size, ctas) == 1
        G, rows = Hq // Hkv, b._narrow_rows[(D, config)] or 64  # (the seesaw's Q box: a 64-row block)
        return int(config in (Config.LATENT_NARROW, *cb.SEESAW64_LOOP) and not gather
                   and (G % rows == 0 or rows % G == 0) and B <= 4096
                   and B * Hkv * (-(-S // 64) + 1) + ctas < 2 ** 31 - 1)

    b.asked_deals = []
    b._balanced_deals = balanced_deals
    return b


@pytest.mark.parametrize("B,seqlens,env,balanced", (
    (128, True, "balanced", True),   # one CTA a sequence fills the SMs: unsplit, the tiles dealt by cache length
    (128, True, None, False),        # the default (auto): static where the grid is one wave
    (128, True, "auto", False),
    (160, True, None, True),         # ... balanced where it is more (a ragged second wave)
    (160, True, "static", False),
    (160, False, None, False),       # every sequence S long: nothing to balance
    (96, True, None, True),          # a split plan of several waves (96 CTAs x 4)
    (40, True, None, False),         # ... not one of one wave (40 x 3)
    (128, True, "static", False),
    (128, False, "balanced", False),  # every sequence S long: nothing to balance
    (4, True, "balanced", True),      # a split grid: its splits' CTAs share the tiles alike
))
def test_balanced_schedule_for_latent_narrow_launches(monkeypatch, B, seqlens, env, balanced):
    """The balanced schedule is asked for (FmhaDecodeArgs::balanced) where FMHA_CUDA_SCHEDULE says so, or by default
    where the static grid, splits included, exceeds the SMs, and the latent narrow loop runs with cache lengths,
    split or not, with the library's workspace for its pieces; explain says so."""
    import dataclasses
    import struct

    if env is None:
        monkeypatch.delenv(cb.SCHEDULE_ENV, raising=False)
    else:
        monkeypatch.setenv(cb.SCHEDULE_ENV, env)
    b = _latent_narrow_backend(monkeypatch)
    p = dataclasses.replace(problem(B, 1, 16, 1, 4096, 576, device="cuda:0"), head_dim_v=512, kv_shared=True,
                            has_cache_seqlens=seqlens)
    config, splits = b.launch_plan(p, 0)
    assert config == Config.LATENT_NARROW and (splits == 1) == (B >= 128)
    launch = b._launch_constants(p)
    assert launch[-1] == balanced
    if balanced:
        assert launch[4] == 7 * B * 16 * 512 * splits
        # the grid launched: at most the CTAs the SMs hold (one each here), not the static plan's B x splits
        assert f"dealt over {min(B * splits, 132)} CTAs in equal shares" in b.launch_details(p)
    assert ("balanced schedule" in b.launch_details(p)) == balanced
    assert struct.unpack("<d3q", launch[6])[2] == splits
    b._balanced_ws_bytes = None  # a library older than the schedule: neither asked for nor described
    b._launches.clear()
    assert b._launch_constants(p)[-1] is False and "balanced schedule" not in b.launch_details(p)


@pytest.mark.parametrize("B,T,Hq,env,balanced", (
    (64, 1, 128, "balanced", True),   # asked for: the 64-key seesaw's units dealt by cache length
    (64, 1, 128, None, False),        # auto: static within one wave of 132 SMs (128 CTAs) ...
    (67, 1, 128, None, True),         # ... balanced just past it (134 CTAs, up to PAST_WAVE_MAX_FILL waves) ...
    (85, 1, 128, None, True),
    (86, 1, 128, None, False),        # ... and static past that (172 CTAs)
    (160, 1, 128, None, False),
    (64, 1, 64, "static", False),
    (64, 1, 28, "balanced", False),   # 28 heads: no Q box, static (fmha_balanced_deals)
    (1, 511, 128, "balanced", True),  # 65408 packed rows ...
    (1, 512, 128, "balanced", False),  # ... 65536, past its combine's grid (BALANCED_MAX_ROWS): static
))
@pytest.mark.parametrize("D,config", ((576, Config.LATENT_SEESAW64), (512, Config.LATENT_SEESAW48)))
def test_balanced_schedule_for_latent_seesaw64_launches(monkeypatch, B, T, Hq, env, balanced, D, config):
    """The 64-key seesaw (on 64- and 48-key tiles) takes the balanced schedule where FMHA_CUDA_SCHEDULE=balanced
    asks for it, or by default where its grid is just past one wave, and the launch deals the tiles; never past
    BALANCED_MAX_ROWS rows."""
    import dataclasses

    if env is None:
        monkeypatch.delenv(cb.SCHEDULE_ENV, raising=False)
    else:
        monkeypatch.setenv(cb.SCHEDULE_ENV, env)
    b = _latent_narrow_backend(monkeypatch)
    monkeypatch.setattr(b, "launch_plan", lambda p, index: (config, 1))
    p = dataclasses.replace(problem(B, T, Hq, 1, 4096, D, device="cuda:0"), head_dim_v=512, kv_shared=True,
                            has_cache_seqlens=True)
    assert b._launch_constants(p)[-1] == balanced
    assert ("balanced schedule" in b.launch_details(p)) == balanced
    if balanced:  # whole row blocks of the CTAs the SMs hold, one at least: B67 Hq128 134 -> 132; B1 T511 1022
        row_blocks = -(-T * Hq // 64)
        ctas = row_blocks * min(B, max(1, 132 // row_blocks))
        assert f"dealt over {ctas} CTAs in equal shares" in b.launch_details(p)


@pytest.mark.parametrize("B,Hq,page_size,balanced", (
    (160, 16, 64, True), (160, 16, 16, False), (4097, 16, None, False), (160, 12, None, False), (160, 8, None, True)))
def test_balanced_schedule_only_where_the_launch_deals_the_tiles(monkeypatch, B, Hq, page_size, balanced):
    """Where the C API would run the static schedule anyway (fmha_balanced_deals: pages its producer warps gather,
    more sequences than it deals, a Q box that does not fit the heads of a KV head), the launch does not ask for the
    balanced one and explain does not claim it."""
    import dataclasses

    monkeypatch.delenv(cb.SCHEDULE_ENV, raising=False)
    b = _latent_narrow_backend(monkeypatch)
    p = dataclasses.replace(problem(B, 1, Hq, 1, 4096, 576, device="cuda:0"), head_dim_v=512, kv_shared=True,
                            has_cache_seqlens=True)
    if page_size is not None:
        p = dataclasses.replace(p, page_size=page_size, num_blocks=B * 4096 // page_size,
                                max_blocks_per_seq=4096 // page_size)
    assert b._launch_constants(p)[-1] == balanced
    assert b.asked_deals[0] == (576, Config.LATENT_NARROW, B, Hq, 1, 4096, page_size or 0, B)  # (unsplit: B CTAs)
    assert ("balanced schedule" in b.launch_details(p)) == balanced


def test_schedule_env_refuses_an_unknown_schedule(monkeypatch):
    monkeypatch.setenv(cb.SCHEDULE_ENV, "fair")
    with pytest.raises(ValueError, match=r"FMHA_CUDA_SCHEDULE: got 'fair'; allowed: auto, static, balanced"):
        cb.schedule_env()


def test_explain_says_the_schedule_a_call_shape_was_planned_with(monkeypatch):
    """run() keeps the schedule FMHA_CUDA_SCHEDULE gave when a call shape was first planned: explain reports that
    one after the variable changes, and the current value for a shape not planned yet."""
    import dataclasses

    b = stub_backend(monkeypatch, clustered=set())
    key = (576, Config.LATENT_NARROW)
    b._tile_n[key], b._ctas_per_sm[key], b._narrow_rows[key] = 64, 1, 32
    monkeypatch.setattr(b, "_arch", 90)
    monkeypatch.setattr(b, "_balanced_ws_bytes", lambda *args: 1 << 20)
    monkeypatch.setattr(b, "_balanced_deals", None)
    monkeypatch.setattr(b, "launch_plan", lambda p, index: (Config.LATENT_NARROW, 1))
    p = dataclasses.replace(problem(160, 1, 16, 1, 4096, 576, device="cuda:0"), head_dim_v=512, kv_shared=True,
                            has_cache_seqlens=True)
    monkeypatch.setenv("FMHA_CUDA_SCHEDULE", "static")
    assert b._launch_constants(p)[-1] is False  # what a first call plans and run() keeps
    monkeypatch.setenv("FMHA_CUDA_SCHEDULE", "balanced")
    assert "balanced schedule" not in b.launch_details(p)
    assert "balanced schedule" in b.launch_details(dataclasses.replace(p))  # (an equal shape, not planned yet)


@pytest.mark.parametrize("D", (512, 576))
@pytest.mark.parametrize("B,T,Hq,S,expected", (
    (66, 1, 128, 4096, (Config.LATENT_SEESAW64, 1)),   # 132 CTAs: one wave
    (67, 1, 128, 4096, (Config.LATENT_SEESAW64, 3)),   # 134: just past it
    (85, 1, 128, 4096, (Config.LATENT_SEESAW64, 3)),   # 170: up to 1.3 waves
    (86, 1, 128, 4096, (Config.LATENT_SEESAW64, 1)),   # 172: past them
    (67, 1, 128, 2048, (Config.LATENT_SEESAW64, 1)),   # 32 tiles a CTA: too short to gain
    (67, 1, 128, 4032, (Config.LATENT_SEESAW64, 1)),   # 63 tiles a CTA
    (67, 1, 128, 4033, (Config.LATENT_SEESAW64, 3)),   # 64, the last of one key
    (66, 2, 64, 4096, (Config.LATENT_SEESAW64, 1)),    # 132 CTAs of 128 rows each: one wave
    (166, 1, 64, 8192, (Config.LATENT_SEESAW64, 3)),   # 166 CTAs of 128 tiles
    (140, 1, 16, 4096, (Config.LATENT_NARROW, 1)),     # the narrow loop deals such grids itself (balanced)
))
def test_latent_seesaw64_grids_past_one_wave_split(monkeypatch, D, B, T, Hq, S, expected):
    import dataclasses

    b = stub_backend(monkeypatch, clustered=set())
    b._arch = 90
    for config, tile_n in ((Config.LATENT_SEESAW64, 64), (Config.LATENT_SEESAW48, 48), (Config.LATENT_NARROW, 32),
                           (Config.LATENT_SPLIT_QK, 32)):
        key = (D, config)
        b._tile_n[key], b._ctas_per_sm[key], b._narrow_rows[key] = tile_n, 1, 32 if config == Config.LATENT_NARROW else 0
    p = dataclasses.replace(problem(B, T, Hq, 1, S, D, device="cuda:0"), head_dim_v=512, kv_shared=True)
    if expected[0] == Config.LATENT_SEESAW64:  # (48-key tiles at 512: the split rule counts 64-key tiles all the same)
        expected = (_seesaw(D), expected[1])
    assert b.launch_plan(p, 0) == expected
    b._arch = 100  # sm_100a's one latent kernel keeps such grids whole
    assert b.launch_plan(p, 0)[1] == 1
