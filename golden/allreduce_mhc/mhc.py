"""mHC post-mix and pre-mix collapse of seed 004's consumer.

Arithmetic contract (per token, per hidden element h; every FP32 op rounds to
nearest-even, once; subnormals are kept everywhere: no FTZ, no DAZ):

1. ``f = f32(reduced[h])``: the all-reduced sublayer output is already BF16
   (``bf16_rn`` of the rank-order FP32 sum, see ``golden/allreduce_mhc/__init__.py``), as
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

``bf16_rn`` is ``cvt.rn.bf16.f32`` (``golden.fp32.bf16_round``): round to
nearest-even on the FP32 bits, overflow to Inf, every NaN becomes the
canonical BF16 NaN ``0x7FFF`` (torch's own cast gives other NaN bits, so the
golden never uses it). ``fma`` is ``golden.fp32.fma_f32``: exact single
rounding (FP64 product, round-to-odd TwoSum, one rounding to FP32). FP32
multiplies and adds are torch's IEEE ops (one rounding each, subnormals kept),
so the results are the same bits on CPU and GPU.
"""

from __future__ import annotations

import torch

from golden.fp32 import bf16_round, fma_f32


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


__all__ = ["collapse", "post_mix"]
