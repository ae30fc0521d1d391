"""The decode shapes the suite measures, grouped in named presets.

Every shape is bf16 decode attention: q [B, T, Hq, D] against a full cache
[B, S, Hkv, D] (no per-sequence lengths), bottom-right causal when T > 1; the
`deepseek` preset's LatentShape reads one latent cache as K (all D columns) and
V (its first Dv). A shape's name spells all of its dimensions, so `--shapes` can
filter on any of them (`--shapes serve`, `--shapes S8192`, `--shapes D512,spec`).
"""
from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(frozen=True)
class Shape:
    family: str
    B: int
    S: int
    T: int = 1
    Hq: int = 32
    Hkv: int = 8
    D: int = 128
    causal: bool = True
    # A sliding window's left bound (`window_size=(window, -1)`, with causal the right edge is the diagonal): query t
    # at i = S - T + t sees keys i - window .. i; -1: the whole cache.
    window: int = -1
    softcap: float = 0.0  # Gemma 2's score cap (`softcap`), 0: none
    sinks: bool = False  # gpt-oss's per-head sink logits (`sinks`, float32 [Hq]; the suite draws them)

    @property
    def G(self) -> int:
        return self.Hq // self.Hkv

    @property
    def tokens(self) -> int:
        """Cache tokens per call, B x S."""
        return self.B * self.S

    @property
    def kv_tokens(self) -> int:
        """Cache tokens a call must read, over the batch: the window's (window + T per sequence) or all."""
        return self.B * (self.S if self.window < 0 else min(self.S, self.window + self.T))

    @property
    def masked(self) -> bool:
        """Does a mask hide anything? (T = 1 without a window sees the whole cache.)"""
        return (self.causal and self.T > 1) or 0 <= self.window < self.S - 1

    @property
    def name(self) -> str:
        return (f"{self.family}/B{self.B}-T{self.T}-Hq{self.Hq}-Hkv{self.Hkv}-S{self.S}-D{self.D}"
                f"{'-causal' if self.causal and self.T > 1 else ''}"
                f"{f'-W{self.window}' if self.window >= 0 else ''}{f'-cap{self.softcap:g}' if self.softcap else ''}"
                f"{'-sinks' if self.sinks else ''}")

    def tiny(self) -> "Shape":
        """A CPU-sized stand-in with the same family, T, group size and head dim (--dry-run); a window a
        quarter of the tiny cache."""
        hkv = min(self.Hkv, 2)
        S = max(16, min(256, self.S // 256))
        return replace(self, B=min(self.B, 2), S=S, Hkv=hkv, Hq=hkv * min(self.G, 4),
                       window=min(self.window, S // 4))


@dataclass(frozen=True)
class LatentShape:
    """A DeepSeek decode shape (`--preset deepseek`): MQA over one latent vector per token that is K (its D
    columns) and V (its first Dv), bottom-right causal when T > 1."""
    family: str
    B: int
    S: int
    Hq: int
    T: int = 1
    D: int = 576
    Dv: int = 512
    Hkv: int = 1
    causal: bool = True

    @property
    def G(self) -> int:
        return self.Hq // self.Hkv

    @property
    def masked(self) -> bool:
        return self.causal and self.T > 1

    @property
    def name(self) -> str:
        return (f"{self.family}/B{self.B}-T{self.T}-Hq{self.Hq}-Hkv{self.Hkv}-S{self.S}-D{self.D}-Dv{self.Dv}"
                f"{'-causal' if self.masked else ''}")

    def tiny(self) -> "LatentShape":
        """A CPU-sized stand-in (--dry-run): two sequences of two 64-token pages, 4 query heads."""
        return replace(self, B=min(self.B, 2), S=128, Hq=min(self.Hq, 4))


def _serving(B, S, **kw):
    return Shape("serve", B=B, S=S, **kw)


# Llama-3-8B-like attention (Hq 32, Hkv 8, D 128) unless stated.
SMALL = [Shape("small", B=4, S=128), Shape("small", B=4, S=512)]
SERVING = [  # B x S from 8K to 1M cache tokens
    _serving(1, 8192),
    _serving(8, 8192),
    _serving(1, 65536),
    _serving(32, 4096),
    _serving(1, 262144),
    _serving(16, 32768),
    _serving(128, 8192),
    _serving(64, 16384),
]
SPECULATIVE = [Shape("spec", B=32, S=4096, T=4), Shape("spec", B=8, S=8192, T=16)]
MQA = [Shape("mqa", B=128, S=4096, Hq=16, Hkv=1, D=512), Shape("mqa", B=64, S=4096, Hq=128, Hkv=1, D=512)]
HEAD_DIMS = [Shape("d64", B=32, S=8192, D=64), Shape("d256", B=32, S=8192, Hq=16, Hkv=8, D=256)]
# One GPU's shard of a tensor-parallel model: Llama-3-70B-like attention (Hq 64, Hkv 8) over 8 GPUs, one KV head
# a GPU; grids of one CTA per sequence before the split.
TENSOR_PARALLEL = [Shape("tp", B=1, S=8192, Hq=8, Hkv=1), Shape("tp", B=1, S=32768, Hq=8, Hkv=1)]

# Paged KV caches against contiguous ones (`--preset paged`, perf/paged.py; issue 26): the suite's own
# shapes, D = 128 (B128 S8K, B1 S64K, the T=4 spec shape), 64, 256 and 512 (MQA Hq16/Hkv1).
PAGED = [_serving(128, 8192), _serving(1, 65536), SPECULATIVE[0], HEAD_DIMS[0], HEAD_DIMS[1], MQA[0]]
PAGE_SIZES = (256, 64, 16, 1)
# Page size 1 (the gather path, token-level tables) only on these two by default: it is the slowest case.
PAGE1_SHAPES = (_serving(128, 8192).name, _serving(1, 65536).name)

# DeepSeek decode (`--preset deepseek`, perf/deepseek.py; issue 27). V3 / R1: keys of 576 columns (512 latent + 64
# rope), values the first 512; the (B, Hq, S) table at T = 1, 2 and 4. V4: K = V, 512 columns, T = 1.
MLA_TABLE = ((128, 16, 4096), (64, 128, 4096), (16, 128, 4096), (32, 64, 8192))
DEEPSEEK = ([LatentShape("mla", B=b, S=s, Hq=h, T=t) for b, h, s in MLA_TABLE for t in (1, 2, 4)]
            + [LatentShape("v4", B=32, S=8192, Hq=64, D=512, Dv=512),
               LatentShape("v4", B=64, S=4096, Hq=128, D=512, Dv=512)])

# Sliding-window layers (`--preset window`), a model's window of W keys (the query's own included) being
# window = W - 1: gpt-oss's (64 query heads, 8 KV heads, D 64, 128 keys and a sink logit per head; T = 4 as in
# speculative decode), Mistral 7B's (4096 keys), Gemma 3's local layers (1024 keys, Hq 32 / Hkv 16) and Gemma 2's
# (4096 keys, D 256, scores capped at 50), each over a cache longer than its window.
WINDOW = [Shape("swa", B=64, S=8192, Hq=64, Hkv=8, D=64, window=127, sinks=True),
          Shape("swa", B=64, S=8192, T=4, Hq=64, Hkv=8, D=64, window=127, sinks=True),
          Shape("swa", B=32, S=32768, window=4095),
          Shape("swa", B=32, S=16384, Hq=32, Hkv=16, window=1023),
          Shape("swa", B=16, S=16384, Hq=16, Hkv=8, D=256, window=4095, softcap=50.0)]

PRESETS = {
    "full": SMALL + SERVING + SPECULATIVE + MQA + HEAD_DIMS + TENSOR_PARALLEL,
    "quick": [SMALL[1], _serving(8, 8192), _serving(32, 4096), _serving(128, 8192),
              SPECULATIVE[0], MQA[0], HEAD_DIMS[1]],
    "paged": PAGED,
    "deepseek": DEEPSEEK,
    "window": WINDOW,
}


def paged_cases(filters: str | None = None, page_sizes=None) -> list:
    """[(shape, page sizes)] of the paged preset: PAGE_SIZES, page size 1 only on PAGE1_SHAPES, unless
    `page_sizes` (--page-sizes) gives the list for every shape."""
    out = []
    for s in select("paged", filters):
        ps = list(page_sizes) if page_sizes else [p for p in PAGE_SIZES if p != 1 or s.name in PAGE1_SHAPES]
        out.append((s, ps))
    return out


def select(preset: str, filters: str | None = None) -> list:
    """The preset's shapes whose name contains any of the comma-separated `filters`."""
    if preset not in PRESETS:
        raise SystemExit(f"--preset: unknown preset {preset!r}; choose from {', '.join(PRESETS)}")
    shapes = PRESETS[preset]
    if filters:
        wanted = [f.strip() for f in filters.split(",") if f.strip()]
        shapes = [s for s in shapes if any(w in s.name for w in wanted)]
        if not shapes:
            raise SystemExit(f"--shapes {filters!r} matches no shape of preset {preset!r}; names look like "
                             f"{PRESETS[preset][0].name}")
    return shapes
