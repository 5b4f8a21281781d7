"""golden/allreduce_mhc/mxfp8.py: E4M3 rounding from exact values, UE8M0 scales at the 448
boundary, the swizzled 128x4 layout and its padding rows."""

from __future__ import annotations

import functools
from fractions import Fraction

import numpy as np
import pytest
import torch

from golden.allreduce_mhc.mxfp8 import (
    dequantize,
    e4m3_decode,
    e4m3_encode,
    quantize,
    scale_bytes,
    scale_exponent_bytes,
    swizzled_scale_index,
)

FINITE_CODES = [c for c in range(256) if c & 0x7F != 0x7F]


@functools.cache
def e4m3_table() -> tuple[tuple[Fraction, int], ...]:
    """Every finite E4M3 value (rational) and its code, from the format's definition."""
    table = []
    for code in FINITE_CODES:
        field, mantissa = (code >> 3) & 0xF, code & 7
        magnitude = Fraction(mantissa, 8) * Fraction(2) ** -6 if field == 0 else (1 + Fraction(mantissa, 8)) * Fraction(2) ** (field - 7)
        table.append((-magnitude if code & 0x80 else magnitude, code))
    return tuple(table)


def nearest_code(value: Fraction) -> int:
    """E4M3 code by brute force: nearest finite value, ties to the even code, saturating, signed zero."""
    negative = value < 0
    best = None
    for candidate, code in e4m3_table():
        if (code & 0x80) != (0x80 if negative else 0):
            continue
        distance = abs(candidate - value)
        key = (distance, code & 1)  # on a tie, prefer the even mantissa
        if best is None or key < best[0]:
            best = (key, code)
    return best[1]


def to_bf16(values) -> torch.Tensor:
    """BF16 tensor of exactly representable Python floats."""
    t = torch.tensor(values, dtype=torch.float32)
    out = t.to(torch.bfloat16)
    assert torch.equal(out.float(), t), "test value not representable in BF16"
    return out


def test_e4m3_decode_encode_round_trip_all_codes():
    codes = torch.tensor(FINITE_CODES, dtype=torch.uint8)
    assert torch.equal(e4m3_encode(e4m3_decode(codes)), codes)
    assert e4m3_decode(torch.tensor([0x7E])).item() == 448.0
    assert e4m3_decode(torch.tensor([0x01])).item() == 2.0**-9


def test_e4m3_rounding_ties_subnormals_and_saturation():
    cases = [
        1 + 1 / 16,  # tie between 1 and 1.125 -> even (1)
        1 + 3 / 16,  # tie between 1.125 and 1.25 -> even (1.25)
        3 * 2.0**-10,  # subnormal tie between 2^-9 and 2^-8 -> 2^-8
        2.0**-10,  # tie between 0 and 2^-9 -> 0
        2.0**-10 + 2.0**-30,  # just above -> 2^-9
        7.5 * 2.0**-9,  # tie between 7*2^-9 and 2^-6 (min normal) -> 2^-6
        464.0,  # tie between 448 and 480 -> 448
        470.0, 1e6,  # saturate to 448 (satfinite)
        -1e6, -2.0**-12, -0.0, 0.0, 2.0**-6, 240.0, 0.1, -3.3,
    ]
    got = e4m3_encode(torch.tensor(cases, dtype=torch.float64)).tolist()
    for value, code in zip(cases, got):
        want = nearest_code(Fraction(value))
        if value == 0 or (value < 0 and nearest_code(Fraction(value)) & 0x7F == 0):
            want = 0x80 if np.signbit(value) else 0x00
        assert code == want, (value, hex(code), hex(want))
    rng = np.random.default_rng(5)
    values = rng.standard_normal(600) * 2.0 ** rng.integers(-12, 10, 600)
    got = e4m3_encode(torch.from_numpy(values)).tolist()
    for value, code in zip(values, got):
        assert code == nearest_code(Fraction(float(value))), (value, hex(code))


