"""Padding rows of a decode batch: the request map's rule, shared by every family whose rows map to requests.

A batch row names its request through a request map (an index per row, or
per row and step). Any index outside ``[0, max_reqs)`` marks a padding row:
the kernels bound the index on the device, so such a row is drawn greedily
and caches nothing, whatever its value. ``as_padding`` maps every such
index to -1, the one spelling of padding, so the golden computes a
padding row's outputs from the mapped call alike.
"""

from __future__ import annotations

import torch


def as_padding(idx_mapping: torch.Tensor, max_reqs: int) -> torch.Tensor:
    """A copy of ``idx_mapping`` with every request index outside ``[0, max_reqs)`` replaced by -1 (padding)."""
    return torch.where((idx_mapping >= 0) & (idx_mapping < max_reqs), idx_mapping, torch.full_like(idx_mapping, -1))


__all__ = ["as_padding"]
