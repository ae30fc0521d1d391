"""The benchmark tool's CPU smoke run (`python -m perf --dry-run`): every output file, both timing regimes.

The figures of a dry run mean nothing (tiny shapes, wall-clock timing on the CPU); this checks that the
suite's plumbing (contenders, reference check, tables, JSON) works without a GPU.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.skipif(torch.cuda.is_available(), reason="the dry run checks the pipeline where no GPU is; with one, "
                    "`python -m perf` itself is the check (and the H200 machine's Triton 3.6 interpreter cannot run a "
                    "loop over tensor bounds under NumPy 2: int() of a 1-element array)")
def test_dry_run_writes_both_regimes(tmp_path):
    out = tmp_path / "perf"
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": REPO}
    cmd = [sys.executable, "-m", "perf", "--dry-run", "--also-separate", "--preset", "quick", "--shapes", "S512",
           "--contenders", "triton,sdpa-flash", "--out", str(out)]
    r = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    log = r.stdout[-3000:] + r.stderr[-3000:]
    assert r.returncode == 0, log
    md = (out / "results.md").read_text()
    assert "## Per call, CUDA graph" in md and "each call followed by a one-element add" in md, md
    res = json.loads((out / "results.json").read_text())
    assert res["meta"]["also_separate"] is True
    (shape,) = res["shapes"]
    triton = shape["results"]["triton"]
    assert triton["status"] == "ok" and triton["us"] > 0 and triton["separate_us"] > 0, (triton, log)


def test_separate_and_also_separate_exclude_each_other():
    from perf.bench import parse_args
    with pytest.raises(SystemExit):
        parse_args(["--separate", "--also-separate"])


def test_write_tuning_refuses_fp16():
    """The dispatcher's table is measured in bf16: an fp16 run may not overwrite it."""
    from perf.bench import parse_args
    assert parse_args(["--dtype", "fp16"]).dtype == "fp16"
    with pytest.raises(SystemExit):
        parse_args(["--dtype", "fp16", "--write-tuning"])


@pytest.mark.skipif(torch.cuda.is_available(), reason="CPU dry run (see test_dry_run_writes_both_regimes)")
def test_dry_run_fp16(tmp_path):
    out = tmp_path / "perf"
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": REPO}
    cmd = [sys.executable, "-m", "perf", "--dry-run", "--dtype", "fp16", "--preset", "quick", "--shapes", "S512",
           "--contenders", "triton", "--out", str(out)]
    r = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    res = json.loads((out / "results.json").read_text())
    assert res["meta"]["dtype"] == "float16" and res["shapes"][0]["dtype"] == "float16"
    assert res["shapes"][0]["results"]["triton"]["status"] == "ok"
    assert "float16 throughout" in (out / "results.md").read_text()
