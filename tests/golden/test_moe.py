"""golden/allreduce_mhc/moe.py: the finalize contribution (top-k FMAs in route order, dropped
routes, shared expert add) against a scalar loop."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from golden.fp32 import bf16_bits, fma_f32
from golden.allreduce_mhc.moe import finalize_contribution


def scalar_fma(a: float, b: float, c: float) -> float:
    """FP32 single-rounding FMA of scalars (golden.fp32.fma_f32, exact single rounding)."""
    t = lambda v: torch.tensor([v], dtype=torch.float32)  # noqa: E731
    return fma_f32(t(a), t(b), t(c)).item()


def finalize_loop(gemm2, weights, routes, shared):
    """Token by token, element by element: skip dropped routes, FMA the held ones in order, add shared."""
    m_rows, top_k = routes.shape
    hidden = shared.shape[1]
    out = torch.empty(m_rows, hidden, dtype=torch.bfloat16)
    for m in range(m_rows):
        for h in range(hidden):
            acc = 0.0
            for k in range(top_k):
                row = int(routes[m, k])
                if row != -1:
                    acc = scalar_fma(float(gemm2[row, h]), float(weights[m, k]), acc)
            total = np.float32(np.float32(acc) + np.float32(float(shared[m, h])))
            out[m, h] = torch.tensor(float(total), dtype=torch.float32).to(torch.bfloat16)
    return out


def make_inputs(m_rows=4, top_k=4, rows=9, hidden=16, seed=0):
    """Random finalize inputs with some dropped routes."""
    generator = torch.Generator().manual_seed(seed)
    gemm2 = (torch.randn(rows, hidden, generator=generator) * 8).bfloat16()
    weights = torch.rand(m_rows, top_k, generator=generator)
    routes = torch.randint(0, rows, (m_rows, top_k), generator=generator).to(torch.int32)
    routes[torch.rand(m_rows, top_k, generator=generator) < 0.3] = -1
    shared = (torch.randn(m_rows, hidden, generator=generator) * 2).bfloat16()
    return gemm2, weights, routes, shared


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_finalize_matches_scalar_loop(seed):
    gemm2, weights, routes, shared = make_inputs(seed=seed)
    assert bool((routes == -1).any())
    got = finalize_contribution(gemm2, weights, routes, shared)
    assert torch.equal(bf16_bits(got), bf16_bits(finalize_loop(gemm2, weights, routes, shared)))


def test_all_routes_dropped_gives_shared_and_ignores_their_weights():
    gemm2, weights, routes, shared = make_inputs()
    routes[:] = -1
    weights[:] = float("nan")  # never read for a dropped route
    got = finalize_contribution(gemm2, weights, routes, shared)
    assert torch.equal(bf16_bits(got), bf16_bits(shared))


def test_route_order_and_fma_are_observable():
    # Routes 2^24, 1, -2^24 (weights 1): in route order the FMAs give 0
    # (2^24 + 1 ties to 2^24); reversed they give 1. Shared 0.
    gemm2 = torch.tensor([[2.0**24], [1.0], [-(2.0**24)]], dtype=torch.bfloat16)
    weights = torch.ones(1, 3)
    shared = torch.zeros(1, 1, dtype=torch.bfloat16)
    forward = finalize_contribution(gemm2, weights, torch.tensor([[0, 1, 2]], dtype=torch.int32), shared)
    backward = finalize_contribution(gemm2, weights, torch.tensor([[2, 1, 0]], dtype=torch.int32), shared)
    assert forward.item() == 0.0 and backward.item() == 1.0
    odd = torch.tensor([[2.0**24], [3.0], [-(2.0**24)]], dtype=torch.bfloat16)
    a = finalize_contribution(odd, weights, torch.tensor([[0, 1, 2]], dtype=torch.int32), shared)
    b = finalize_contribution(odd, weights, torch.tensor([[2, 0, 1]], dtype=torch.int32), shared)
    assert a.item() == 4.0 and b.item() == 3.0


def test_bad_route_is_named():
    gemm2, weights, routes, shared = make_inputs()
    routes[1, 2] = 9  # rows == 9
    with pytest.raises(ValueError, match=r"expanded_idx_to_permuted_idx .*\[0, 9\).*got 9"):
        finalize_contribution(gemm2, weights, routes, shared)
    routes[1, 2] = -2
    with pytest.raises(ValueError, match="expanded_idx_to_permuted_idx"):
        finalize_contribution(gemm2, weights, routes, shared)
