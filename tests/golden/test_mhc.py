"""golden/allreduce_mhc/mhc.py: the post-mix/collapse order against an element-by-element
loop with rational FMAs, and the FMA single rounding the contract relies on."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
import torch

from golden.fp32 import fma_f32
from golden.allreduce_mhc.mhc import collapse, post_mix


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
