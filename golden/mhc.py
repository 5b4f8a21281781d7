"""mHC post-mix and pre-mix collapse of seed 004's consumer, and the exact
FP32/BF16 primitives the whole ``allreduce_mhc`` golden family uses.

Arithmetic contract (per token, per hidden element h; every FP32 op rounds to
nearest-even, once; subnormals are kept everywhere: no FTZ, no DAZ):

1. ``f = f32(reduced[h])``: the all-reduced sublayer output is already BF16
   (``bf16_rn`` of the rank-order FP32 sum, see ``golden/allreduce.py``), as
   the unfused collective returns it, before the mix reads it.
2. For each target stream ``j`` in ``0..hc-1``::

       m = f * post[j]                                  mul.rn.f32 (rounded)
       for source i = 0, 1, ..., hc-1 (ascending):
           m = fma(f32(residual[i, h]), comb[i, j], m)  fma.rn.f32 (one rounding)
       out[j, h] = bf16_rn(m)                           -> residual_out

   This is what the seed's consumer compiles to: ``mixed = reduced * post``
   stays a separate multiply, and each ``mixed + res * comb`` is contracted
   into one FMA whose addend is the running value (checked on CuTe DSL 4.8.1's
   PTX for the seed's expression).
3. Collapse over the BF16-rounded streams::

       c = +0.0
       for j = 0, ..., hc-1:  c = fma(f32(out[j, h]), pre[j], c)   fma.rn.f32
       prenorm[h] = bf16_rn(c)                          -> RMSNorm input

``bf16_rn`` is ``cvt.rn.bf16.f32``: round to nearest-even on the FP32 bits,
overflow to Inf, and every NaN becomes the canonical BF16 NaN ``0x7FFF`` (the
GPU instruction's result; torch's CPU cast gives other NaN bits, so the golden
never uses it). ``fma_f32`` is emulated exactly: the product of two FP32
values is exact in FP64, the FP64 sum is made round-to-odd from its exact
error (TwoSum), and one final FP64->FP32 rounding then equals the single
rounding of the true ``a * b + c`` (round-to-odd with 29 spare bits removes
double rounding). All functions are pure torch and give the same bits on CPU
and GPU.
"""

from __future__ import annotations

import torch

CANONICAL_BF16_NAN = 0x7FFF


def bf16_round(values: torch.Tensor) -> torch.Tensor:
    """Round FP32 ``values`` to BF16 as ``cvt.rn.bf16.f32`` does (NaN -> 0x7FFF)."""
    if values.dtype != torch.float32:
        raise TypeError(f"bf16_round expects float32, got {values.dtype}")
    bits = values.contiguous().view(torch.int32).to(torch.int64) & 0xFFFFFFFF
    lsb = (bits >> 16) & 1
    rounded = ((bits + 0x7FFF + lsb) >> 16) & 0xFFFF
    rounded = torch.where(torch.isnan(values), torch.full_like(rounded, CANONICAL_BF16_NAN), rounded)
    signed = torch.where(rounded >= 0x8000, rounded - 0x10000, rounded)
    return signed.to(torch.int16).view(torch.bfloat16)


def bf16_bits(values: torch.Tensor) -> torch.Tensor:
    """The raw 16-bit patterns of a BF16 tensor as int32 in ``0..0xFFFF``."""
    return values.contiguous().view(torch.int16).to(torch.int32) & 0xFFFF


def fma_f32(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    """``fma.rn.f32(a, b, c)``: FP32 ``a * b + c`` with a single rounding (broadcasting)."""
    for name, t in (("a", a), ("b", b), ("c", c)):
        if t.dtype != torch.float32:
            raise TypeError(f"fma_f32 argument {name} must be float32, got {t.dtype}")
    product = a.double() * b.double()  # exact: 24 + 24 significand bits fit in 53
    addend = c.double()
    total = product + addend
    # TwoSum: total + error == product + addend exactly (finite operands).
    back = total - product
    error = (product - (total - back)) + (addend - back)
    even = (total.view(torch.int64) & 1) == 0
    inexact = (error != 0) & torch.isfinite(total) & even
    toward = torch.where(error > 0, torch.full_like(total, float("inf")), torch.full_like(total, float("-inf")))
    odd = torch.where(inexact, torch.nextafter(total, toward), total)
    return odd.to(torch.float32)


def post_mix(
    reduced: torch.Tensor, residual: torch.Tensor, post: torch.Tensor, comb: torch.Tensor
) -> torch.Tensor:
    """The post-mixed residual streams, BF16 ``[M, hc, H]``, per steps 1-2 of the contract.

    ``reduced`` BF16 ``[M, H]``, ``residual`` BF16 ``[M, hc, H]``, ``post`` FP32
    ``[M, hc]``, ``comb`` FP32 ``[M, hc, hc]`` indexed ``[source, target]``.
    """
    m_rows, hc, _ = residual.shape
    f = reduced.float()
    streams = residual.float()
    post = post.reshape(m_rows, hc)
    outputs = []
    for target in range(hc):
        mixed = f * post[:, target : target + 1]
        for source in range(hc):
            mixed = fma_f32(streams[:, source], comb[:, source, target : target + 1], mixed)
        outputs.append(bf16_round(mixed))
    return torch.stack(outputs, dim=1)


def collapse(residual_out: torch.Tensor, pre: torch.Tensor) -> torch.Tensor:
    """The pre-mix collapse ``sum_j pre[j] * out[j]``, BF16 ``[M, H]``, per step 3."""
    m_rows, hc, hidden = residual_out.shape
    pre = pre.reshape(m_rows, hc)
    total = torch.zeros(m_rows, hidden, dtype=torch.float32, device=residual_out.device)
    for target in range(hc):
        total = fma_f32(residual_out[:, target].float(), pre[:, target : target + 1], total)
    return bf16_round(total)


__all__ = ["CANONICAL_BF16_NAN", "bf16_bits", "bf16_round", "collapse", "fma_f32", "post_mix"]
