"""Seeded draws: the random streams every family's builders take their tensors from.

Every tensor is drawn on the CPU from its own ``torch.Generator``, seeded by
a sha256 of the scenario seed and a label naming the tensor, the call and,
where a tensor has one, the row (``generator``), so every rank and every
machine (same torch) builds the same bytes. The shared builders
(``scenarios.builders``: injections, ``bad_input``) and each family's
builders (``scenarios/<family>/``) draw through these helpers, so a family
added later draws its inputs the same way.
"""

from __future__ import annotations

import hashlib
from typing import Any, Callable

import torch

# Value scales shared by the families' builders (realistic magnitudes: see scenarios.builders).
LOGIT_STD = 2.0
HEAD_STD = 0.02
EMBED_STD = 1.0


def generator(seed: int, *label: Any) -> torch.Generator:
    """A CPU generator seeded by sha256 of the scenario seed and ``label``."""
    text = "|".join([str(seed), *map(str, label)]).encode()
    key = int.from_bytes(hashlib.sha256(text).digest()[:8], "little") & (2**63 - 1)
    return torch.Generator(device="cpu").manual_seed(key)


def per_row(rows: int, make: Callable[[int], torch.Tensor]) -> torch.Tensor:
    """Stack ``make(r)`` over ``rows`` rows (each row from its own stream)."""
    return torch.stack([make(r) for r in range(rows)])


def normal(seed: int, shape: tuple[int, ...], std: float, dtype: torch.dtype, *label: Any) -> torch.Tensor:
    """N(0, std) of ``shape`` drawn in fp32 and rounded once to ``dtype``."""
    return (torch.randn(shape, generator=generator(seed, *label)) * std).to(dtype)


def gumbel(seed: int, shape: tuple[int, ...], *label: Any) -> torch.Tensor:
    """Gumbel(0, 1) noise ``-log(-log(u))`` in fp32, u uniform in (0, 1) (logs in fp64, see ``transcendental``)."""
    u = torch.rand(shape, generator=generator(seed, *label))
    u = u.clamp(min=torch.finfo(torch.float32).tiny, max=1.0 - 2.0**-24)
    return transcendental(lambda x: -torch.log(-torch.log(x)), u)


def transcendental(fn: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor) -> torch.Tensor:
    """``fn(x)`` evaluated in fp64 and rounded once to fp32.

    Torch's fp32 log, exp and sigmoid on the CPU come from vectorised
    libraries chosen by the CPU (AVX2 or AVX-512) and differ between them in
    the last bit, so inputs built with them differ between a laptop and a GPU
    node, and the stored golden digests with them. In fp64 the differences
    are far below fp32's rounding: the inputs are the same bits everywhere."""
    return fn(x.to(torch.float64)).to(torch.float32)


def dtype_named(name: str) -> torch.dtype:
    """The torch dtype named ``name`` (``bfloat16``, ``float32``...)."""
    return getattr(torch, name)


def temperatures(temps: list[float], max_reqs: int) -> torch.Tensor:
    """Per-request fp32 temperatures, ``temps`` cycled over the requests."""
    return torch.tensor([temps[i % len(temps)] for i in range(max_reqs)], dtype=torch.float32)


def request_rows(seed: int, call_index: int, rows: int, max_reqs: int) -> torch.Tensor:
    """The request index of each row: a prefix of a random permutation of the requests."""
    perm = torch.randperm(max_reqs, generator=generator(seed, "call", call_index, "requests"))
    # Rows past max_reqs (only a rank that disagrees on rows has them) reuse requests.
    return perm[torch.arange(rows) % max_reqs].to(torch.int64)


__all__ = ["EMBED_STD", "HEAD_STD", "LOGIT_STD", "dtype_named", "generator", "gumbel", "normal", "per_row",
           "request_rows", "temperatures", "transcendental"]
