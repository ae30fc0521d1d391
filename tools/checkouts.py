"""Time the libraries of several commits on the same shapes: each commit's own checkout, library and benchmark
suite, one process per commit and round, the commits alternating within a round.

    python tools/checkouts.py 88ee660 HEAD --rounds 2 -- --shapes tp/,small/ --contenders cuda,sdpa-cudnn --no-flex

`tools/variants.py --lib` loads libraries side by side in one process, which needs the C API and
`FmhaDecodeArgs` of this checkout; across a change of either (a regression hunt over many commits) each
commit has to run its own Python side. Each commit is exported (`git archive` of its fmha/, perf/ and tools/)
into --workdir/<sha>, its library built there once (`python -m fmha.cuda.build`, into the export's own
cache), and `python -m perf` run there with the arguments after `--` and an --out of its own. The table gives,
per shape and contender, each commit's µs in every round, and the last commit's median over the first's.
Exports and libraries are kept and reused (a commit's files never change). Needs an sm_90a GPU and nvcc,
except with --no-build (e.g. for `--dry-run` suites on a CPU). Where the GPU machine has no git history (a copy of
the working tree), prepare the exports and libraries where it has (`--prepare`: nvcc builds sm_90a without a GPU)
and take the workdir along: commits are then found among its exports by hash prefix.

    python tools/checkouts.py 88ee660 HEAD --prepare --workdir .checkouts     # here: git, nvcc
    python tools/checkouts.py 88ee660 e3296e8 --workdir .checkouts -- --shapes tp/ --contenders cuda   # on the GPU
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
EXPORTED = ("fmha", "perf", "tools")  # the folders a commit's suite needs (tools/ is absent in old commits)


def git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=REPO, check=True, capture_output=True, text=True).stdout.strip()


def resolve(commit: str, workdir: Path) -> str:
    """The commit's hash (12 digits): from git, or where git has no such history, from an export under workdir
    whose hash starts with `commit`. ValueError if neither knows it."""
    try:
        return git("rev-parse", "--short=12", f"{commit}^{{commit}}")
    except (subprocess.CalledProcessError, OSError) as e:
        why = e.stderr.strip() if isinstance(e, subprocess.CalledProcessError) else str(e)
    found = [p.name for p in workdir.glob(f"{commit}*") if (p / ".exported").exists()] if workdir.is_dir() else []
    if len(found) == 1:
        return found[0]
    raise ValueError(f"{commit!r}: not a commit git knows ({why}) and {len(found)} exports under {workdir} match it")


def export(sha: str, workdir: Path) -> Path:
    """The commit's checkout under workdir (exported once; results of earlier runs are left alone)."""
    dst = workdir / sha
    done = dst / ".exported"  # written last: an interrupted export is redone
    if done.exists():
        return dst
    dst.mkdir(parents=True, exist_ok=True)
    present = set(git("ls-tree", "--name-only", sha).split())
    paths = [p for p in EXPORTED if p in present]
    archive = subprocess.run(["git", "archive", sha, *paths], cwd=REPO, check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(dst)], input=archive, check=True)
    done.write_text(sha + "\n")
    return dst


def checkout_env(checkout: Path) -> dict:
    return {**os.environ, "PYTHONPATH": str(checkout), "FMHA_CACHE_DIR": str(checkout / ".fmha_cache")}


def run_logged(cmd: list, checkout: Path, log: Path) -> bool:
    with open(log, "w") as f:
        r = subprocess.run(cmd, cwd=checkout, env=checkout_env(checkout), stdout=f, stderr=subprocess.STDOUT)
    if r.returncode != 0:
        tail = log.read_text()[-2000:]
        print(f"failed ({r.returncode}): {' '.join(cmd)} in {checkout}; log {log}:\n{tail}", file=sys.stderr)
    return r.returncode == 0


