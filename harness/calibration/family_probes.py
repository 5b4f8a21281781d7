"""What the families add to ``harness golden --probe``: each family's calibration module, found through the family registry.

A family whose golden functions or kernels the probe must check declares,
in ``harness/families/<family>/calibration.py`` (found by
``harness.families.registry.plugins``), any of: ``FP32_CHECKS``, checks
shaped like those of ``harness.calibration.fp32`` (run after the shared
ones, on the same probe module); ``MMA_CHAIN``, the function that runs its
kernel's MMA chain on the GPU (``harness.calibration.mma``); and
``PROBE_MODULES``, the kernel modules these need (no GPU probe runs when
one does not import).
"""

from __future__ import annotations

from typing import Any

from harness.families.registry import plugins


def declared(attribute: str) -> list[Any]:
    """``attribute`` of every family's calibration module that declares it, in the families' order."""
    return [getattr(module, attribute) for module in plugins("calibration").values() if hasattr(module, attribute)]


__all__ = ["declared"]
