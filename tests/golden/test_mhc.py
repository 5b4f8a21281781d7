"""golden/mhc.py: exact FMA and BF16 rounding against rational arithmetic, and
the post-mix/collapse order against an element-by-element loop."""

from __future__ import annotations

import math
import struct
from fractions import Fraction

import numpy as np
import pytest
import torch

from golden.mhc import bf16_bits, bf16_round, collapse, fma_f32, post_mix


def round_fraction(value: Fraction, mantissa_bits: int, min_exp: int) -> Fraction:
    """``value`` rounded to nearest-even on a binary grid with ``mantissa_bits`` bits and least exponent ``min_exp``."""
    if value == 0:
        return Fraction(0)
    sign = -1 if value < 0 else 1
    magnitude = abs(value)
    exponent = magnitude.numerator.bit_length() - magnitude.denominator.bit_length()
    while Fraction(2) ** exponent > magnitude:
        exponent -= 1
    while Fraction(2) ** (exponent + 1) <= magnitude:
        exponent += 1
    quantum = Fraction(2) ** (max(exponent, min_exp) - mantissa_bits)
    return sign * round(magnitude / quantum) * quantum  # round() on a Fraction is half-to-even


def exact_f32(value: Fraction) -> float:
    """The FP32 nearest (ties to even) to a rational (finite range)."""
    return float(np.float32(float(round_fraction(value, 23, -126))))


def f32(x: float) -> float:
    """``x`` as an FP32 value (exact Python float)."""
    return float(np.float32(x))


def f32_from_bits(bits: int) -> float:
    """The FP32 value with bit pattern ``bits``."""
    return struct.unpack("<f", struct.pack("<I", bits))[0]


def fma_reference(a: float, b: float, c: float) -> float:
    """FP32 ``a*b + c`` with one rounding, computed in rationals (zero signs as IEEE)."""
    exact = Fraction(a) * Fraction(b) + Fraction(c)
    if exact == 0:
        product_negative = (math.copysign(1, a) * math.copysign(1, b)) < 0
        return -0.0 if product_negative and math.copysign(1, c) < 0 else 0.0
    return exact_f32(exact)


def as_tensor(values) -> torch.Tensor:
    """FP32 tensor of Python floats."""
    return torch.tensor(values, dtype=torch.float32)


def test_fma_single_rounding_where_fp64_double_rounds():
    # a*b = 1 + 2^-11 + 2^-24 exactly: an FP32 midpoint. A tiny c pushes the
    # true value above it; rounding first to FP64 would lose c and tie to even.
    a = b = 1 + 2.0**-12
    c = 2.0**-80
    got = fma_f32(as_tensor([a]), as_tensor([b]), as_tensor([c])).item()
    assert got == fma_reference(a, b, c) == 1 + 2.0**-11 + 2.0**-23
    naive = float(np.float32(a * b + c))  # the double-rounded answer
    assert naive != got
    # Below the midpoint the same trick must round down.
    got_down = fma_f32(as_tensor([a]), as_tensor([b]), as_tensor([-c])).item()
    assert got_down == fma_reference(a, b, -c) == 1 + 2.0**-11


def test_fma_matches_rationals_on_random_and_edge_operands():
    rng = np.random.default_rng(4)
    a = rng.standard_normal(3000).astype(np.float32) * np.float32(2.0) ** rng.integers(-30, 30, 3000).astype(np.float32)
    b = rng.standard_normal(3000).astype(np.float32)
    c = -(a.astype(np.float64) * b).astype(np.float32) * (1 + rng.integers(-3, 4, 3000) * 2.0**-22).astype(np.float32)
    # Subnormal results, exact cancellation, signed zeros.
    extra = [
        (2.0**-75, 2.0**-70, 0.0),
        (-(2.0**-75), 2.0**-70, 2.0**-149),
        (3.0, 5.0, -15.0),
        (-0.0, 1.0, -0.0),
        (0.0, -1.0, -0.0),
        (-0.0, 1.0, 0.0),
        (f32_from_bits(0x7F7FFFFF), 2.0, -f32_from_bits(0x7F7FFFFF)),
    ]
    av = [float(v) for v in a] + [e[0] for e in extra]
    bv = [float(v) for v in b] + [e[1] for e in extra]
    cv = [float(v) for v in c] + [e[2] for e in extra]
    got = fma_f32(as_tensor(av), as_tensor(bv), as_tensor(cv)).tolist()
    for x, y, z, g in zip(av, bv, cv, got):
        want = fma_reference(x, y, z)
        assert struct.pack("<f", g) == struct.pack("<f", want), (x, y, z, g, want)


