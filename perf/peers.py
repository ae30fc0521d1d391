"""Peer implementations fmha is measured against: PyTorch SDPA (one kernel backend at
a time) and FlexAttention (compiled once per shape).

A contender turns one shape's input sets into `fn(i) -> out [B, T, Hq, D]`, one
attention call on input set i. Peers read their native [B, H, L, E] layout:
contiguous copies of the same caches, made once per shape outside any timing
(`ShapeInputs.bhld`). What a peer cannot do is an `Unsupported` with a short
reason, raised by `prepare` or by the first call, never a silent omission.

Causal decode with T > 1 is bottom-right aligned (query t sees keys
j <= S - T + t). SDPA's `is_causal` is top-left aligned, so SDPA gets an
explicit boolean mask [T, S] instead; the flash backend takes no mask at all
(PyTorch says so and the shape is reported unsupported), the efficient and
cuDNN backends accept one. FlexAttention gets the same rule as a block mask.
With T = 1 and no window nothing is masked and no mask is passed. A sliding
window (query t at i = S - T + t sees keys i - window .. i) joins the same mask;
SDPA has no score cap (softcap), FlexAttention takes it as a score_mod; neither
takes sink logits (gpt-oss): SDPA refuses them, Flex's rows are rescaled from its
LSE (compiled with the call).
"""
from __future__ import annotations

import contextlib
import re
import time
import warnings
from typing import Callable

import torch
import torch.nn.functional as F

SDPA_BACKENDS = {  # contender name -> torch.nn.attention.SDPBackend member
    "sdpa-flash": "FLASH_ATTENTION",
    "sdpa-efficient": "EFFICIENT_ATTENTION",
    "sdpa-cudnn": "CUDNN_ATTENTION",
}


class Unsupported(Exception):
    """This contender cannot run this shape; str(e) is the reason."""


def short_reason(text: str, limit: int = 80) -> str:
    """First meaningful line of an error, without PyTorch's "(Triggered internally ...)" tail."""
    lines = [ln.strip() for ln in str(text).splitlines() if ln.strip()]
    line = lines[0] if lines else "no reason given"
    line = re.sub(r"\s*\(Triggered internally at .*$", "", line)
    line = re.sub(r"^(torch\.\w+\.)*(exc\.)?\w*(Error|Exception):\s*", "", line)
    return line if len(line) <= limit else line[: limit - 3] + "..."


class Contender:
    name = ""
    is_fmha = False
    compiles = False  # the first call compiles (its time is reported as compile_s)
    note = ""

    def context(self):
        """Entered around everything the contender does for one shape (checks, capture, timing)."""
        return contextlib.nullcontext()

    def prepare(self, inputs) -> Callable[[int], torch.Tensor]:
        raise NotImplementedError

    def first_call(self, fn, i: int = 0) -> torch.Tensor:
        """Call fn(i) once, turning a refusal into Unsupported."""
        return fn(i)


class FmhaBackendContender(Contender):
    """An fmha backend's contender: a NotImplementedError (the backend refuses the problem) is Unsupported."""

    def first_call(self, fn, i=0):
        try:
            return fn(i)
        except NotImplementedError as e:
            raise Unsupported(str(e)) from e


class PeerLibraryContender(Contender):
    """Another library's kernel (FlashInfer, FlashMLA): any exception of its first call is the column's reason."""

    def first_call(self, fn, i=0):
        try:
            return fn(i)
        except Exception as e:
            raise Unsupported(f"{type(e).__name__}: {short_reason(e, 160)}") from e


