"""The package's structure, without a GPU: no import cycles, the C API's struct and enum as fmha_capi.h
declares them, the Problem fields of paged caches and of a V head dim of its own, and the suite's collection as a
GPU machine sees it."""
from __future__ import annotations

import ast
import os
import re
import subprocess
import sys

import pytest
import torch

from _util import make_problem

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PKG = os.path.join(REPO, "fmha")
HEADER = os.path.join(PKG, "cuda", "csrc", "fmha_capi.h")
PACKAGES = {"fmha", "fmha.cuda", "fmha.triton"}
# Imports inside functions, each for a reason other than a cycle: triton reads TRITON_INTERPRET when the
# kernels are defined (and takes a second to import); `python -m fmha` sets that variable before importing fmha.
DEFERRED_OK = {("fmha.backends", "fmha.triton.decode"), ("fmha.__main__", "fmha"),
               ("fmha.__main__", "fmha.backends"), ("fmha.__main__", "fmha.compare")}


def modules() -> dict:
    """module name -> path of every Python module of the fmha package."""
    found = {}
    for root, _, files in os.walk(PKG):
        for f in files:
            if f.endswith(".py"):
                rel = os.path.relpath(os.path.join(root, f), REPO)[:-3].replace(os.sep, ".")
                found[rel.removesuffix(".__init__")] = os.path.join(root, f)
    return found


def imports(name: str, path: str):
    """(imported fmha module, at module level?) for each import statement of a module."""
    tree = ast.parse(open(path).read())
    package = name if path.endswith("__init__.py") else name.rpartition(".")[0]
    top = {id(n) for n in tree.body} | {id(n) for s in tree.body if isinstance(s, (ast.Try, ast.If))
                                       for n in ast.walk(s)}
    known = modules()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{base}.{node.module}" if node.module else base
            else:
                base = node.module or ""
            if not base.startswith("fmha"):
                continue
            for alias in node.names:  # `from . import tuning` imports a module, `from .x import f` a name
                target = f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base
                yield target, id(node) in top
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("fmha"):
                    yield alias.name, id(node) in top


def test_no_import_cycle_and_no_import_deferred_to_dodge_one():
    graph, deferred = {}, []
    for name, path in modules().items():
        for target, at_top in imports(name, path):
            if at_top:
                if name not in PACKAGES and target not in PACKAGES:  # a package's __init__ runs first anyway
                    graph.setdefault(name, set()).add(target)
            elif (name, target) not in DEFERRED_OK:
                deferred.append(f"{name} -> {target}")
    assert not deferred, f"imports inside functions: {deferred}"
    state = {}

    def visit(node, path):
        state[node] = "open"
        for nxt in graph.get(node, ()):
            if state.get(nxt) == "open":
                raise AssertionError("import cycle: " + " -> ".join(path + [node, nxt]))
            if nxt not in state:
                visit(nxt, path + [node])
        state[node] = "done"

    for node in list(graph):
        if node not in state:
            visit(node, [])


@pytest.mark.parametrize("name", sorted(set(modules()) - {"fmha.cuda.build"}))
def test_each_module_imports_first_in_a_fresh_interpreter(name):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([REPO, os.environ.get("PYTHONPATH", "")])}
    r = subprocess.run([sys.executable, "-c", f"import {name}"], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]


def header_struct():
    """[(C type, field name)] of FmhaDecodeArgs in fmha_capi.h, in order."""
    text = open(HEADER).read()
    body = re.search(r"typedef struct FmhaDecodeArgs \{(.*?)\} FmhaDecodeArgs;", text, re.S).group(1)
    fields = []
    for line in body.splitlines():
        line = line.split("//")[0].strip().rstrip(";")
        if line:
            ctype, names = line.split(None, 1)
            fields += [(ctype, n.strip()) for n in names.split(",")]
    return fields


