"""Finding a family's per-rank system class in a module, and the test-only substitute for the golden one.

The system classes are found by name when a module names them in
``SYSTEM_CLASS`` (the kernel side's ``harness/families/<family>_kernel.py``
do), otherwise as the module's one class that defines both ``launch`` and
``state`` (preferring names starting with ``Golden`` in golden modules), so
the adapter follows the interface of ``docs/interfaces.md`` rather than a
spelling. Every import goes through ``import_or_unavailable``: a module that
fails to import makes the case not available, with the import error as its
reason, never a failure.

Tests of the harness itself (the fuzzer must find and shrink a known bug)
substitute a faulty system for a family's golden one through
``$RANKCHECK_TEST_PLANTED_SYSTEM`` (``family=tests.module:Class``), which
every rank inherits; only a class under the ``tests.`` package is accepted,
so a normal run cannot pick up a substitute by accident (``harness fuzz``
names it in its header when it is set). The reference is never substituted.
"""

from __future__ import annotations

import importlib
import inspect
import os
from typing import Any

from harness.wire.errors import NotAvailable


def import_or_unavailable(module: str) -> Any:
    """Import ``module``, turning any failure into ``NotAvailable`` that names the module and the cause."""
    try:
        return importlib.import_module(module)
    except Exception as exc:  # noqa: BLE001 - any import failure means "not available here"
        raise NotAvailable(f"cannot import {module}: {type(exc).__name__}: {exc}") from exc


def system_class(module: Any, prefer_prefix: str = "") -> type:
    """The class implementing the per-rank system interface (``launch`` + ``state``) in ``module``."""
    named = getattr(module, "SYSTEM_CLASS", None)
    if isinstance(named, str):
        named = getattr(module, named)
    if inspect.isclass(named):
        return named
    candidates = [
        obj for _, obj in inspect.getmembers(module, inspect.isclass)
        if obj.__module__.startswith(module.__name__) and callable(getattr(obj, "launch", None))
        and callable(getattr(obj, "state", None))
    ]
    preferred = [c for c in candidates if c.__name__.startswith(prefer_prefix)] if prefer_prefix else []
    chosen = preferred or candidates
    if len(chosen) != 1:
        raise NotAvailable(
            f"{module.__name__}: expected one system class with launch() and state(), found "
            f"{[c.__name__ for c in chosen] or 'none'}"
        )
    return chosen[0]


def resolve(dotted: str) -> Any:
    """The object named ``module:attribute`` (imported lazily; NotAvailable when it cannot be)."""
    module, _, attr = dotted.partition(":")
    obj = import_or_unavailable(module)
    try:
        return getattr(obj, attr)
    except AttributeError as exc:
        raise NotAvailable(f"{module} has no {attr}") from exc


PLANTED_SYSTEM_VAR = "RANKCHECK_TEST_PLANTED_SYSTEM"


def planted_system(family: str) -> type | None:
    """The test-only class ``$RANKCHECK_TEST_PLANTED_SYSTEM`` names for ``family``'s golden system, or None."""
    text = os.environ.get(PLANTED_SYSTEM_VAR, "")
    named, _, dotted = text.partition("=")
    if named != family:
        return None
    if not dotted.startswith("tests."):
        raise ValueError(f"${PLANTED_SYSTEM_VAR}: a test-only substitute must be a class under tests., got {dotted!r}")
    return resolve(dotted)
