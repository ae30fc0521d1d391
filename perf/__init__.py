"""fmha's benchmark suite: `python -m perf --help` (see perf/README.md)."""