class SdpaContender(Contender):
    def __init__(self, name: str):
        self.name = name
        self.member = SDPA_BACKENDS[name]
        self.note = f"F.scaled_dot_product_attention under sdpa_kernel([SDPBackend.{self.member}])"

    def context(self):
        from torch.nn.attention import SDPBackend, sdpa_kernel
        return sdpa_kernel([getattr(SDPBackend, self.member)])

    def prepare(self, inputs):
        shape = inputs.shape
        if getattr(shape, "softcap", 0.0):
            raise Unsupported("softcap: F.scaled_dot_product_attention has no score cap")
        if getattr(shape, "sinks", False):
            raise Unsupported("sinks: F.scaled_dot_product_attention has no sink logits")
        sets = inputs.bhld()
        mask = inputs.bottom_right_mask()  # None when nothing is masked
        gqa = shape.Hq != shape.Hkv

        def fn(i):
            q, k, v = sets[i]
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=gqa).transpose(1, 2)

        return fn

    def first_call(self, fn, i=0):
        # SDPA explains a refusal only in warnings ("Flash attention does not support ..."),
        # then raises "No available kernel"; keep the explanation as the reason.
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                return fn(i)
            except RuntimeError as e:
                why = [short_reason(w.message) for w in caught]
                why = [w for w in why if not w.rstrip(".").endswith("because:")]
                raise Unsupported("; ".join(why[:2]) if why else short_reason(e)) from e


class FlexContender(Contender):
    name = "flex"

    def __init__(self, compile: bool = True):
        self.compile = compile
        self.compiles = compile
        self.note = ("flex_attention, torch.compile(dynamic=False) once per shape" if compile
                     else "flex_attention, eager (dry run: not compiled)")

    def prepare(self, inputs):
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention
        shape = inputs.shape
        sets = inputs.bhld()
        sinks = inputs.sinks
        if sinks is not None:
            # Flex has no sink logit: its rows (softmax denominator e^lse) rescaled by e^lse / (e^lse + e^sink),
            # compiled with it so that the rescale can fuse into one elementwise kernel.
            def attend(q, k, v, score_mod=None, block_mask=None, enable_gqa=False):
                out, lse = flex_attention(q, k, v, score_mod=score_mod, block_mask=block_mask, enable_gqa=enable_gqa,
                                          return_lse=True)
                return (out * torch.sigmoid(lse - sinks.view(1, -1, 1)).unsqueeze(-1)).to(out.dtype)
        else:
            attend = flex_attention
        if self.compile:
            # A fresh compile per shape: no recompile limit, no dynamic-shape guesswork.
            torch._dynamo.reset()
            attn = torch.compile(attend, dynamic=False)
        else:
            attn = attend
        block_mask = score_mod = None
        if shape.masked:
            offset, window, causal = shape.S - shape.T, getattr(shape, "window", -1), shape.causal

            def bottom_right(b, h, q_idx, kv_idx):
                seen = kv_idx <= q_idx + offset if causal else kv_idx >= 0
                return seen & (kv_idx >= q_idx + offset - window) if window >= 0 else seen

            block_mask = create_block_mask(bottom_right, None, None, shape.T, shape.S, device=inputs.device)
        cap = getattr(shape, "softcap", 0.0)
        if cap:
            def score_mod(score, b, h, q_idx, kv_idx):
                return cap * torch.tanh(score / cap)
        gqa = shape.Hq != shape.Hkv

        def fn(i):
            q, k, v = sets[i]
            return attn(q, k, v, score_mod=score_mod, block_mask=block_mask, enable_gqa=gqa).transpose(1, 2)

        return fn

    def first_call(self, fn, i=0):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                return fn(i)
        except Exception as e:  # compile errors come in many types (Inductor, Triton, Dynamo)
            raise Unsupported(f"{type(e).__name__}: {short_reason(e, 70)}") from e


def make_peers(names, compile_flex: bool = True) -> list:
    peers = []
    for name in names:
        if name in SDPA_BACKENDS:
            peers.append(SdpaContender(name))
        elif name == "flex":
            peers.append(FlexContender(compile=compile_flex))
        else:
            raise SystemExit(f"unknown peer {name!r}; peers: {', '.join(list(SDPA_BACKENDS) + ['flex'])}")
    return peers


PEER_NAMES = list(SDPA_BACKENDS) + ["flex"]


def timed_first_call(contender: Contender, fn) -> tuple:
    """(out, seconds) of the first call, synchronised: for a compiling peer this is the compile time."""
    t0 = time.perf_counter()
    out = contender.first_call(fn)
    if out.is_cuda:
        torch.cuda.synchronize()
    return out, time.perf_counter() - t0
