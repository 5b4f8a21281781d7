"""The adapter of each family, by name: the one place that lists the families' adapter modules."""

from __future__ import annotations

from harness.families import allreduce_mhc, markov_fused, markov_sharded
from harness.families.family_adapter import FamilyAdapter

ADAPTERS = {a.ADAPTER.family: a.ADAPTER for a in (markov_fused, markov_sharded, allreduce_mhc)}


def adapter(family: str) -> FamilyAdapter:
    """The adapter of ``family`` (ValueError naming the known families otherwise)."""
    if family not in ADAPTERS:
        raise ValueError(f"family must be one of {sorted(ADAPTERS)}, got {family!r}")
    return ADAPTERS[family]