def test_scale_byte_equals_the_fp32_product_rounded_up_for_every_bf16():
    # Every positive finite BF16 amax: the exact rule equals a kernel's
    # round-up of the FP32 product amax * f32(1/448), read from its bits.
    bits = torch.arange(1, 0x7F80, dtype=torch.int32).to(torch.int16)
    amax = bits.view(torch.bfloat16).float()
    exact = scale_exponent_bytes(amax)
    product = amax * torch.tensor(1.0 / 448.0, dtype=torch.float32)
    pbits = product.view(torch.int32).to(torch.int64)
    exponent, mantissa = pbits >> 23, pbits & 0x7FFFFF
    from_bits = torch.where(exponent == 0, (mantissa > 0x400000).to(torch.int64), (exponent + (mantissa != 0)).clamp(max=254))
    assert torch.equal(exact, from_bits)
    # And the exact rule itself on a rational spot check.
    for value in (448.0, 448.0 * 2**-130, 449.0, 2.0**-133, 3.0e38):
        e = int(scale_exponent_bytes(torch.tensor([value])).item())
        assert Fraction(448) * Fraction(2) ** (e - 127) >= Fraction(value) or e == 254
        assert e == 0 or Fraction(448) * Fraction(2) ** (e - 128) < Fraction(value)


def test_zero_block_and_powers_of_two_at_448():
    x = torch.zeros(2, 64, dtype=torch.bfloat16)
    x[1, 32] = 448.0  # amax 448: scale 2^0, value 448 exactly
    x[1, 33] = -448.0
    x[1, 34] = 2.0**-9  # min E4M3 subnormal at scale 2^0
    values, scales = quantize(x)
    index = lambda r, c: int(swizzled_scale_index(torch.tensor(r), torch.tensor(c), 4))  # noqa: E731
    assert scales[index(0, 0)] == 0 and scales[index(0, 1)] == 0 and scales[index(1, 0)] == 0
    assert torch.all(values[0] == 0) and torch.all(values[1, :32] == 0)
    assert scales[index(1, 1)] == 127
    assert values[1, 32:35].tolist() == [0x7E, 0xFE, 0x01]
    for k in (-20, -1, 1, 5, 100):
        block = to_bf16([448.0 * 2.0**k] + [2.0**k] * 31).reshape(1, 32)
        v, s = quantize(block)
        assert int(s[0]) == 127 + k and int(v[0, 0]) == 0x7E
        above = to_bf16([450.0 * 2.0**k] + [0.0] * 31).reshape(1, 32)  # next BF16 above 448*2^k
        v, s = quantize(above)
        assert int(s[0]) == 128 + k and int(v[0, 0]) == int(e4m3_encode(torch.tensor([225.0])).item())


def test_tiny_block_scale_clamps_at_zero():
    block = to_bf16([2.0**-130] + [0.0] * 31).reshape(1, 32)
    values, scales = quantize(block)
    assert int(scales[0]) == 0  # 2^-127 >= amax/448
    assert float(dequantize(values, scales, 1, 32)[0, 0]) == float(e4m3_decode(values[0, :1]).item()) * 2.0**-127
    assert int(values[0, 0]) == nearest_code(Fraction(2) ** -3)


