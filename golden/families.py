"""The families, found rather than listed: the one registry that golden, scenarios and the harness read.

A kernel family is a folder per layer. Its golden layer is a subpackage of
``golden`` (``golden/<family>/``) whose ``FACTS`` (a
``golden.family_facts.FamilyFacts``) holds the plain facts the shared floors
branch on; this module imports every subpackage of ``golden`` and keeps
those that declare ``FACTS`` under the name the facts give. No module names
a family: the scenario schema, the builders, the recorded bundles, the
golden store and the harness's adapter registry
(``harness/families/registry.py``, which must agree with this one:
``tests/harness/test_families.py``) all read ``FAMILIES`` here.

Families outside the tree: ``RANKCHECK_FAMILY_PATH`` (``os.pathsep``
separated directories) names extra family roots, each shaped like the
repository (``golden/<family>/``, ``harness/families/<family>/``,
``scenarios/<family>/*.yaml``). Each root's ``golden`` folder is appended to
this package's search path before the discovery, so its families are found,
and imported as ``golden.<family>``, like the tree's own
(``docs/adding-a-family.md``; ``tests/harness/test_family_kit.py``).

``golden/`` imports nothing outside itself but ``contracts``, and
``scenarios/`` imports ``golden/``, so the registry lives here, the lowest
layer that holds a family.
"""

from __future__ import annotations

import importlib
import os
import pkgutil
from pathlib import Path

import golden
from golden.family_facts import FamilyFacts

# Extra family roots, each shaped like the repository (see the module docstring).
FAMILY_PATH_VAR = "RANKCHECK_FAMILY_PATH"


def family_roots() -> tuple[Path, ...]:
    """The extra family roots that ``RANKCHECK_FAMILY_PATH`` names, in its order (empty entries skipped)."""
    return tuple(Path(p) for p in os.environ.get(FAMILY_PATH_VAR, "").split(os.pathsep) if p)


def extend_package_path(package, *layer: str) -> None:
    """Append ``<root>/<layer...>`` of every extra family root to ``package``'s search path (once each)."""
    for root in family_roots():
        folder = str(root.joinpath(*layer))
        if folder not in package.__path__ and Path(folder).is_dir():
            package.__path__.append(folder)


def _discover() -> dict[str, FamilyFacts]:
    """Every subpackage of ``golden`` that declares ``FACTS``, by family name, in the families' order."""
    extend_package_path(golden, "golden")
    found: list[FamilyFacts] = []
    for info in pkgutil.iter_modules(golden.__path__):
        if not info.ispkg:
            continue
        declared = getattr(importlib.import_module(f"golden.{info.name}"), "FACTS", None)
        if isinstance(declared, FamilyFacts):
            if declared.name != info.name:  # a family's name leads to its folder in every layer
                raise ValueError(f"golden/{info.name}: FACTS names the family {declared.name!r}, not {info.name!r}")
            found.append(declared)
    return {f.name: f for f in sorted(found, key=lambda f: (f.order, f.name))}


FAMILY_FACTS = _discover()
FAMILIES = tuple(FAMILY_FACTS)


def facts(family: str) -> FamilyFacts:
    """The facts of ``family`` (ValueError naming the known families otherwise)."""
    try:
        return FAMILY_FACTS[family]
    except KeyError:
        raise ValueError(f"family must be one of {', '.join(FAMILIES)}, got {family!r}") from None


__all__ = ["FAMILIES", "FAMILY_FACTS", "FAMILY_PATH_VAR", "FamilyFacts", "extend_package_path", "facts",
           "family_roots"]
