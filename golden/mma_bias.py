"""Models of the tensor cores' accumulation order: the bias GEMV's FP32 sums, as a GPU's MMAs round them.

The Markov kernels compute a head row's dot product with the embedding
(256 BF16 values each) as 16 ``mma.sync.m16n8k16`` (BF16 in, FP32
accumulate) chained in order over k. How the tensor core rounds inside one
MMA is not documented by NVIDIA, so the golden loops take the accumulation
as a pluggable model (``BiasFn``: BF16 ``embeds [rows, K]`` and
``head_shard [n, K]`` to FP32 ``[rows, n]``) and the GPU's measured facts
name which one it follows (``mma_model`` in ``golden/data/arch/<arch>.json``,
``golden.arch``; the MMA probe of ``harness/calibration`` decides it).
``BIAS_FUNCTIONS`` names the candidates:

- ``fp32_k_order_bias`` (refuted for the H200's tensor cores by the
  probe; equal to the others where every partial sum is exact in FP32):
  each product ``e_k * h_k`` rounded to FP32 (exact unless it falls below
  2^-126), summed in FP32 in k order 0..255, one rounding per add.
- ``mma_chain_bias`` (refuted by the probe, kept for comparison): 16 MMAs in
  the kernel's order; each MMA adds the exact sum of its 16 exact
  products to the FP32 accumulator and rounds once to FP32. The kernel's
  fragments give MMA ``2c + h`` (chunk c = 0..7, h = 0, 1) the k set
  ``{32c + 8t + 4h + j : t, j in 0..3}``, not 16 consecutive k (see
  ``mma_k_groups``). The exact sums are formed without rounding
  (``exact_sum_to_f32``: double arithmetic where it is provably exact,
  Python integers elsewhere). Fasi, Higham, Mikaitis and Pranesh
  ("Numerical behavior of NVIDIA tensor cores", PeerJ CS 2021) report
  truncating alignment inside an MMA on earlier GPUs instead, so this is
  a model to test, not a fact; the GPU decided against it.
- ``hopper_mma_bias`` (the H200's behaviour: fitted to one probe run and
  confirmed by the full probe on all 1,196,032 sums; the
  harness's model): the same 16 MMAs, but inside
  each MMA the 16 exact products and the accumulator are aligned to the
  largest exponent (a product's exponent is the sum of its operands'
  exponents), each truncated toward zero to a multiple of 2^(E - 25),
  summed exactly and the sum truncated (RZ) to FP32 (see its docstring).
  It reproduces the 24 GPU examples recorded by that probe run bit for
  bit and the run's six mismatch counts against the other two models over
  all 180,224 sums, which ``mma_chain_bias`` and ``fp32_k_order_bias``
  miss on 83% of the sums.

All start from a +0.0 accumulator, as the kernels' ``acc.fill(0.0)``. This
is arithmetic of the tensor cores, not of one kernel family: every family
whose kernels chain these MMAs reads it from here.
"""

from __future__ import annotations

import math
from typing import Callable

import torch

# The k extent of one chain: 16 MMAs of k16 (the 256-value head rows).
CHAIN_K = 256

BiasFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def fp32_k_order_bias(embeds: torch.Tensor, head_shard: torch.Tensor) -> torch.Tensor:
    """FP32 ``[rows, n]`` sums of FP32-rounded products, added one k at a time in order 0..255."""
    e = embeds.float()
    columns = head_shard.float().t().contiguous()  # [256, n]: one contiguous head column per k
    acc = torch.zeros((e.shape[0], columns.shape[1]), dtype=torch.float32, device=columns.device)
    for k in range(columns.shape[0]):
        acc = acc + e[:, k : k + 1] * columns[k]
    return acc


