"""fmha.tuning.lookup: the measured entry nearest to a problem decides `auto` (a stub table; no GPU)."""
from __future__ import annotations

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
    name, note = tuning.lookup(problem(1, 1, 8, 1, 8192, 128), both)
    assert name == "triton" and "B=1 T=1 G=8 Hkv=1 S=8192 D=128" in note and "tuning/stub.json" in note
    assert tuning.lookup(problem(1, 1, 8, 1, 8192, 128), ["cuda"])[0] == "cuda"  # only the usable ones
    assert tuning.lookup(problem(1, 1, 8, 1, 8192, 64), both) is None  # no entry of that head dim
