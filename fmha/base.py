"""What the dispatcher and every backend share: the Backend interface and the memos of decisions.

Both sides import this module and nothing of each other's: `backends` (the registry) and `dispatch`
import the backends, and a backend (`cuda.backend`, `triton.decode`) imports, of fmha's modules outside
its own package, only this, `problem` and `splits` (tests/test_structure.py checks the import graph).
"""
from __future__ import annotations

import os
from typing import Optional

from .problem import Problem


class Backend:
    """A backend says whether it can run on this machine at all (`unavailable_reason`) and whether it
    can serve one problem (`unsupported_reason`), both from host information only, and `run`s into
    caller-allocated `out` and `lse`. For a paged problem (`p.has_block_table`) `run` gets the block table
    and k_cache / v_cache are the page pools; for one with sinks (`p.has_sinks`) it gets `sinks`."""

    name: str = ""
    summary: str = ""
    # Host time of one eager call in microseconds (Python, launch), measured on an H200: where the
    # dispatch table's times of two backends are within noise, `auto` takes the lower one.
    eager_call_us: Optional[float] = None

    def unavailable_reason(self) -> Optional[str]:
        """None when usable on this machine, else why not."""
        return None

    def unsupported_reason(self, p: Problem) -> Optional[str]:
        """None when this backend can serve `p`, else why not."""
        return None

    def auto_reason(self, p: Problem) -> Optional[str]:
        """None when `auto` may pick this backend for a problem it serves, else why not (it still runs when
        asked for by name)."""
        return None

    def prepare(self) -> None:
        """Load what `run` needs (the CUDA backend: build or load its library); raises RuntimeError if it cannot,
        after which `unavailable_reason` says why."""

    def launch_details(self, p: Problem) -> Optional[str]:
        """How this backend would launch `p` (kernel configuration, split count), for explain()."""
        return None

    def reads_shared_kv_once(self, p: Problem) -> bool:
        """Whether, where V is K's memory (p.kv_shared), one load of each latent tile serves K and V."""
        return False

    def run(self, p: Problem, q, k_cache, v_cache, cache_seqlens, out, lse, block_table=None, sinks=None,
            cache_leftpad=None) -> None:
        """Write out and lse for p (block_table, sinks, cache_leftpad: given exactly where p has them)."""
        raise NotImplementedError


def interpreter_enabled() -> bool:
    """Whether TRITON_INTERPRET asks for the Triton interpreter (Triton kernels on the CPU), read as Triton reads
    it (1, true, on or yes, in any case), so that both agree on which kernel runs."""
    return os.environ.get("TRITON_INTERPRET", "").strip().lower() in ("1", "true", "on", "yes")


_DECISION_MEMOS: list = []


def decision_memo() -> dict:
    """A new memo that `forget_decisions` clears; for every cache that holds a decision."""
    memo: dict = {}
    _DECISION_MEMOS.append(memo)
    return memo


def forget_decisions() -> None:
    """Drop memoised decisions (a backend's availability changed, e.g. its build failed)."""
    for memo in _DECISION_MEMOS:
        memo.clear()
