"""A representative subset for compute-sanitizer (GPU only):

    compute-sanitizer --tool memcheck  python tests/sanitize_subset.py
    compute-sanitizer --tool racecheck python tests/sanitize_subset.py

Each head dim; split and unsplit; causal T=3; varlen with a zero-length row; the narrow loop
(at most 16 packed query rows) unsplit, split and causal."""
import sys, torch
import os
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fmha
from _util import make_inputs
cases = []
for D in (64, 128, 256, 512):
    Hq, Hkv = (16, 1) if D == 512 else (28, 4)
    cases.append((2, 3, Hq, Hkv, 129, D, [0, 129]))       # causal T>1, varlen with an empty row, unsplit or lightly split
    cases.append((1, 1, Hq, Hkv, 8192, D, None))         # split-KV + combine (deep variant)
    if D == 512:  # two row blocks (DeepSeek-like 128 heads): odd and even tile counts, 1-tile rows
        cases.append((3, 1, 128, 1, 200, D, [200, 33, 20]))
    if D != 512:
        cases.append((48, 3, Hq, Hkv, 300, D, [300, 0] * 24))  # > one CTA per SM: wide variant
        cases.append((2, 3, 16, 4, 129, D, [129, 0]))           # narrow loop (12 rows), causal, empty row
        cases.append((48, 1, Hq, Hkv, 300, D, [300, 0] * 24))   # narrow loop on the wide variant (7 rows)
for (B, T, Hq, Hkv, S, D, sl) in cases:
    q, k, v, cs = make_inputs(B, T, Hq, Hkv, S, D, device="cuda", seqlens=sl)
    out, lse = fmha.attention(q, k, v, cs, backend="cuda", return_lse=True)
    torch.cuda.synchronize()
    print("ran", B, T, Hq, Hkv, S, D, sl, "nan" if torch.isnan(out).any() else "ok", flush=True)
