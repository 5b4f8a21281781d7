"""What a recording knows of one public kernel class: ``PublicClass`` and its methods' ``MethodFacts``.

Each family declares its public classes in its own home
(``harness/families/<family>/recording.py``) with these two types, and
``harness.recording.targets`` gathers them into its one table; they live
apart from that table so that a family's declaration and the table never
import each other.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

GOLDEN_MODULE = "golden.public"


@dataclass(frozen=True)
class MethodFacts:
    """What the world analysis compares of one method's calls across ranks."""

    agreed: tuple[str, ...] = ()
    per_rank: tuple[str, ...] = ()


@dataclass(frozen=True)
class PublicClass:
    """One public kernel class: its implementations' modules and its recorded methods."""

    name: str
    kernel_module: str
    methods: Mapping[str, MethodFacts] = field(default_factory=dict)
    golden_module: str = GOLDEN_MODULE

    def module(self, impl: str) -> str:
        """The module holding the class for ``impl`` (``golden`` or ``kernel``)."""
        if impl not in ("golden", "kernel"):
            raise ValueError(f"impl: expected golden or kernel, got {impl!r}")
        return self.golden_module if impl == "golden" else self.kernel_module
