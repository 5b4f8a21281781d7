"""Seed 001's argmax order: the first NaN, else the first maximum.

The kernels reduce (fp32 value, int32 id) pairs through two PTX combines:

- ``_combine_in_order(v1, i1, v2, i2)`` (pairs known to satisfy ``i1 < i2``):
  keep the first when ``v1`` is NaN or ``v1 >= v2`` (ordered compare), else
  the second.
- ``_combine(v1, i1, v2, i2)`` (any two pairs): keep the first when
  ``v1 > v2``, or ``v1 == v2`` and ``i1 < i2`` (ordered compares), or ``v1``
  is NaN and (``v2`` is not NaN or ``i1 < i2``); else the second.

Both select a whole pair, so a result's value is the value at its id, bits
and all (NaN payload, sign of zero). As a relation on (value, id) this is a
total order: NaN above every number, lower id first among NaNs; numbers by
value with ``-0.0 == +0.0`` (IEEE compare), lower id first among equals;
``-inf`` below everything else. Hence any reduction tree, block size, shard
split or rank order picks the same pair as ``first_nan_first_max``: the
lowest id of a NaN, else the lowest id of the maximum (an all ``-inf`` row
gives its first id).
"""

from __future__ import annotations

import torch

from golden.fp32 import f32_bits, f32_from_bits


def first_nan_first_max(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Index along ``dim`` of the first NaN of ``x``, else of its first maximum (int64)."""
    if not isinstance(x, torch.Tensor) or not x.dtype.is_floating_point:
        raise TypeError(f"x: expected a floating-point tensor, got {getattr(x, 'dtype', type(x).__name__)}")
    if x.shape[dim] == 0:
        raise ValueError(f"x: dimension {dim} is empty; an argmax needs at least one element")
    nan = torch.isnan(x)
    has_nan = nan.any(dim=dim, keepdim=True)
    best = torch.where(nan, torch.full_like(x, -float("inf")), x).amax(dim=dim, keepdim=True)
    # Equality is the IEEE compare, so -0.0 and +0.0 tie and the first wins.
    candidate = torch.where(has_nan, nan, x == best)
    return candidate.to(torch.uint8).argmax(dim=dim)


def _value_bits_select(keep_first, v1, v2):
    """Select fp32 values bit-exactly (payloads and zero signs kept)."""
    return f32_from_bits(torch.where(keep_first, f32_bits(v1), f32_bits(v2)))


def combine(v1: torch.Tensor, i1: torch.Tensor, v2: torch.Tensor, i2: torch.Tensor):
    """The seed's ``_combine`` of two (fp32 value, id) pair tensors, elementwise."""
    lower = i1 < i2
    keep = (v1 > v2) | ((v1 == v2) & lower)
    keep = keep | (torch.isnan(v1) & (~torch.isnan(v2) | lower))
    return _value_bits_select(keep, v1, v2), torch.where(keep, i1, i2)


def combine_in_order(v1: torch.Tensor, i1: torch.Tensor, v2: torch.Tensor, i2: torch.Tensor):
    """The seed's ``_combine_in_order`` (requires ``i1 < i2``), elementwise."""
    if not bool((i1 < i2).all()):
        raise ValueError("combine_in_order: every i1 must be below its i2")
    keep = torch.isnan(v1) | (v1 >= v2)
    return _value_bits_select(keep, v1, v2), torch.where(keep, i1, i2)


def reduce_pairs(values: torch.Tensor, ids: torch.Tensor, dim: int = -1):
    """Reduce (value, id) pairs along ``dim`` with ``combine`` as a pairwise tree.

    Returns the winning (value, id) with ``dim`` removed. The result does not
    depend on the order of the pairs along ``dim``."""
    if values.shape != ids.shape:
        raise ValueError(f"values {tuple(values.shape)} and ids {tuple(ids.shape)} must have one shape")
    v, i = values.movedim(dim, 0), ids.movedim(dim, 0)
    if v.shape[0] == 0:
        raise ValueError("reduce_pairs: no pairs to reduce")
    while v.shape[0] > 1:
        n = v.shape[0] // 2
        cv, ci = combine(v[0:2 * n:2], i[0:2 * n:2], v[1:2 * n:2], i[1:2 * n:2])
        if v.shape[0] % 2:
            cv, ci = torch.cat([cv, v[-1:]]), torch.cat([ci, i[-1:]])
        v, i = cv, ci
    return v[0], i[0]


def argmax_pair(x: torch.Tensor, ids: torch.Tensor | None = None, dim: int = -1):
    """(value, id) of ``first_nan_first_max`` along ``dim``: value bits of the winner, its id.

    ``ids`` (same shape as ``x``) maps positions to global ids that rise
    along ``dim``; by default the position itself."""
    pos = first_nan_first_max(x, dim=dim).unsqueeze(dim)
    value = f32_from_bits(f32_bits(x).gather(dim, pos)).squeeze(dim)
    if ids is None:
        return value, pos.squeeze(dim)
    return value, ids.gather(dim, pos).squeeze(dim)


__all__ = ["argmax_pair", "combine", "combine_in_order", "first_nan_first_max", "reduce_pairs"]
