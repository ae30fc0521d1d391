"""A representative subset for compute-sanitizer (GPU only):

    compute-sanitizer --tool memcheck  python tests/sanitize_subset.py
    compute-sanitizer --tool racecheck python tests/sanitize_subset.py

Each head dim; split and unsplit; causal T=3; varlen with a zero-length row; the narrow loop
(at most 16 packed query rows) unsplit, split and causal; the in-cluster split merge, forced to 5 and
16 splits (the shape-based plan does not pick it for these shapes); 64 rows on the deep D=128
configuration; a combine grid of many CTAs; two splits merged as cluster pairs (64, 112 and 21 rows); the
shallow ring (stream at D=128, wide at D=64) forced on one-wave grids, unsplit and split (the split one
launched one CTA per SM); at D = 512 both loops: the split-Q K^T loop (one 64-row block) and the seesaw
(two row blocks: causal T=2 with an empty row, split-KV, sequences of 1, 2 and 7 tiles); KV-head pairs at D = 64
(the plan's and a forced causal grid); paged caches at each head dim through TMA boxes (64-token pages) and the
gather (13; its two or four warps), unsplit, split and with more CTAs than SMs, and page ids out of the pool's range (clamped: no access outside it); the shared
latent (576/512, 512/512: the narrow and seesaw latent loops, paged; the 64-key seesaw, and its 48-key tiles
(contiguous and through 64- and 80-token pages; at 576 the rope ring), forced unsplit, at two splits and at four on more clusters
than fit; the balanced schedule forced on mixed lengths, for the narrow loop and the 64-key seesaw) and attention
sinks."""
import sys, torch
import os
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fmha
from _util import make_inputs, make_paged
cases = []
for D in (64, 128, 256, 512):
    Hq, Hkv = (16, 1) if D == 512 else (28, 4)
    cases.append((2, 3, Hq, Hkv, 129, D, [0, 129]))       # causal T>1, varlen with an empty row, unsplit or lightly split
    cases.append((1, 1, Hq, Hkv, 8192, D, None))         # split-KV + combine (deep configuration)
    if D == 512:  # two row blocks (DeepSeek-like 128 heads; the seesaw loop): odd and even tile counts, 1-tile rows
        cases.append((3, 1, 128, 1, 200, D, [200, 33, 20]))
        cases.append((2, 2, 64, 1, 129, D, [0, 129]))    # the seesaw: causal T>1, an empty row
        cases.append((1, 1, 128, 1, 8192, D, None))      # the seesaw split-KV + combine
    if D != 512:
        cases.append((48, 3, Hq, Hkv, 300, D, [300, 0] * 24))  # > one CTA per SM: wide configuration
        cases.append((2, 3, 16, 4, 129, D, [129, 0]))           # narrow loop (12 rows), causal, empty row
        cases.append((48, 1, Hq, Hkv, 300, D, [300, 0] * 24))   # narrow loop on the wide configuration (7 rows)
    if D == 128:  # 64 rows on the deep configuration (the T=16 plan), odd and even tile counts
        cases.append((2, 16, 32, 8, 1000, D, [1000, 300]))
        cases.append((6, 13, 28, 4, 700, D, [700, 0, 13, 650, 129, 700]))  # 2 splits, 2184 rows: a combine grid of many CTAs
# FMHA_SANITIZE_ONLY=paged: the paged cases alone (a shorter run after a change to the paged producer);
# =latent: the shared-latent and sinks cases alone (after a change to a latent loop).
ONLY = os.environ.get("FMHA_SANITIZE_ONLY", "")
if ONLY not in ("", "paged", "latent"):
    sys.exit(f"FMHA_SANITIZE_ONLY: got {ONLY!r}; allowed: paged, latent, or unset (every case)")


def wanted(part):
    return ONLY in ("", part)