def suite_json(out: Path) -> Path:
    """The suite's one JSON in its output folder: results.json, or the preset's own (paged.json, deepseek.json);
    a --write-tuning copy (tuning-*.json) aside."""
    found = [p for p in out.glob("*.json") if not p.name.startswith("tuning")]
    return found[0] if len(found) == 1 else out / "results.json"


def times(results_json: Path) -> dict:
    """(shape name, contender) -> µs per call, for the contenders that ran correctly."""
    out = {}
    for shape in json.loads(results_json.read_text())["shapes"]:
        for name, r in shape.get("results", {}).items():
            if r.get("status") == "ok" and r.get("us"):
                out[(shape["name"], name)] = r["us"]
    return out


def table(labels: list, runs: dict) -> str:
    """runs: label -> list (one per round) of times() dicts. Markdown, µs."""
    keys = sorted({k for rounds in runs.values() for t in rounds for k in t})
    head = ["shape", "contender", *labels] + ([f"{labels[-1]} / {labels[0]}"] if len(labels) > 1 else [])
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for key in keys:
        cells, medians = [], []
        for label in labels:
            got = [t[key] for t in runs[label] if key in t]
            cells.append(", ".join(f"{v:.1f}" for v in got) or "-")
            medians.append(statistics.median(got) if got else None)
        if len(labels) > 1:
            first, last = medians[0], medians[-1]
            cells.append(f"{last / first:.3f}" if first and last else "-")
        lines.append("| " + " | ".join([key[0], key[1], *cells]) + " |")
    return "\n".join(lines)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    ours, perf_args = (argv[:argv.index("--")], argv[argv.index("--") + 1:]) if "--" in argv else (argv, [])
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("commits", nargs="+", help="revisions (the first is the baseline of the ratio column)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--workdir", default=os.path.join(tempfile.gettempdir(), "fmha-checkouts"),
                    help="where the exports, their libraries and the runs' outputs live (kept between runs)")
    ap.add_argument("--arch", default="sm_90a", help="the library target (python -m fmha.cuda.build --arch)")
    ap.add_argument("--no-build", action="store_true", help="run the suites without building the libraries first")
    ap.add_argument("--prepare", action="store_true", help="export and build only (no suite runs)")
    args = ap.parse_args(ours)
    if args.rounds < 1:
        ap.error(f"--rounds must be at least 1, got {args.rounds}")
    if any(a == "--out" or a.startswith("--out=") for a in perf_args):
        ap.error("--out is set per commit and round (under --workdir); leave it out of the suite's arguments")
    workdir = Path(args.workdir).resolve()
    try:
        shas = [resolve(c, workdir) for c in args.commits]
    except ValueError as e:
        ap.error(str(e))
    labels = [c if s.startswith(c) or c.startswith(s) else f"{c} ({s[:7]})" for c, s in zip(args.commits, shas)]
    if len(set(shas)) != len(shas):
        ap.error(f"a commit is named twice: {dict(zip(labels, shas))}")
    checkouts = {label: export(sha, workdir) for label, sha in zip(labels, shas)}
    if not args.no_build:
        for label, checkout in checkouts.items():
            cmd = [sys.executable, "-m", "fmha.cuda.build", "--arch", args.arch]
            if not run_logged(cmd, checkout, checkout / "build.log"):
                return 1
    if args.prepare:
        print("prepared: " + ", ".join(f"{label} in {checkout}" for label, checkout in checkouts.items()))
        return 0
    runs = {label: [] for label in labels}
    for k in range(1, args.rounds + 1):
        for label, checkout in checkouts.items():
            out = checkout / f"round{k}"
            cmd = [sys.executable, "-m", "perf", *perf_args, "--out", str(out)]
            if not run_logged(cmd, checkout, checkout / f"round{k}.log"):
                return 1
            runs[label].append(times(suite_json(out)))
            print(f"round {k}: {label} done", flush=True)
    print(f"\nµs per call, every round ({' '.join(perf_args)}; checkouts under {workdir}):\n")
    print(table(labels, runs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
