"""Test configuration: the device the suite runs on and the size of its grids.

Without a CUDA GPU the Triton kernels run under the Triton interpreter
(TRITON_INTERPRET=1, set here before anything imports triton) on a reduced
grid; with a GPU the full grids run.
"""
import os
import sys

import pytest
import torch

HAS_GPU = torch.cuda.is_available()
if not HAS_GPU:
    os.environ.setdefault("TRITON_INTERPRET", "1")

sys.path.insert(0, os.path.dirname(__file__))  # tests/_util.py

DEVICE = "cuda" if HAS_GPU else "cpu"


@pytest.fixture
def cuda_as_if_present(monkeypatch):
    """The cuda backend as on a Hopper machine (no GPU needed): available, the device of its build. A Problem
    made from CPU tensors plans for it once its device says cuda (_util.on_gpu)."""
    from fmha.backends import registry
    from fmha.cuda import backend as cb
    from fmha.dispatch import forget_decisions

    b = registry()["cuda"]
    cap = b.capability  # read before the patch: the property itself asks _capability on a GPU machine
    monkeypatch.setattr(cb, "_capability", lambda index: cap)
    monkeypatch.setattr(b, "unavailable_reason", lambda: None)
    forget_decisions()
    yield b
    forget_decisions()


def pytest_collection_modifyitems(config, items):
    """A test skipped here for want of a GPU must carry the gpu mark, so that `-m gpu` on a GPU machine runs
    every test this machine cannot. Only a machine without a GPU skips for want of one (with a GPU, the tests
    skipped are those that need its absence)."""
    if HAS_GPU:
        return
    unmarked = [item.nodeid for item in items if item.get_closest_marker("gpu") is None and any(
        m.args and m.args[0] is True and "GPU" in str(m.kwargs.get("reason", "")) for m in item.iter_markers("skipif"))]
    if unmarked:
        more = f" and {len(unmarked) - 10} more" if len(unmarked) > 10 else ""
        raise pytest.UsageError("skipped for want of a GPU but not marked gpu (add @pytest.mark.gpu): "
                                + ", ".join(unmarked[:10]) + more)