for (B, T, Hq, Hkv, S, D, sl) in ([] if ONLY else cases):
    q, k, v, cs = make_inputs(B, T, Hq, Hkv, S, D, device="cuda", seqlens=sl)
    out, lse = fmha.attention(q, k, v, cs, backend="cuda", return_lse=True)
    torch.cuda.synchronize()
    print("ran", B, T, Hq, Hkv, S, D, sl, "nan" if torch.isnan(out).any() else "ok", flush=True)

# Paged caches: shuffled pages of NaN-filled pools (NaN past each sequence's length: "nan" below is a failure
# except where ids are out of range), TMA boxes (64) and the gather (13), causal T=3 with an empty sequence,
# split-KV, more CTAs than SMs; then ids below 0 and past num_blocks in one sequence.
for D in ((64, 128, 256, 512) if wanted("paged") else ()):
    Hq, Hkv = (16, 1) if D == 512 else (28, 4)
    for page_size in (64, 13):
        for (B, T, S, sl) in ((3, 3, 300, [300, 0, 129]), (1, 1, 8192, [8000]), (48, 1, 300, [300, 0] * 24)):
            q, k, v, cs = make_inputs(B, T, Hq, Hkv, S, D, device="cuda", seqlens=sl)
            kp, vp, bt = make_paged(k, v, page_size, cs)
            launch = fmha.explain(q, kp, vp, cs, block_table=bt, backend="cuda").launch
            out, lse = fmha.attention(q, kp, vp, cs, block_table=bt, backend="cuda", return_lse=True)
            torch.cuda.synchronize()
            print("ran paged", B, T, Hq, Hkv, S, D, page_size, launch.split("; ")[-1],
                  "nan" if torch.isnan(out).any() else "ok", flush=True)