def mma_k_groups(dim: int = CHAIN_K) -> list[list[int]]:
    """The k indices each of the kernel's chained m16n8k16 MMAs covers, in issue order."""
    groups = []
    for chunk in range(dim // 32):
        for half in range(2):
            groups.append(
                [32 * chunk + 8 * t + 4 * half + j for t in range(4) for j in range(4)]
            )
    return groups


def round_scaled_int_to_f32(n: int, e: int) -> float:
    """``n * 2**e`` (exact integers) rounded to nearest-even FP32, returned as a Python float."""
    if n == 0:
        return 0.0
    magnitude = abs(n)
    top = magnitude.bit_length() - 1 + e
    quantum = max(top - 23, -149)
    shift = quantum - e
    if shift > 0:
        kept = magnitude >> shift
        rest = magnitude - (kept << shift)
        half = 1 << (shift - 1)
        if rest > half or (rest == half and kept & 1):
            kept += 1
    else:
        kept = magnitude << -shift
    if kept.bit_length() - 1 + quantum >= 128:
        result = math.inf
    else:
        result = math.ldexp(kept, quantum)
    return -result if n < 0 else result


def _exact_sum_python(terms: list[float]) -> float:
    """The exact sum of finite doubles rounded once to FP32 (+0.0 for an exact zero)."""
    parts = [t.as_integer_ratio() for t in terms if t != 0.0]
    if not parts:
        return math.copysign(0.0, -1.0) if all(math.copysign(1.0, t) < 0 for t in terms) else 0.0
    scaled = [(num, -(den.bit_length() - 1)) for num, den in parts]
    low = min(e for _, e in scaled)
    total = sum(num << (e - low) for num, e in scaled)
    return round_scaled_int_to_f32(total, low)


def exact_sum_to_f32(terms: torch.Tensor) -> torch.Tensor:
    """FP32 of the exact sum over the last axis (at most 32 doubles of at most 24 significant bits), rounded once.

    When the largest magnitude is below 2^24 times the smallest nonzero one,
    every term is a multiple of 2^(e_min - 23) and every partial sum stays
    below 2^(e_max + 6), so at most 53 bits are ever needed: the double sum
    is exact in any order and its conversion is the single rounding. Other
    elements are summed exactly with Python integers. A NaN or infinite term
    follows IEEE double addition (the caller canonicalizes NaN).
    """
    if terms.shape[-1] > 32:
        raise ValueError(f"terms: at most 32 per sum for the exactness bound, got {terms.shape[-1]}")
    total = terms[..., 0].clone()
    for j in range(1, terms.shape[-1]):
        total = total + terms[..., j]
    magnitude = terms.abs()
    largest = magnitude.amax(-1)
    smallest = torch.where(magnitude == 0, torch.full_like(magnitude, math.inf), magnitude).amin(-1)
    inexact = torch.isfinite(total) & (largest != 0) & ~(largest < smallest * 2.0**24)
    result = total.to(torch.float32)
    if bool(inexact.any()):
        flat_terms = terms.reshape(-1, terms.shape[-1])
        flat_result = result.reshape(-1)
        for position in inexact.reshape(-1).nonzero().flatten().tolist():
            flat_result[position] = _exact_sum_python(flat_terms[position].tolist())
        result = flat_result.reshape(result.shape)
    return result


def mma_chain_bias(embeds: torch.Tensor, head_shard: torch.Tensor) -> torch.Tensor:
    """FP32 ``[rows, n]`` of 16 chained MMAs, each adding its exact 16-product sum and rounding once."""
    e = embeds.double()
    h = head_shard.double()
    acc = torch.zeros((e.shape[0], h.shape[0]), dtype=torch.float32, device=e.device)
    for ks in mma_k_groups(e.shape[1]):
        index = torch.tensor(ks, device=e.device)
        products = e[:, None, index] * h[None, :, index]
        terms = torch.cat([acc.double()[..., None], products], dim=-1)
        acc = exact_sum_to_f32(terms)
    return acc


HOPPER_ALIGN_BITS = 25
_MIN_NORMAL_EXPONENT = -126


def _operand_exponents(x: torch.Tensor) -> torch.Tensor:
    """floor(log2|x|) of finite nonzero doubles, clamped below at the subnormal exponent -126."""
    return (torch.frexp(x)[1] - 1).clamp(min=_MIN_NORMAL_EXPONENT).to(torch.float64)


def _power_of_two(exponents: torch.Tensor) -> torch.Tensor:
    """Exact doubles 2^k for integer-valued doubles k in [-1022, 1023], built from their bits."""
    biased = (exponents.to(torch.int64) + 1023) << 52
    return biased.view(torch.float64)


def round_toward_zero_f32(x: torch.Tensor) -> torch.Tensor:
    """FP32 of doubles ``x`` rounded toward zero (a finite value past the FP32 range gives the largest finite)."""
    nearest = x.to(torch.float32)
    overshoot = nearest.double().abs() > x.abs()
    return torch.where(overshoot, torch.nextafter(nearest, torch.zeros_like(nearest)), nearest)


def hopper_mma_bias(embeds: torch.Tensor, head_shard: torch.Tensor) -> torch.Tensor:
    """FP32 ``[rows, n]`` of 16 chained MMAs, each a truncating 17-term fused sum rounded toward zero.

    Fitted to one H200 run of the MMA probe (24 recorded GPU examples and six
    mismatch counts over 180,224 sums, all reproduced), then confirmed by the
    full probe: equal to ``mma.sync`` on all 1,196,032 sums of normal,
    exponent-spread and cancelling operands
    (the evidence kept in golden/data/arch/sm_90.json). For each MMA of
    ``mma_k_groups`` (all 16 products fused at once: groups of 4 or 8 and
    the other variants below do not fit the run), with ``c`` the FP32
    accumulator (computed on a visible CUDA device when the operands are on the
    CPU: every step is an exact or correctly rounded IEEE double operation, so
    the device does not change the bits):

    1. Products ``e_k * h_k`` exact. A product's exponent is
       ``x(e_k) + x(h_k)`` with ``x(v) = floor(log2|v|)`` (so the product's
       significand lies in [1, 4)); the accumulator's is ``x(c)``. Zero
       terms have none.
    2. ``E`` = the largest of those exponents. Every term (the accumulator
       too) is truncated toward zero to an integer multiple of
       ``2^(E - 25)``; the truncated terms are summed exactly.
    3. The sum is rounded toward zero to FP32 and becomes ``c``.

    The fit ruled out (each misses some recorded examples): round to
    nearest at the end, floor (two's complement) truncation, alignment to
    the products' true exponents, 22-24 or 26-29 kept bits, the
    accumulator added after the products' sum, and sub-groups of 4 or 8
    products (by fragment or by k order) chained inside one MMA. Outside the
    fit (no such operands in the run): subnormal operands (their exponent is
    taken as -126), subnormal or overflowing results (RZ to a subnormal, to
    the largest finite), and infinities or NaNs (the element follows IEEE
    double addition of the raw terms, the caller canonicalizes NaN).
    """
    home = embeds.device
    # The same IEEE double operations give the same bits on any device: a visible GPU's FP64 turns the
    # minutes a vocab-sized head takes on one CPU thread into milliseconds.
    work = torch.device("cuda") if home.type == "cpu" and torch.cuda.is_available() else home
    e = embeds.to(work).double()
    h = head_shard.to(work).double()
    acc = torch.zeros((e.shape[0], h.shape[0]), dtype=torch.float64, device=e.device)
    none = torch.tensor(-math.inf, dtype=torch.float64, device=e.device)
    for ks in mma_k_groups(e.shape[1]):
        index = torch.tensor(ks, device=e.device)
        e_group, h_group = e[:, index], h[:, index]
        products = e_group[:, None, :] * h_group[None, :, :]
        exponents = _operand_exponents(e_group)[:, None, :] + _operand_exponents(h_group)[None, :, :]
        exponents = torch.where(products == 0, none, exponents)
        largest = torch.maximum(exponents.amax(-1), torch.where(acc == 0, none, _operand_exponents(acc)))
        # 2^-(E - 25) turns the kept bits into integers: each truncated term
        # is below 2^27 in magnitude and 17 of them sum exactly in a double.
        shift = torch.where(torch.isfinite(largest), HOPPER_ALIGN_BITS - largest, 0.0)
        scale = _power_of_two(shift)
        kept = torch.trunc(products * scale[..., None]).sum(-1) + torch.trunc(acc * scale)
        total = kept / scale
        # A product of finite BF16 values is finite in a double: finiteness is the operands'.
        finite = (torch.isfinite(e_group).all(-1)[:, None] & torch.isfinite(h_group).all(-1)[None, :]
                  & torch.isfinite(acc))
        if not bool(finite.all()):
            total = torch.where(finite, total, products.sum(-1) + acc)
        acc = round_toward_zero_f32(total).double()
    return acc.float().to(home)


BIAS_FUNCTIONS: dict[str, BiasFn] = {
    "fp32_k_order": fp32_k_order_bias,
    "mma_chain": mma_chain_bias,
    "hopper_mma": hopper_mma_bias,
}


__all__ = [
    "BIAS_FUNCTIONS",
    "BiasFn",
    "CHAIN_K",
    "HOPPER_ALIGN_BITS",
    "exact_sum_to_f32",
    "fp32_k_order_bias",
    "hopper_mma_bias",
    "mma_chain_bias",
    "mma_k_groups",
    "round_scaled_int_to_f32",
    "round_toward_zero_f32",
]
