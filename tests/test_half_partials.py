"""The fp16 split partials' arithmetic (fmha/cuda/csrc/common/epilogue.cuh store_partials_f16, common/combine.cuh
combine_half_splits_kernel, the layout of common/params.h), modelled in Python and checked without a GPU: the scale a
row keeps every value of any fp32 magnitude within fp16's rounding (2^-11 relative) and never overflows, an empty row
stays 0, and the positions a thread's 8-byte stores write are the columns half_partial_col reads back. The GPU tests
(test_deepseek.py -k "fp16_partials or combine") run the kernels themselves."""
from __future__ import annotations

import struct

import pytest
import torch

U16 = 2.0 ** -11  # fp16's unit roundoff


def exponent(x: float) -> int:
    """(bits >> 23 & 0xff) - 127 of an fp32 number, as the epilogue takes it: floor(log2 x) for a normal x > 0."""
    return ((struct.unpack("<I", struct.pack("<f", x))[0] >> 23) & 0xFF) - 127


def encode(o: torch.Tensor):
    """One warpgroup's 256 columns of a row (fp32), as store_partials_f16 writes them: (fp16 values, scale)."""
    amax = float(o.abs().max())
    shift = min(126, max(-114, 14 - exponent(amax)))
    return (o * 2.0 ** shift).to(torch.float16), 2.0 ** -shift  # (a power of two: the product is exact in fp32)


def half_partial_col(pos: int) -> int:
    return (pos & ~15) + ((pos & 15) >> 1)


# (5e37 x randn stays below fp32's max; 1e-38 x randn is partly subnormal)
@pytest.mark.parametrize("magnitude", [1e-38, 1e-30, 1e-8, 1e-3, 1.0, 3e4, 7e4, 1e8, 1e30, 5e37])
def test_a_row_scale_keeps_fp16_precision_at_any_magnitude(magnitude):
    g = torch.Generator().manual_seed(int(abs(torch.log10(torch.tensor(magnitude)).item() * 7)) + 1)
    for spread in (1.0, 1e-4, 1e-9):  # values down to 1e-9 of the row's max keep their relative precision
        o = torch.randn(256, generator=g) * magnitude
        o[::7] *= spread
        o = o.float()
        values, scale = encode(o)
        assert torch.isfinite(values).all(), f"{magnitude}: fp16 overflow"
        assert values.abs().max().item() < 2.0 ** 15
        back = values.float() * scale
        # fp16 normal numbers round to 2^-11 of the value; below 2^-14 (scaled) the spacing is 2^-24
        bound = U16 * o.abs() + 2.0 ** -25 * scale
        assert ((back - o).abs() <= bound).all(), f"{magnitude} spread {spread}: {((back - o).abs() / bound).max()}"


def test_an_empty_row_stays_zero_and_nan_stays_nan():
    values, scale = encode(torch.zeros(256))
    assert (values.float() * scale == 0).all() and scale == 2.0 ** -126
    o = torch.ones(256)
    o[3] = float("nan")
    values, scale = encode(o)
    assert torch.isnan(values.float()[3] * scale)


def test_stores_and_reads_meet_at_every_column():
    """Thread (quad lane q) of row h writes blocks 2 j and 2 j + 1 (columns 16 j + 2 q + {0, 1} and 16 j + 8 + 2 q +
    {0, 1}, the m64nN fragment's) at positions 16 j + 4 q .. + 3; the combine's group at position p reads columns
    half_partial_col(p) + 0, 1, 8, 9. Both cover the 256 columns of a warpgroup once."""
    written = {}
    for q in range(4):
        for j in range(16):
            cols = [16 * j + 2 * q, 16 * j + 2 * q + 1, 16 * j + 8 + 2 * q, 16 * j + 8 + 2 * q + 1]
            for e, c in enumerate(cols):
                written[16 * j + 4 * q + e] = c
    assert sorted(written) == list(range(256)) and sorted(written.values()) == list(range(256))
    for pos in range(0, 256, 4):
        c = half_partial_col(pos)
        assert [written[pos + e] for e in range(4)] == [c, c + 1, c + 8, c + 9]
