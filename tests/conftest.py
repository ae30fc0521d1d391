"""Test configuration: the device the suite runs on and the size of its grids.

Without a CUDA GPU the Triton kernels run under the Triton interpreter
(TRITON_INTERPRET=1, set here before anything imports triton) on a reduced
grid; with a GPU the full grids run.
"""
import os
import sys

import torch

HAS_GPU = torch.cuda.is_available()
if not HAS_GPU:
    os.environ.setdefault("TRITON_INTERPRET", "1")

sys.path.insert(0, os.path.dirname(__file__))  # tests/_util.py

DEVICE = "cuda" if HAS_GPU else "cpu"
