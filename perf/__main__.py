"""`python -m perf`: the decode benchmark (perf/bench.py)."""
import sys

from perf.bench import main

sys.exit(main())