def test_swizzle_matches_a_direct_walk_of_the_tiles():
    rows, cols = 300, 8 * 32  # 8 scale columns, 3 row tiles (last one partial)
    padded_cols = 8
    expected = {}
    offset = 0
    for row_tile in range(3):
        for col_group in range(padded_cols // 4):
            for row_in_32 in range(32):
                for row_group in range(4):
                    for col_in_4 in range(4):
                        row = row_tile * 128 + row_group * 32 + row_in_32
                        expected[(row, col_group * 4 + col_in_4)] = offset
                        offset += 1
    assert offset == scale_bytes(rows, cols)
    r = torch.tensor([k[0] for k in expected])
    c = torch.tensor([k[1] for k in expected])
    assert swizzled_scale_index(r, c, padded_cols).tolist() == list(expected.values())


@pytest.mark.parametrize("rows,cols", [(130, 128), (1, 256), (5, 96)])
def test_padding_rows_and_round_trip(rows, cols):
    torch.manual_seed(rows + cols)
    x = (torch.randn(rows, cols) * torch.pow(2.0, torch.randint(-8, 8, (rows, 1)).float())).bfloat16()
    values, scales = quantize(x)
    assert values.shape == (rows, cols) and values.dtype == torch.uint8
    assert scales.numel() == scale_bytes(rows, cols)
    used = torch.zeros_like(scales, dtype=torch.bool)
    r = torch.arange(rows)[:, None].expand(rows, cols // 32)
    c = torch.arange(cols // 32)[None, :].expand(rows, cols // 32)
    padded_cols = -(-(cols // 32) // 4) * 4
    used[swizzled_scale_index(r, c, padded_cols).reshape(-1)] = True
    assert torch.all(scales[~used] == 0) and torch.all(scales[used] > 0)
    back = dequantize(values, scales, rows, cols)
    scale = torch.pow(2.0, scales[swizzled_scale_index(r, c, padded_cols)].double() - 127)
    # Half an E4M3 quantum at the block's largest binade bounds the error.
    bound = scale.repeat_interleave(32, dim=1) * 2.0**8 * 2.0**-4
    assert torch.all((back - x.double()).abs() <= bound)


def test_rejects_bad_input():
    with pytest.raises(ValueError, match="x must be a bfloat16"):
        quantize(torch.zeros(2, 32))
    with pytest.raises(ValueError, match="multiple of 32"):
        quantize(torch.zeros(2, 48, dtype=torch.bfloat16))


def test_nan_and_inf_blocks_by_hand():
    """Contract item 5 on blocks derived by hand from the OCP MX rules (E4M3: bias 7, 3 mantissa bits, NaN
    S.1111.111; UE8M0: bias 127), not from a kernel run. Row 0: block 0 holds NaN, +Inf, -Inf, 3.0, -2.5,
    -0.0 and zeros; block 1 is finite (1.0, 448, -2, 0.25). Row 1: block 0 a negative NaN and a finite
    value, block 1 all zero."""
    x = torch.zeros(2, 64, dtype=torch.float32)
    x[0, :6] = torch.tensor([float("nan"), float("inf"), float("-inf"), 3.0, -2.5, -0.0])
    x[0, 32:36] = torch.tensor([1.0, 448.0, -2.0, 0.25])
    x[1, 0], x[1, 1] = -float("nan"), 7.0
    values, scales = quantize(x.to(torch.bfloat16))
    # Block (0, 0): scale saturated at 0xFE; NaN and +-Inf are the E4M3 NaN 0x7F; 3.0 and +0 are +0 (0x00),
    # -2.5 and -0.0 are -0 (0x80): every element times the kernel's +0.0 multiplier.
    assert values[0, :6].tolist() == [0x7F, 0x7F, 0x7F, 0x00, 0x80, 0x80]
    assert values[0, 6:32].tolist() == [0x00] * 26
    # Block (0, 1): amax 448 -> scale 2^0 (0x7F); 1.0 = 0.0111.000, 448 = 0.1111.110, -2 = 1.1000.000,
    # 0.25 = 0.0101.000.
    assert values[0, 32:36].tolist() == [0x38, 0x7E, 0xC0, 0x28]
    # Row 1: the negative NaN's block saturates too (integer max of |bits|), 7.0 becomes +0; an all-zero block
    # has scale 0x00 and +0 values.
    assert values[1, :2].tolist() == [0x7F, 0x00] and values[1, 32:].tolist() == [0x00] * 32
    # Scales of rows 0 and 1, columns 0 and 1: bytes 0, 1 and 16, 17 of the 128x4 tile.
    assert (scales[0].item(), scales[1].item(), scales[16].item(), scales[17].item()) == (0xFE, 0x7F, 0xFE, 0x00)
    decoded = dequantize(values, scales, 2, 64)
    assert torch.isnan(decoded[0, :3]).all() and torch.equal(decoded[0, 3:32], torch.zeros(29, dtype=torch.float64))
    assert decoded[0, 32:36].tolist() == [1.0, 448.0, -2.0, 0.25]
