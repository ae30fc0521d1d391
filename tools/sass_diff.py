"""Compare the SASS of every kernel between two builds of the CUDA library.

    python tools/sass_diff.py OLD.so NEW.so [--rename OLD_NAME=NEW_NAME ...] [--rename-part OLD=NEW ...] [--show N]

Disassembles both with cuobjdump -sass, splits the output per function, masks what moves
without changing the code (instruction addresses, branch targets and the /*0123*/ offsets,
the encodings' hex words) and prints, per function, whether its instructions are identical,
differ, or exist in one build only. Functions are matched by mangled name; --rename maps an
old name to a new one (a kernel whose template arguments were renumbered), --rename-part a part of
every name that holds it (a parameter added to every kernel). Exit status 0 when
every function of both builds is matched and identical, 1 otherwise. No GPU needed.
"""
from __future__ import annotations

import argparse
import difflib
import re
import subprocess
import sys
from pathlib import Path


def cuobjdump() -> str:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from fmha.cuda.loader import find_cuobjdump

    tool = find_cuobjdump()
    if tool is None:
        sys.exit("sass_diff: cuobjdump not found (neither in the triton wheel nor on PATH)")
    return tool


_ADDR = re.compile(r"/\*[0-9a-f]{4,}\*/")          # /*0a80*/ instruction offsets
_HEX = re.compile(r"/\*\s*0x[0-9a-f]+\s*\*/")       # encoding words
_TARGET = re.compile(r"`\(\.L_x_\d+\)")             # branch targets by label
_LABEL = re.compile(r"\.L_x_\d+")


def functions(lib: Path) -> dict:
    """Mangled name -> masked SASS lines (one list per function; duplicates across fatbins merged)."""
    out = subprocess.run([cuobjdump(), "-sass", str(lib)], capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"sass_diff: cuobjdump failed on {lib}: {out.stderr.strip()}")
    funcs: dict = {}
    for chunk in re.split(r"\n\s*Function : ", out.stdout)[1:]:
        name, _, body = chunk.partition("\n")
        lines = []
        for line in body.splitlines():
            line = _HEX.sub("", _ADDR.sub("", line))
            line = _LABEL.sub(".L", _TARGET.sub("`(.L)", line)).strip()
            if not line or line.startswith(("....", ".section", "Fatbin", "code for", "arch =", "host =",
                                            "compile_size", "identifier", "====", "code version", ".target")):
                continue
            lines.append(line)
        name = name.strip()
        if name in funcs and funcs[name] != lines:
            name += f" (copy {sum(n.startswith(name) for n in funcs)})"
        funcs[name] = lines
    return funcs


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python tools/sass_diff.py", description=__doc__.splitlines()[0])
    ap.add_argument("old", type=Path)
    ap.add_argument("new", type=Path)
    ap.add_argument("--rename", action="append", default=[], metavar="OLD=NEW",
                    help="match old function OLD with new function NEW (mangled names)")
    ap.add_argument("--rename-part", action="append", default=[], metavar="OLD=NEW",
                    help="match every old function whose name holds OLD with the new one holding NEW there (a "
                         "changed parameter list)")
    ap.add_argument("--show", type=int, default=0, metavar="N", help="print the first N differing lines per function")
    args = ap.parse_args(argv)
    old, new = functions(args.old), functions(args.new)
    renames = dict(r.split("=", 1) for r in args.rename)
    for part in args.rename_part:
        a, b = part.split("=", 1)
        renames.update({n: n.replace(a, b) for n in old if a in n and n not in renames})
    same = differ = 0
    missing = []
    matched_new = set()
    for name in sorted(old):
        target = renames.get(name, name)
        if target not in new:
            missing.append(f"only in old: {name}")
            continue
        matched_new.add(target)
        a, b = old[name], new[target]
        label = name if target == name else f"{name} -> {target}"
        if a == b:
            same += 1
            print(f"identical  {len(a):6d} lines  {label}")
        else:
            differ += 1
            changed = sum(1 for op in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes()
                          if op[0] != "equal")
            print(f"DIFFERS    {len(a):6d} -> {len(b):6d} lines, {changed} changed blocks  {label}")
            if args.show:
                diff = list(difflib.unified_diff(a, b, lineterm="", n=0))[2:args.show + 2]
                print("\n".join("    " + d for d in diff))
    missing += [f"only in new: {n}" for n in sorted(set(new) - matched_new)]
    for m in missing:
        print(m)
    print(f"{same} identical, {differ} differ, {len(missing)} unmatched "
          f"({len(old)} functions in {args.old.name}, {len(new)} in {args.new.name})")
    return 0 if differ == 0 and not missing else 1


if __name__ == "__main__":
    sys.exit(main())
