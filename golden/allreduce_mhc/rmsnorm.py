"""RMSNorm of the mHC collapse, with the seed 004 consumer's exact reduction order.

Inputs: ``prenorm`` BF16 ``[M, H]`` (the collapse, ``golden/allreduce_mhc/mhc.py``),
``weight`` BF16 ``[H]``, ``eps`` FP32. All FP32 ops round to nearest-even,
no FTZ.

Thread layout (the consumer's grid): one cluster of ``cluster`` CTAs per
token, ``threads`` threads a CTA, fragments of 8 consecutive elements
(16 bytes). Fragment ``f`` (elements ``8f .. 8f+7``) belongs to CTA
``c = (f % (cluster*threads)) // threads``, thread ``t = f % threads``, trip
``r = f // (cluster*threads)``; a thread visits its trips in ascending order.

Sum of squares, op by op:

1. Per fragment (one trip of one thread): ``s = +0.0; for e = 0..7:
   s = fma(p[e], p[e], s)`` (``fma.rn.f32``; the seed's
   ``(v * v).reduce(ADD, init 0)`` is an ordered reduction that the compiler
   contracts into this FMA chain).
2. Per thread: ``a = +0.0; for each of its trips in order: a = a + s_trip``
   (``add.rn.f32``); a thread with no fragment keeps ``+0.0``.
3. Per warp: butterfly ``a = a + shfl_xor(a, o)`` for ``o = 1, 2, 4, 8, 16``:
   lane 0 ends with the pairwise tree of adjacent lanes.
4. Per CTA: warp w's lane-0 value goes to ``warp_sums[w]``; warp 0 loads
   ``warp_sums[lane]`` (``+0.0`` for lanes >= warps) and reduces with
   ``cute.arch.warp_reduction_sum``: butterfly ``o = 16, 8, 4, 2, 1``, lane 0's
   value is the CTA sum (for 4 warps: ``(w0 + w2) + (w1 + w3)``).
5. Per cluster: every CTA reads all CTA sums through DSMEM and adds them
   ``t = +0.0; for c = 0..cluster-1: t = t + cta[c]``.

Inverse RMS (this project's contract, replacing the seed's approximate
``rsqrt.approx`` so CPU and GPU agree bit for bit)::

    mean = t / f32(H)                         div.rn.f32
    inv  = f32( 1.0 / sqrt( f64(mean) + f64(eps) ) )
         = cvt.rn.f32.f64( div.rn.f64( 1.0, sqrt.rn.f64( add.rn.f64(cvt.f64.f32(mean), cvt.f64.f32(eps)) ) ) )

(all three FP64 ops correctly rounded IEEE; the result is the correctly
rounded FP32 of ``1/sqrt(mean + eps)`` except in double-rounding cases too
rare to meet, and is identical on CPU and GPU by construction).

Normalized value: ``y[h] = bf16_rn( (f32(p[h]) * inv) * f32(weight[h]) )``:
two ``mul.rn.f32`` in that order, one BF16 rounding.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from contracts.allreduce_mhc import norm_cluster
from golden.fp32 import bf16_round, fma_f32

VEC = 8
WARP = 32
DEFAULT_THREADS = 128


@dataclass(frozen=True)
class NormLayout:
    """The consumer's launch shape that fixes the sum-of-squares order."""

    threads: int = DEFAULT_THREADS
    cluster: int = 1

    def __post_init__(self) -> None:
        if self.threads <= 0 or self.threads % WARP or self.threads > WARP * WARP:
            raise ValueError(f"threads must be a multiple of 32 in [32, 1024], got {self.threads}")
        if self.cluster < 1:
            raise ValueError(f"cluster must be >= 1, got {self.cluster}")


def norm_layout(hidden: int, threads: int = DEFAULT_THREADS) -> NormLayout:
    """The project's default layout: the fewest CTAs (at most 8) whose threads cover H/8 fragments once."""
    return NormLayout(threads=threads, cluster=norm_cluster(hidden, threads))


def _butterfly(lanes: torch.Tensor, offsets: tuple[int, ...]) -> torch.Tensor:
    """Lane 0 of ``a = a + shfl_xor(a, o)`` over the last (32-lane) axis, for ``offsets`` in order."""
    index = torch.arange(WARP, device=lanes.device)
    for offset in offsets:
        lanes = lanes + lanes[..., index ^ offset]
    return lanes[..., 0]


def sum_of_squares(prenorm: torch.Tensor, layout: NormLayout) -> torch.Tensor:
    """The FP32 ``[M]`` sum of squares of BF16 ``prenorm [M, H]`` in ``layout``'s order (steps 1-5)."""
    m_rows, hidden = prenorm.shape
    if hidden % VEC:
        raise ValueError(f"prenorm's hidden size must be a multiple of {VEC}, got {hidden}")
    fragments = hidden // VEC
    stride = layout.cluster * layout.threads
    trips = math.ceil(fragments / stride)
    values = prenorm.float().reshape(m_rows, fragments, VEC)
    fragment_sums = torch.zeros(m_rows, fragments, dtype=torch.float32, device=prenorm.device)
    for element in range(VEC):
        fragment_sums = fma_f32(values[..., element], values[..., element], fragment_sums)
    # A slot past the last fragment is a thread with nothing to add; adding +0.0
    # to a sum of squares (>= +0.0, or NaN) leaves it unchanged.
    padded = torch.zeros(m_rows, trips * stride, dtype=torch.float32, device=prenorm.device)
    padded[:, :fragments] = fragment_sums
    per_trip = padded.reshape(m_rows, trips, layout.cluster, layout.threads)
    thread_sums = torch.zeros(m_rows, layout.cluster, layout.threads, dtype=torch.float32, device=prenorm.device)
    for trip in range(trips):
        thread_sums = thread_sums + per_trip[:, trip]
    warps = layout.threads // WARP
    warp_sums = _butterfly(thread_sums.reshape(m_rows, layout.cluster, warps, WARP), (1, 2, 4, 8, 16))
    warp0 = torch.zeros(m_rows, layout.cluster, WARP, dtype=torch.float32, device=prenorm.device)
    warp0[..., :warps] = warp_sums
    cta_sums = _butterfly(warp0, (16, 8, 4, 2, 1))
    total = torch.zeros(m_rows, dtype=torch.float32, device=prenorm.device)
    for cta in range(layout.cluster):
        total = total + cta_sums[:, cta]
    return total


def inv_rms(sum_sq: torch.Tensor, hidden: int, eps: float) -> torch.Tensor:
    """``f32(1 / sqrt(f64(sum_sq / f32(H)) + f64(f32(eps))))`` with IEEE FP64 ops, FP32 ``[M]``."""
    mean = sum_sq / torch.tensor(float(hidden), dtype=torch.float32, device=sum_sq.device)
    eps32 = torch.tensor(eps, dtype=torch.float32, device=sum_sq.device)
    root = torch.sqrt(mean.double() + eps32.double())
    return (1.0 / root).to(torch.float32)


def rms_norm(prenorm: torch.Tensor, weight: torch.Tensor, eps: float, layout: NormLayout) -> torch.Tensor:
    """The normalized layer input, BF16 ``[M, H]``: ``bf16_rn((p * inv_rms) * weight)``."""
    inv = inv_rms(sum_of_squares(prenorm, layout), prenorm.shape[1], eps)
    return bf16_round((prenorm.float() * inv[:, None]) * weight.float()[None, :])


__all__ = ["NormLayout", "inv_rms", "norm_layout", "rms_norm", "sum_of_squares"]
