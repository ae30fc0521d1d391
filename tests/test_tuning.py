"""fmha.tuning.lookup: the measured entry nearest to a problem decides `auto` (a stub table; no GPU)."""
from __future__ import annotations

import glob
import json
import os

from _util import make_problem

from fmha import tuning


def entry(B, T, Hq, Hkv, S, D, cuda, triton):
    return {"B": B, "T": T, "G": Hq // Hkv, "S": S, "D": D, "Hq": Hq, "Hkv": Hkv,
            "median_us": {"cuda": cuda, "triton": triton}}


TABLE = {"path": "tuning/stub.json", "entries": [
    entry(1, 1, 32, 8, 8192, 128, cuda=13.1, triton=13.7),   # serving shape: cuda faster
    entry(1, 1, 8, 1, 8192, 128, cuda=9.3, triton=9.0),      # one KV head (a tensor-parallel shard): triton
    entry(32, 1, 16, 8, 8192, 256, cuda=467.5, triton=470.1),
]}


def problem(B, T, Hq, Hkv, S, D):
    return make_problem(B, T, Hq, Hkv, S, D, device="cuda:0")


def test_nearest_entry_by_grid(monkeypatch):
    monkeypatch.setattr(tuning, "load_table", lambda index: TABLE)
    both = ["cuda", "triton"]
    assert tuning.lookup(problem(1, 1, 32, 8, 8192, 128), both)[0] == "cuda"
    # two KV heads: the grid (2 units) and group size are nearer the one-KV-head entry
    assert tuning.lookup(problem(1, 1, 16, 2, 16384, 128), both)[0] == "triton"
    # without the grid term the serving entry (same B x S, T and G) would be the nearest
    assert tuning.lookup(problem(1, 1, 4, 1, 8192, 128), both)[0] == "triton"
    name, note, close = tuning.lookup(problem(1, 1, 8, 1, 8192, 128), both)
    assert name == "triton" and "B=1 T=1 G=8 Hkv=1 S=8192 D=128" in note and "tuning/stub.json" in note
    assert not close and "triton 9.00 us vs cuda 9.30 us, 3.3% apart" in note, note
    assert tuning.lookup(problem(1, 1, 8, 1, 8192, 128), ["cuda"])[0] == "cuda"  # only the usable ones
    assert tuning.lookup(problem(1, 1, 8, 1, 8192, 64), both) is None  # no entry of that head dim


def test_no_pick_for_problems_of_another_kind_than_the_table(monkeypatch):
    """The table times contiguous caches with a V of its own: a paged problem (where the Triton kernel loses far
    more than cuda) or a latent read once gets no pick from it, and auto falls back to its rules."""
    import dataclasses
    monkeypatch.setattr(tuning, "load_table", lambda index: TABLE)
    both = ["cuda", "triton"]
    p = problem(1, 1, 8, 1, 8192, 128)
    assert tuning.lookup(p, both)[0] == "triton"
    assert tuning.lookup(dataclasses.replace(p, page_size=16, num_blocks=512, max_blocks_per_seq=512), both) is None
    assert tuning.lookup(dataclasses.replace(p, kv_shared=True), both) is None


EAGER = {"cuda": 10.0, "triton": 40.0}
NOISY = {"path": "tuning/stub.json", "entries": [
    entry(1, 1, 32, 8, 65536, 128, cuda=75.6, triton=70.5),  # 7% apart: a real difference
    entry(4, 1, 32, 8, 128, 128, cuda=4.284, triton=4.276),  # 0.2% apart: noise
    entry(16, 1, 16, 1, 4096, 512, cuda=47.0, triton=46.2),  # 1.7%: still noise
]}


def test_within_noise_takes_the_lower_eager_cost(monkeypatch):
    monkeypatch.setattr(tuning, "load_table", lambda index: NOISY)
    both = ["cuda", "triton"]
    pick = tuning.lookup(problem(1, 1, 32, 8, 65536, 128), both, EAGER)
    assert pick.backend == "triton" and not pick.within_noise
    assert "triton 70.5 us vs cuda 75.6 us, 7.2% apart" in pick.note, pick.note
    for p in (problem(4, 1, 32, 8, 128, 128), problem(16, 1, 16, 1, 4096, 512)):
        pick = tuning.lookup(p, both, EAGER)
        assert pick.backend == "cuda" and pick.within_noise, pick
        assert "within noise" in pick.note and "took cuda for its lower per-call cost" in pick.note, pick.note
    pick = tuning.lookup(problem(4, 1, 32, 8, 128, 128), both, EAGER)
    assert "cuda 4.28 us vs triton 4.28 us, 0.2% apart, under the 2.0% noise margin" in pick.note, pick.note
    # without per-call costs the table's fastest stands
    assert tuning.lookup(problem(4, 1, 32, 8, 128, 128), both).backend == "triton"


def test_explain_says_how_close_the_table_was(monkeypatch):
    """The decision fmha.explain prints for a GPU problem (availability stubbed: no GPU needed) names both
    times and how far apart they are."""
    from fmha import dispatch
    from fmha.dispatch import forget_decisions

    monkeypatch.setattr(tuning, "load_table", lambda index: NOISY)
    monkeypatch.setattr(dispatch, "why_not", lambda name, p: None)
    forget_decisions()
    try:
        d = dispatch.decide(problem(4, 1, 32, 8, 128, 128))
        assert (d.backend, d.source, d.within_noise) == ("cuda", "table", True)
        assert "within noise" in str(d) and "lower per-call cost" in str(d)
        d = dispatch.decide(problem(1, 1, 32, 8, 65536, 128))
        assert (d.backend, d.within_noise) == ("triton", False) and "7.2% apart" in str(d)
    finally:
        forget_decisions()


def test_every_shipped_table_is_found_by_its_gpu_name_and_reads(monkeypatch):
    """Each fmha/tuning/*.json is named after its GPU as load_table looks it up (a misnamed table would never
    load), and its entries have the fields lookup reads, with a time for at least one backend."""
    paths = sorted(glob.glob(os.path.join(tuning.TABLE_DIR, "*.json")))
    assert any(os.path.basename(p) == "nvidia-h200.json" for p in paths), paths
    for path in paths:
        with open(path) as f:
            table = json.load(f)
        assert os.path.basename(path) == tuning.gpu_key(table["gpu"]) + ".json", (path, table["gpu"])
        assert table["entries"] and table["date"] and table["command"].startswith("python -m perf"), path
        for e in table["entries"]:
            assert all(isinstance(e[k], int) and e[k] > 0 for k in ("B", "T", "G", "Hkv", "S", "D")), (path, e)
            times = e["median_us"]
            assert set(times) <= {"cuda", "triton"} and any(t for t in times.values()), (path, e)
        table["path"] = path
        monkeypatch.setattr(tuning, "load_table", lambda index, t=table: t)
        pick = tuning.lookup(problem(8, 1, 32, 8, 8192, 128), ["cuda", "triton"])
        assert pick is not None and pick.backend in ("cuda", "triton"), path