for page_size in ((64, 13) if wanted("paged") else ()):
    q, k, v, cs = make_inputs(3, 2, 32, 8, 700, 128, device="cuda", seqlens=[700, 700, 129])
    kp, vp, bt = make_paged(k, v, page_size, cs)
    nb = kp.shape[0]
    bad = torch.tensor([-1, nb, nb + 7, 2 ** 31 - 1, -2 ** 31], dtype=torch.int32, device="cuda")
    bt[1] = bad.repeat(bt.shape[1] // 5 + 1)[:bt.shape[1]]
    out, lse = fmha.attention(q, kp, vp, cs, block_table=bt, backend="cuda", return_lse=True)
    torch.cuda.synchronize()
    valid = out[[0, 2]]
    print("ran paged out-of-range ids", page_size, "nan in valid sequences" if torch.isnan(valid).any() else "ok",
          flush=True)
# The paged plans of their own (B = 32, Hkv = 8): KV-head pairs through TMA boxes (D = 64) and STREAM above the
# SMs (D = 128 T = 4), 64-token pages and the gather (13), with out-of-range ids in sequence 1.
for (D, T) in (((64, 1), (128, 4)) if wanted("paged") else ()):
    for page_size in (64, 13):
        q, k, v, cs = make_inputs(32, T, 32, 8, 300, D, device="cuda", seqlens=[300, 300, 0] + [129] * 29)
        kp, vp, bt = make_paged(k, v, page_size, cs)
        bt[1] = torch.tensor([-1, kp.shape[0], 2 ** 31 - 1], dtype=torch.int32, device="cuda").repeat(
            bt.shape[1] // 3 + 1)[:bt.shape[1]]
        launch = fmha.explain(q, kp, vp, cs, block_table=bt, backend="cuda").launch
        out, lse = fmha.attention(q, kp, vp, cs, block_table=bt, backend="cuda", return_lse=True)
        torch.cuda.synchronize()
        valid = torch.cat([out[:1], out[2:]])
        print("ran paged own plan", D, T, page_size, launch.split(",")[0], launch.split("; ")[-1],
              "nan in valid sequences" if torch.isnan(valid).any() else "ok", flush=True)
# DeepSeek's shared latent (one K/V ring: V read from the K stage) at 576/512 and 512/512, each latent loop
# (narrow: 16 and 32 rows; seesaw: 128 rows, split), with sinks, NaN past every length, paged (TMA, gather); and sinks
# in the plain loops (narrow, 64-row, split through the combine kernel or inside clusters).
def nan_past(k, sl):
    k = k.clone()
    for i, n in enumerate(sl.tolist()):
        k[i, n:] = float("nan")
    return k


for Dqk in ((576, 512) if wanted("latent") else ()):
    for (B, T, Hq, S, sl, page_size) in ((3, 1, 16, 300, [300, 0, 129], None), (2, 1, 128, 4000, [4000, 33], None),
                                         (3, 2, 16, 300, [300, 0, 129], 64), (3, 2, 16, 300, [300, 0, 129], None),
                                         (2, 1, 16, 300, [300, 7], 13),
                                         (2, 2, 64, 1000, [1000, 129], 64)):  # (two row blocks, paged)
        q, kv, _, cs = make_inputs(B, T, Hq, 1, S, Dqk, device="cuda", seqlens=sl)
        sinks = torch.linspace(-20, 20, Hq, device="cuda")
        kv = nan_past(kv, cs)
        if page_size is not None:
            kv, _, bt = make_paged(kv, kv, page_size, cs)
        else:
            bt = None
        launch = fmha.explain(q, kv, kv[..., :512], cs, block_table=bt, backend="cuda", sinks=sinks).launch
        out, lse = fmha.attention(q, kv, kv[..., :512], cs, block_table=bt, backend="cuda", return_lse=True,
                                  sinks=sinks)
        torch.cuda.synchronize()
        print("ran latent", Dqk, B, T, Hq, S, page_size, launch.split(",")[0], "nan" if torch.isnan(out).any() else "ok",
              flush=True)
for (B, T, Hq, Hkv, S, D, sl) in (((2, 1, 8, 2, 300, 128, [300, 0]), (2, 3, 28, 4, 129, 64, [129, 0]),
                                   (1, 1, 8, 8, 16384, 128, None)) if wanted("latent") else ()):
    q, k, v, cs = make_inputs(B, T, Hq, Hkv, S, D, device="cuda", seqlens=sl)
    out, lse = fmha.attention(q, k, v, cs, backend="cuda", return_lse=True,
                              sinks=torch.linspace(-20, 20, Hq, device="cuda"))
    torch.cuda.synchronize()
    print("ran sinks", B, T, Hq, Hkv, S, D, "nan" if torch.isnan(out).any() else "ok", flush=True)

# The 64-key seesaw forced unsplit (its output staged in the ring), at two splits (merged from registers
# inside a cluster pair) and at four on more clusters than the GPU holds (fp16 partials to the workspace for
# the combine kernel): 21 packed rows of GQA 28/4 at T=3 with a 7-token sequence (its later splits empty), two
# row blocks with an empty sequence, sinks, NaN past every length; on 48-key tiles also paged.
if wanted("latent"):
    from fmha.backends import registry
    from fmha.cuda.backend import Config
    b = registry()["cuda"]
    if b._fn is None:  # the patched plan skips the lazy bind
        b._bind()
    own_plan = b.launch_plan
    for Dqk, config in ((576, Config.LATENT_SEESAW64), (512, Config.LATENT_SEESAW64), (512, Config.LATENT_SEESAW48),
                        (576, Config.LATENT_SEESAW48)):
        for num_splits in (1, 2, 4):
            b.launch_plan = lambda p, index, n=num_splits, c=config: (c, n)
            b._launches = {}
            os.environ["FMHA_CUDA_SCHEDULE"] = "static"  # (these grids past one wave would deal their tiles)
            shapes = ((2, 3, 28, 4, 129, [129, 7]), (2, 1, 128, 1, 300, [300, 0]))
            if num_splits == 4:  # 40 x 4 clusters of four: the combine kernel merges
                shapes = ((40, 3, 28, 4, 129, [129, 7] * 20), (80, 1, 128, 1, 300, [300, 0] * 40))
            # (48-key tiles also through 64- and 80-token pages, in 16-row TMA boxes)
            pages = (None, 64, 80) if config == Config.LATENT_SEESAW48 else (None,)
            for (B, T, Hq, Hkv, S, sl), page_size in ((shape, page) for shape in shapes for page in pages):
                q, kv, _, cs = make_inputs(B, T, Hq, Hkv, S, Dqk, device="cuda", seqlens=sl)
                kv = nan_past(kv, cs)
                bt = None
                if page_size is not None:
                    kv, _, bt = make_paged(kv, kv, page_size, cs)
                out, lse = fmha.attention(q, kv, kv[..., :512], cs, block_table=bt, backend="cuda", return_lse=True,
                                          sinks=torch.linspace(-20, 20, Hq, device="cuda"))
                torch.cuda.synchronize()
                print("ran", config.name.lower(), Dqk, num_splits, B, T, Hq, Hkv, page_size,
                      "nan" if torch.isnan(out).any() else "ok", flush=True)
    # The balanced schedule (the latent narrow loop, and the 64-key seesaw with several visits a CTA, forced; on
    # 48-key tiles for a contiguous latent):
    # mixed lengths with empty sequences, one long sequence shared by many CTAs, 32 packed rows of GQA 28/4, paged
    # by TMA boxes, a batch padded with empty sequences; sinks, NaN past every length.
    os.environ["FMHA_CUDA_SCHEDULE"] = "balanced"
    narrow, seesaw = Config.LATENT_NARROW, Config.LATENT_SEESAW64
    for Dqk in (576, 512):
        for (T, Hq, Hkv, sl, page_size, splits, config) in (
                (1, 16, 1, [1000, 0, 1, 3000, 64, 65, 7, 2048, 0, 129], None, 1, narrow),
                (2, 16, 1, [4000] + [64] * 15, 64, 1, narrow),
                (3, 28, 4, [129, 0, 700, 1, 2500], None, 3, narrow),
                (1, 16, 1, [700] * 6 + [0] * 10, 64, 1, narrow),
                (1, 128, 1, [1000, 0, 1, 3000, 65, 129], None, 1, seesaw),
                (2, 64, 1, [4000] + [64] * 7, 64, 1, seesaw)):
            if config == seesaw and page_size is None:  # (the plan's 48-key tiles)
                config = Config.LATENT_SEESAW48
            b.launch_plan = lambda p, index, c=config, n=splits: (c, n)
            b._launches = {}
            q, kv, _, cs = make_inputs(len(sl), T, Hq, Hkv, max(sl), Dqk, device="cuda", seqlens=sl)
            kv = nan_past(kv, cs)
            bt = None
            if page_size is not None:
                kv, _, bt = make_paged(kv, kv, page_size, cs)
            launch = fmha.explain(q, kv, kv[..., :512], cs, block_table=bt, backend="cuda").launch
            out, lse = fmha.attention(q, kv, kv[..., :512], cs, block_table=bt, backend="cuda", return_lse=True,
                                      sinks=torch.linspace(-20, 20, Hq, device="cuda"))
            torch.cuda.synchronize()
            print("ran balanced", config.name.lower(), Dqk, T, Hq, Hkv, page_size, splits,
                  "balanced" if "balanced schedule" in launch else launch,
                  "nan" if torch.isnan(out).any() else "ok", flush=True)
    del os.environ["FMHA_CUDA_SCHEDULE"]
    b.launch_plan = own_plan
    b._launches = {}

if ONLY:
    sys.exit(0)

# The in-cluster merge of split partials, forced (as tests/test_cuda.py::test_cluster_merge does):
# 8 packed rows, two merge chunks (5 splits) and the 16-CTA cluster limit, empty splits in the short row.
from fmha.backends import registry
from fmha.cuda.backend import Config
b = registry()["cuda"]
for D in (64, 128, 256):
    for config in (Config.WIDE, Config.DEEP):
        for num_splits in (5, 16):
            b.launch_plan = lambda p, index, c=config, n=num_splits: (c, n)
            b._launches = {}
            q, k, v, cs = make_inputs(2, 2, 8, 2, 4000, D, device="cuda", seqlens=[4000, 100])
            launch = fmha.explain(q, k, v, cs, backend="cuda").launch
            out, lse = fmha.attention(q, k, v, cs, backend="cuda", return_lse=True)
            torch.cuda.synchronize()
            print("ran cluster merge", D, config.name.lower(), num_splits, "in clusters" if "merged inside clusters" in launch
                  else "NOT in clusters: " + launch, "nan" if torch.isnan(out).any() else "ok", flush=True)


# Two splits of the 64-row loop merged as cluster pairs (store_output_pair), forced on the deep configuration:
# 64 rows, 112 rows (two row blocks), 21 rows; an empty split and an empty row.
for D in (64, 128):
    for (T, Hq, Hkv) in ((16, 32, 8), (16, 28, 4), (3, 28, 4)):
        b.launch_plan = lambda p, index: (Config.DEEP, 2)
        b._launches = {}
        q, k, v, cs = make_inputs(3, T, Hq, Hkv, 3000, D, device="cuda", seqlens=[3000, 129, 0])
        launch = fmha.explain(q, k, v, cs, backend="cuda").launch
        out, lse = fmha.attention(q, k, v, cs, backend="cuda", return_lse=True)
        torch.cuda.synchronize()
        print("ran pair merge", D, T, Hq, Hkv, "pairs" if "as each finishes" in launch else "NOT in pairs: " + launch,
              "nan" if torch.isnan(out).any() else "ok", flush=True)


# The shallow ring (stream at D = 128, wide at D = 64) on grids of one wave: 128 CTAs unsplit (15 rows, causal)
# and 16 CTAs x 8 splits (4 rows; launched one CTA per SM), forced on short caches (the plan takes it from 2048
# keys a CTA up).
for D in (64, 128):
    for (B, T, Hq, S, splits, sl) in ((16, 3, 40, 300, 1, [300, 0, 129, 64] * 4), (2, 1, 32, 3000, 8, [3000, 129])):
        b.launch_plan = lambda p, index, c=(Config.STREAM if D == 128 else Config.WIDE), n=splits: (c, n)
        b._launches = {}
        q, k, v, cs = make_inputs(B, T, Hq, 8, S, D, device="cuda", seqlens=sl)
        launch = fmha.explain(q, k, v, cs, causal=True, backend="cuda").launch
        out, lse = fmha.attention(q, k, v, cs, causal=True, backend="cuda", return_lse=True)
        torch.cuda.synchronize()
        print("ran shallow ring", D, B, T, Hq, S, splits, launch, "nan" if torch.isnan(out).any() else "ok", flush=True)


# KV-head pairs (D = 64 read as D = 128 by the stream kernel): the plan's grid (B32 Hkv8: 128 pairs, 4 rows a
# head) on a short varlen cache, and forced on a small causal grid (T=2, 4 query heads a KV head: 16 rows a pair).
del b.launch_plan  # the class's plan again (the forced ones above were instance attributes)
b._launches = {}
for (B, T, Hq, Hkv, S, sl, force) in ((32, 1, 32, 8, 300, [300, 0, 129, 64] * 8, False),
                                      (3, 2, 8, 2, 1000, [1000, 0, 129], True)):
    if force:
        b.launch_plan = lambda p, index: (Config.KV_HEAD_PAIRS, 1)
        b._launches = {}
    q, k, v, cs = make_inputs(B, T, Hq, Hkv, S, 64, device="cuda", seqlens=sl)
    launch = fmha.explain(q, k, v, cs, causal=True, backend="cuda").launch
    out, lse = fmha.attention(q, k, v, cs, causal=True, backend="cuda", return_lse=True)
    torch.cuda.synchronize()
    print("ran head pairs", B, T, Hq, Hkv, S, "pairs" if "KV-head pairs" in launch else "NOT pairs: " + launch,
          "nan" if torch.isnan(out).any() else "ok", flush=True)
