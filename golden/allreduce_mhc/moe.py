"""MoE finalize of seed 004: one rank's contribution from its unfinalized MoE output.

Inputs of one rank: ``gemm2_permuted`` BF16 ``[rows, H]`` (unweighted GEMM2
rows in the MoE's permuted order), ``expert_weights`` FP32 ``[M, top_k]``
(routing weights, the routed scaling already folded in: the seed's factor is
1.0, so they are used as given, never rounded), ``expanded_idx_to_permuted_idx``
int32 ``[M, top_k]`` (the row of each route, ``-1`` for an expert this rank
does not hold), ``shared_output`` BF16 ``[M, H]`` (this rank's partial shared
expert).

Contract per token and element h (FP32, round-to-nearest-even, no FTZ)::

    acc = +0.0
    for k = 0, 1, ..., top_k-1 (ascending):
        g = f32(gemm2_permuted[idx[k], h])  if idx[k] != -1 else +0.0
        w = expert_weights[k]               if idx[k] != -1 else +0.0
        acc = fma(g, w, acc)                          fma.rn.f32, one rounding
    acc = acc + f32(shared_output[h])                 add.rn.f32
    contribution[h] = bf16_rn(acc)

This is the seed's finalize publish with ``prefetch_group = top_k``: a
dropped route's staged row is zeroed and its weight set to 0, and its FMA
still runs (``acc + 0*0``). Skipping it instead differs only in the sign of a
zero accumulator, which the publish's negative-zero rewrite then erases, so
both give the same published bits. The contribution is published through
``golden.allreduce_mhc`` (which rewrites ``0x8000`` to ``0x0000``).
"""

from __future__ import annotations

import torch

from contracts.allreduce_mhc import DROPPED_ROUTE, check_routes
from golden.fp32 import bf16_round, fma_f32


def finalize_contribution(
    gemm2_permuted: torch.Tensor,
    expert_weights: torch.Tensor,
    expanded_idx_to_permuted_idx: torch.Tensor,
    shared_output: torch.Tensor,
) -> torch.Tensor:
    """One rank's BF16 ``[M, H]`` finalize contribution per the contract above."""
    rows = gemm2_permuted.shape[0]
    check_routes(expanded_idx_to_permuted_idx, rows, "expanded_idx_to_permuted_idx")
    m_rows, top_k = expanded_idx_to_permuted_idx.shape
    hidden = shared_output.shape[1]
    routed = gemm2_permuted.float()
    acc = torch.zeros(m_rows, hidden, dtype=torch.float32, device=shared_output.device)
    for k in range(top_k):
        index = expanded_idx_to_permuted_idx[:, k].long()
        held = index != DROPPED_ROUTE
        if rows:
            gathered = routed[index.clamp(min=0)]
        else:
            gathered = torch.zeros(m_rows, hidden, dtype=torch.float32, device=acc.device)
        g = torch.where(held[:, None], gathered, torch.zeros_like(gathered))
        w = torch.where(held, expert_weights[:, k], torch.zeros_like(expert_weights[:, k]))
        acc = fma_f32(g, w[:, None], acc)
    return bf16_round(acc + shared_output.float())


__all__ = ["finalize_contribution"]