def test_packed_args_match_the_header():
    from fmha.cuda import backend as cb

    fields = header_struct()
    code = {"uint64_t": "Q", "int64_t": "q", "double": "d"}
    fmt = "".join(code[t] for t, _ in fields)
    expanded = "".join(ch * int(n or 1) for n, ch in re.findall(r"(\d*)([a-zA-Z])", cb._PACKED.format[1:]))
    assert expanded == fmt and cb._PACKED.size == 8 * len(fields)
    names = [n for _, n in fields]

    def span(sl):
        return names[sl.start // 8:sl.stop // 8]

    assert span(cb._SHAPE_FIELDS) == ["B", "T", "Hq", "Hkv", "S", "D", "dtype"]
    assert span(cb._SCALAR_FIELDS) == ["softmax_scale", "causal", "num_splits", "config"]
    assert span(cb._TAIL_FIELDS) == ["block_table", "block_table_stride", "page_size", "head_dim_v", "num_blocks",
                                     "max_blocks_per_seq"]
    # the per-call packing ends with the precomputed tail, the sinks' pointer and the balanced flag: nothing of the
    # struct is left unsent
    assert names[cb._TAIL_FIELDS.stop // 8:] == ["sinks", "balanced"]
    assert cb._TAIL_FIELDS.stop + 2 * 8 == 8 * len(fields) == cb._PACKED_PER_CALL.size


def test_configurations_match_the_header():
    from fmha.cuda.backend import Config

    enum = dict(re.findall(r"FMHA_CONFIG_(\w+) = (\d+)", open(HEADER).read()))
    assert {c.name: c.value for c in Config} == {k: int(v) for k, v in enum.items()}


def test_problem_paged_and_head_dim_v_fields():
    from fmha.problem import validate

    p = make_problem(2, 1, 8, 2, 64, 128)
    assert p.page_size is None and not p.has_block_table and p.head_dim_v == 128
    q, k, v = torch.randn(2, 1, 8, 64, dtype=torch.bfloat16), *torch.randn(2, 2, 64, 2, 64, dtype=torch.bfloat16)
    p = validate(q, k, v)
    assert p.head_dim_v == 64 and p.page_size is None and "Dv" not in p.describe() and "paged" not in p.describe()
    assert p == validate(q, k, v) and hash(p) == hash(validate(q, k, v))
    import dataclasses

    other = dataclasses.replace(p, head_dim_v=128, page_size=16)
    assert other.has_block_table and "Dv=128" in other.describe() and "paged(16 tokens a page)" in other.describe()
    assert other.bytes_moved() == p.bytes_moved() + 2 * (2 * 1 * 8 * 64 + 2 * 64 * 2 * 64)
    import inspect

    import fmha

    assert inspect.signature(fmha.attention).parameters["block_table"].kind == inspect.Parameter.KEYWORD_ONLY
    # a paged call: seqlen_k is the table's capacity, the pool's shape is in the Problem
    pool = torch.randn(2, 7, 5, 2, 64, dtype=torch.bfloat16)  # (2, num_blocks, page_size, Hkv, D)
    table = torch.zeros(2, 3, dtype=torch.int32)
    paged = validate(q, pool[0], pool[1], torch.zeros(2, dtype=torch.int32), block_table=table)
    assert (paged.page_size, paged.num_blocks, paged.max_blocks_per_seq, paged.seqlen_k) == (5, 7, 3, 15)
    assert paged.has_block_table and paged.block_table_rows_disjoint
    assert "S=15" in paged.describe() and "paged(5 tokens a page, 7 pages)" in paged.describe()


def test_tests_that_need_no_gpu_collect_where_one_is():
    """On a GPU machine the tests that need a GPU's absence skip with reasons naming the GPU; the conftest's
    guard against unmarked GPU skips must let them collect, or it refuses the whole run there."""
    script = ("import sys, torch, pytest\ntorch.cuda.is_available = lambda: True\n"
              "sys.exit(pytest.main(['-q', '--collect-only', '-p', 'no:cacheprovider', 'tests/test_perf_tool.py']))\n")
    r = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert "skipped for want of a GPU" not in r.stdout + r.stderr
