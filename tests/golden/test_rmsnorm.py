"""golden/allreduce_mhc/rmsnorm.py: the consumer's sum-of-squares order per launch layout,
the FP64 inverse-RMS contract against high-precision decimals, and the
normalized value."""

from __future__ import annotations

import math
from decimal import Decimal, getcontext

import numpy as np
import pytest
import torch

from golden.fp32 import fma_f32
from golden.allreduce_mhc.rmsnorm import NormLayout, inv_rms, norm_layout, rms_norm, sum_of_squares


def scalar_fma(a: float, b: float, c: float) -> np.float32:
    """FP32 single-rounding FMA of scalars (golden.fp32.fma_f32, exact single rounding)."""
    t = lambda v: torch.tensor([v], dtype=torch.float32)  # noqa: E731
    return np.float32(fma_f32(t(a), t(b), t(c)).item())


def simulated_sum(row: np.ndarray, threads: int, cluster: int) -> np.float32:
    """One token's sum of squares, thread by thread as the consumer runs it."""
    fragments = row.size // 8
    stride = threads * cluster
    cta_sums = []
    for cta in range(cluster):
        thread_sums = []
        for thread in range(threads):
            acc = np.float32(0.0)
            fragment = cta * threads + thread
            while fragment < fragments:
                trip = np.float32(0.0)
                for value in row[8 * fragment : 8 * fragment + 8]:
                    trip = scalar_fma(float(value), float(value), float(trip))
                acc = np.float32(acc + trip)
                fragment += stride
            thread_sums.append(acc)
        warp_sums = []
        for warp in range(threads // 32):
            lanes = thread_sums[32 * warp : 32 * warp + 32]
            for offset in (1, 2, 4, 8, 16):
                lanes = [np.float32(lanes[i] + lanes[i ^ offset]) for i in range(32)]
            warp_sums.append(lanes[0])
        lanes = warp_sums + [np.float32(0.0)] * (32 - len(warp_sums))
        for offset in (16, 8, 4, 2, 1):
            lanes = [np.float32(lanes[i] + lanes[i ^ offset]) for i in range(32)]
        cta_sums.append(lanes[0])
    total = np.float32(0.0)
    for value in cta_sums:
        total = np.float32(total + value)
    return total


def wide_rows(rows: int, hidden: int, seed: int) -> torch.Tensor:
    """BF16 rows whose magnitudes span many binades, so any reordering changes the sum's bits."""
    generator = torch.Generator().manual_seed(seed)
    scale = torch.pow(2.0, torch.randint(-12, 12, (rows, hidden), generator=generator).float())
    return (torch.randn(rows, hidden, generator=generator) * scale).bfloat16()


@pytest.mark.parametrize(
    "hidden,threads,cluster",
    [(256, 32, 1), (256, 32, 3), (512, 64, 2), (1024, 128, 1), (1024, 32, 2), (768, 64, 5)],
)
def test_sum_of_squares_matches_the_thread_simulation(hidden, threads, cluster):
    prenorm = wide_rows(2, hidden, seed=hidden + threads + cluster)
    got = sum_of_squares(prenorm, NormLayout(threads=threads, cluster=cluster))
    for row in range(2):
        want = simulated_sum(prenorm[row].float().numpy(), threads, cluster)
        assert got[row].item() == float(want), (row, got[row].item(), float(want))


def test_layout_changes_the_bits():
    prenorm = wide_rows(16, 1024, seed=7)
    sums = [sum_of_squares(prenorm, NormLayout(threads=t, cluster=c)) for t, c in ((128, 1), (32, 1), (32, 4), (64, 3))]
    assert any(not torch.equal(sums[0], other) for other in sums[1:]), "layouts never differ: the test cannot see order"


def decimal_inverse_sqrt(mean: float, eps: float) -> Decimal:
    """``1 / sqrt(mean + eps)`` to 80 significant digits (inputs taken exactly)."""
    getcontext().prec = 80
    return Decimal(1) / (Decimal(mean) + Decimal(eps)).sqrt()


def test_inv_rms_is_the_stated_fp64_sequence_and_correctly_rounded():
    rng = np.random.default_rng(11)
    sums = np.concatenate(
        [
            rng.random(300).astype(np.float32) * np.float32(2.0) ** rng.integers(-40, 60, 300).astype(np.float32),
            np.array([0.0, 1.0, 4096.0, 3.4e38, 1e-45], dtype=np.float32),
        ]
    )
    for hidden in (256, 5120, 7168):
        for eps in (1e-6, 1e-5, 0.0, 1.0):
            nonzero = sums[sums >= 1.0] if eps == 0.0 else sums
            got = inv_rms(torch.from_numpy(nonzero), hidden, eps).numpy()
            eps32 = float(np.float32(eps))
            for total, inv in zip(nonzero, got):
                mean = float(np.float32(total) / np.float32(hidden))  # div.rn.f32
                # The contract, op by op, in Python's IEEE doubles.
                assert inv == np.float32(1.0 / math.sqrt(mean + eps32)), (total, hidden, eps)
                exact = decimal_inverse_sqrt(mean, eps32)
                error = abs(Decimal(float(inv)) - exact)
                for neighbour in (np.nextafter(inv, np.float32(np.inf)), np.nextafter(inv, np.float32(0))):
                    assert error <= abs(Decimal(float(neighbour)) - exact), (total, hidden, eps, inv)


def test_rms_norm_value_is_two_rounded_products():
    torch.manual_seed(3)
    hidden = 256
    prenorm = (torch.randn(3, hidden) * 4).bfloat16()
    weight = torch.randn(hidden).bfloat16()
    layout = norm_layout(hidden)
    got = rms_norm(prenorm, weight, 1e-6, layout)
    inv = inv_rms(sum_of_squares(prenorm, layout), hidden, 1e-6).numpy()
    p = prenorm.float().numpy()
    w = weight.float().numpy()
    want = np.empty_like(p)
    for row in range(3):
        for h in range(hidden):
            want[row, h] = np.float32(np.float32(p[row, h] * inv[row]) * w[h])
    assert torch.equal(got, torch.from_numpy(want).to(torch.bfloat16))


def test_nan_poisons_the_whole_row_only():
    prenorm = torch.ones(2, 256, dtype=torch.bfloat16)
    prenorm[1, 5] = float("nan")
    out = rms_norm(prenorm, torch.ones(256, dtype=torch.bfloat16), 1e-6, norm_layout(256))
    assert torch.isnan(out[1].float()).all()
    assert torch.isfinite(out[0].float()).all()


def test_layout_defaults_and_validation():
    assert norm_layout(5120) == NormLayout(threads=128, cluster=5)
    assert norm_layout(7168) == NormLayout(threads=128, cluster=7)
    assert norm_layout(256) == NormLayout(threads=128, cluster=1)
    with pytest.raises(ValueError, match="threads"):
        NormLayout(threads=100, cluster=1)
    with pytest.raises(ValueError, match="cluster"):
        NormLayout(threads=128, cluster=0)
    with pytest.raises(ValueError, match="hidden"):
        norm_layout(100)