def test_bf16_round_is_rn_even_with_canonical_nan():
    bits = [0x3F808000, 0x3F818000, 0x3F808001, 0x7F7FFFFF, 0xFF7FFFFF, 0x00008000, 0x80018000, 0x807FFFFF]
    values = as_tensor([f32_from_bits(b) for b in bits])
    got = bf16_bits(bf16_round(values)).tolist()
    for b, g in zip(bits, got):
        exact = Fraction(f32_from_bits(b))
        rounded = round_fraction(exact, 7, -126)
        if abs(rounded) >= Fraction(2) ** 128:  # RN overflow
            want = 0xFF80 if exact < 0 else 0x7F80
        else:
            want = struct.unpack("<I", struct.pack("<f", float(rounded)))[0] >> 16
            if rounded == 0 and exact < 0:
                want = 0x8000
        assert g == want, (hex(b), hex(g), hex(want))
    for nan_bits in (0x7FC00000, 0xFFC00001, 0x7F800001, 0xFFFFFFFF):
        nan = torch.tensor([nan_bits], dtype=torch.int64).to(torch.int32).view(torch.float32)
        assert bf16_bits(bf16_round(nan)).item() == 0x7FFF
    infinities = as_tensor([float("inf"), float("-inf")])
    assert bf16_bits(bf16_round(infinities)).tolist() == [0x7F80, 0xFF80]
    finite = torch.randn(10000) * 1e3
    assert torch.equal(bf16_round(finite).view(torch.int16), finite.to(torch.bfloat16).view(torch.int16))


def mix_loop(reduced, residual, post, comb, pre):
    """Element-by-element reference of the post-mix and collapse (numpy FP32 scalars, rational FMAs)."""
    m_rows, hc, hidden = residual.shape
    out = np.zeros((m_rows, hc, hidden), dtype=np.float32)
    prenorm = np.zeros((m_rows, hidden), dtype=np.float32)
    for m in range(m_rows):
        for h in range(hidden):
            f = float(reduced[m, h])
            streams = []
            for j in range(hc):
                mixed = float(np.float32(f) * np.float32(post[m, j]))
                for i in range(hc):
                    mixed = fma_reference(float(residual[m, i, h]), float(comb[m, i, j]), mixed)
                rounded = float(torch.tensor([mixed], dtype=torch.float32).to(torch.bfloat16).float())
                out[m, j, h] = rounded
                streams.append(rounded)
            c = 0.0
            for j in range(hc):
                c = fma_reference(streams[j], float(pre[m, j]), c)
            prenorm[m, h] = float(torch.tensor([c], dtype=torch.float32).to(torch.bfloat16).float())
    return out, prenorm


def test_post_mix_and_collapse_follow_the_contract_elementwise():
    torch.manual_seed(1)
    m_rows, hc, hidden = 2, 4, 24
    reduced = (torch.randn(m_rows, hidden) * 3).bfloat16()
    residual = (torch.randn(m_rows, hc, hidden) * 10).bfloat16()
    post = torch.rand(m_rows, hc) * 2
    comb = torch.rand(m_rows, hc, hc)
    pre = torch.rand(m_rows, hc)
    out = post_mix(reduced, residual, post, comb)
    prenorm = collapse(out, pre)
    want_out, want_prenorm = mix_loop(
        reduced.float().numpy(), residual.float().numpy(), post.numpy(), comb.numpy(), pre.numpy()
    )
    assert torch.equal(out.float(), torch.from_numpy(want_out))
    assert torch.equal(prenorm.float(), torch.from_numpy(want_prenorm))


def test_fma_order_is_observable():
    # A cancelling mix: the sum's order and the FMA's single rounding both
    # matter, so a reordered or unfused golden would give other bits.
    reduced = torch.tensor([[1.0]], dtype=torch.bfloat16)
    residual = torch.tensor([[[2.0**24], [1.0], [-(2.0**24)], [0.0]]], dtype=torch.bfloat16)
    post = torch.tensor([[1.0, 0.0, 0.0, 0.0]])
    comb = torch.zeros(1, 4, 4)
    comb[0, :, 0] = 1.0
    out = post_mix(reduced, residual, post, comb)
    sources = [2.0**24, 1.0, -(2.0**24), 0.0]

    def mix(order):
        mixed = 1.0  # reduced * post[0]
        for i in order:
            mixed = fma_reference(sources[i], 1.0, mixed)
        return mixed

    assert out[0, 0, 0].item() == mix([0, 1, 2, 3]) == 0.0
    assert mix([3, 2, 1, 0]) == 2.0  # the reverse order: a wrong golden would show it


@pytest.mark.parametrize("shape", [(3, 4, 16), (1, 2, 8)])
def test_post_mix_shapes_and_dtypes(shape):
    m_rows, hc, hidden = shape
    out = post_mix(torch.zeros(m_rows, hidden, dtype=torch.bfloat16), torch.ones(m_rows, hc, hidden, dtype=torch.bfloat16),
                   torch.ones(m_rows, hc), torch.eye(hc).expand(m_rows, hc, hc).contiguous())
    assert out.dtype == torch.bfloat16 and out.shape == (m_rows, hc, hidden)
    assert torch.equal(out.float(), torch.ones(m_rows, hc, hidden))
