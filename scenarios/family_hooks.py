"""The one interface between the shared scenario code and a family: a set of hooks, found by the family's name.

The validator (``scenarios.schema``) and the builders
(``scenarios.builders``) know no family. Each family's scenario layer is
the package ``scenarios/<family>/`` (its YAML files beside its
``__init__.py``), which declares ``HOOKS``, a ``ScenarioHooks``: how its
config, builder options, call params and a call's steps are checked (with
defaults filled), the largest tensor a scenario implies, how its static
and call inputs are drawn from the seed, and which of the injection kinds
that apply to some families only (``scenarios.injections``) it supports. ``hooks(family)`` imports
``scenarios.<family>`` when first asked (the families themselves come from
``golden.families``), so a family added under an extra family root
(``golden.families.FAMILY_PATH_VAR``) is found the same way: that root's
``scenarios`` folder joins this package's search path.
"""

from __future__ import annotations

import functools
import importlib
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import scenarios
from golden.families import FAMILIES, extend_package_path
from scenarios.model import DATA_KINDS, HARNESS_KINDS


@dataclass(frozen=True)
class ScenarioHooks:
    """One family's scenario layer, as the shared validator and builders call it."""

    config: Callable[..., dict]  # (checker, raw config, worlds) -> the config, defaults filled
    inputs: Callable[..., dict]  # (checker, raw inputs, size, config, worlds) -> the builder options
    params: Callable[..., dict]  # (checker, raw params, path) -> a call's params
    steps: Callable[..., "int | None"]  # (checker, raw call, rows, path, config) -> a call's steps (rows checked)
    largest: Callable[..., tuple[str, int]]  # (config, calls) -> the largest tensor: its shape in words, elements
    static: Callable[..., dict]  # (scenario) -> the static (weight) tensors, full and unsharded
    call: Callable[..., dict]  # (scenario, call index, rows, steps, params, world) -> the inputs before injections
    injections: tuple[str, ...] = ()  # the family-specific injection kinds it supports (the rest apply to all)


@functools.lru_cache(maxsize=None)
def hooks(family: str) -> ScenarioHooks:
    """The ``HOOKS`` of ``scenarios.<family>`` (ValueError for a family that is not one, or declares none)."""
    if family not in FAMILIES:
        raise ValueError(f"family must be one of {', '.join(FAMILIES)}, got {family!r}")
    extend_package_path(scenarios, "scenarios")
    declared = getattr(importlib.import_module(f"scenarios.{family}"), "HOOKS", None)
    if not isinstance(declared, ScenarioHooks):
        raise ValueError(f"scenarios/{family}/__init__.py declares no HOOKS (a ScenarioHooks)")
    unknown = sorted(set(declared.injections) - set(DATA_KINDS) - set(HARNESS_KINDS))
    if unknown:
        raise ValueError(f"scenarios/{family}/__init__.py: HOOKS.injections names unknown kinds {', '.join(unknown)}")
    return declared


def families_supporting(kind: str) -> list[str]:
    """The families whose hooks declare the injection ``kind``, sorted by name."""
    return sorted(f for f in FAMILIES if kind in hooks(f).injections)


def family_folders(family: str) -> list[Path]:
    """Every folder that may hold ``family``'s scenario files: this package's and each extra root's."""
    extend_package_path(scenarios, "scenarios")
    return [Path(p) / family for p in scenarios.__path__]


__all__ = ["ScenarioHooks", "families_supporting", "family_folders", "hooks"]
