"""One adapter per kernel family: the only place that knows a family's modules and outputs.

``family_adapter.FamilyAdapter`` (what the harness needs to know about one
family), ``registry.adapter(family)`` (each family's adapter by name; the
adapters themselves are ``<family>.py``), ``systems`` (finding a module's
per-rank system class; the test-only planted golden system), ``placement``
(kernel inputs copied to the rank's GPU, layout kept), ``<family>/kernel.py``
(each family's kernel system over the kernels' public API), ``catalog``
(scenarios as cases), ``arch_facts`` (which architecture's arithmetic facts
the golden uses). The names below are the package's public ones.
"""

from harness.families.family_adapter import FamilyAdapter
from harness.families.placement import DevicePlaced, placed, rank_device, to_device
from harness.families.registry import adapter
from harness.families.systems import PLANTED_SYSTEM_VAR, planted_system, substitution, system_class
from harness.wire.errors import NotAvailable

__all__ = ["PLANTED_SYSTEM_VAR", "DevicePlaced", "FamilyAdapter", "NotAvailable", "adapter", "placed", "substitution",
           "planted_system", "rank_device", "system_class", "to_device"]
