"""The adapter of each family, found rather than listed: every subpackage of ``harness.families`` with an ``ADAPTER``.

A family's harness layer is ``harness/families/<family>/`` (its adapter in
the package's ``__init__``, its kernel system and whatever else only it
needs beside it). This module imports each subpackage of
``harness.families`` (and of the ``harness/families`` folder of every extra
family root, ``golden.families.FAMILY_PATH_VAR``) and keeps those that
declare ``ADAPTER`` (a ``FamilyAdapter``), in the order of
``golden.families.FAMILIES`` (the one list of families, which this registry
must match: ``tests/harness/test_families.py``). No shared module names a
family; they ask ``adapter(family)``, or ``plugins(name)`` for the module
``name`` beside each family's adapter (a family's plug-in into a higher
floor: its recorded classes, its probe checks).
"""

from __future__ import annotations

import importlib
import importlib.util
import pkgutil
from types import ModuleType

from golden.families import FAMILIES, extend_package_path
from harness.families.family_adapter import FamilyAdapter


def _discover() -> dict[str, tuple[str, FamilyAdapter]]:
    """``(module, adapter)`` of every family under ``harness.families`` (extra roots too), in ``FAMILIES`` order."""
    package = importlib.import_module(__package__)  # harness.families, still initialising when it imports this
    extend_package_path(package, "harness", "families")
    found: dict[str, tuple[str, FamilyAdapter]] = {}
    for info in pkgutil.iter_modules(package.__path__):
        if not info.ispkg:
            continue
        module = f"{package.__name__}.{info.name}"
        declared = getattr(importlib.import_module(module), "ADAPTER", None)
        if isinstance(declared, FamilyAdapter):
            found[declared.family] = (module, declared)
    order = {f: i for i, f in enumerate(FAMILIES)}
    return {f: found[f] for f in sorted(found, key=lambda f: (order.get(f, len(order)), f))}


_FOUND = _discover()
ADAPTERS = {family: declared for family, (_, declared) in _FOUND.items()}
# Each adapter's module: an entry point of the reference code key (harness/references/code_key.py).
ADAPTER_MODULES = {family: module for family, (module, _) in _FOUND.items()}


def adapter(family: str) -> FamilyAdapter:
    """The adapter of ``family`` (ValueError naming the known families otherwise)."""
    if family not in ADAPTERS:
        raise ValueError(f"family must be one of {sorted(ADAPTERS)}, got {family!r}")
    return ADAPTERS[family]


def plugins(name: str) -> dict[str, ModuleType]:
    """Family -> its module ``name`` (``harness/families/<family>/<name>.py``), imported, for the families that have one."""
    return {family: importlib.import_module(f"{module}.{name}") for family, module in ADAPTER_MODULES.items()
            if importlib.util.find_spec(f"{module}.{name}") is not None}
