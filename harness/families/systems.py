"""Finding a family's per-rank system class in a module, and the test-only substitute for the golden one.

The system classes are found by name when a module names them in
``SYSTEM_CLASS`` (the kernel side's ``harness/families/<family>/kernel.py``
do), otherwise as the module's one class that defines both ``launch`` and
``state`` (preferring names starting with ``Golden`` in golden modules), so
the adapter follows the interface of ``docs/interfaces.md`` rather than a
spelling. Every import goes through ``import_or_unavailable``: a module that
fails to import makes the case not available, with the import error as its
reason, never a failure.

Tests of the harness itself (the fuzzer must find and shrink a known bug,
a validation must fail on a known bug) substitute a faulty system for a
family's golden one through ``$RANKCHECK_TEST_PLANTED_SYSTEM``
(``family=tests.module:Class``), which every rank inherits. So that a normal
run cannot pick up a substitute by accident, the class must come from a
module whose file lies (real paths, symbolic links resolved) in this
repository's ``tests/`` directory: a ``tests`` package elsewhere on the
path (the repository's ``tests/`` is a namespace package, so any other
``tests`` directory merges into it) is refused, and it is refused before
it is imported, from the import system's spec of each package on the way.
Every report names the substitution while the variable is set
(``substitution``: the validate and fuzz headers, the provenance). The
reference is never substituted.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import os
from pathlib import Path
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
TESTS_DIR = Path(__file__).resolve().parents[2] / "tests"


def substitution() -> str:
    """The words every report carries while a test-only system replaces a golden one ('' when none does)."""
    text = os.environ.get(PLANTED_SYSTEM_VAR, "")
    if not text:
        return ""
    family, _, dotted = text.partition("=")
    return f"TEST-ONLY SUBSTITUTE: {family}'s golden system replaced by {dotted} (${PLANTED_SYSTEM_VAR})"


def _in_tests_dir(origin: str | None) -> bool:
    """Whether a module file ``origin`` lies, real paths resolved, in this repository's ``tests/`` directory."""
    return origin is not None and Path(os.path.realpath(origin)).is_relative_to(os.path.realpath(TESTS_DIR))


def check_test_module(module: str, var: str = PLANTED_SYSTEM_VAR) -> None:
    """Raise ValueError (naming ``$var``) unless ``module`` and each package above it come from this repository's
    ``tests/`` (a namespace package has no file and passes; its modules are checked in turn), before any of them
    runs."""
    parts = module.split(".")
    if parts[0] != "tests":
        raise ValueError(f"${var}: a test-only substitute must be under tests., got {module!r}")
    for depth in range(1, len(parts) + 1):
        name = ".".join(parts[:depth])
        spec = importlib.util.find_spec(name)  # imports the packages above ``name``, each already checked
        if spec is None:
            raise ValueError(f"${var}: no module {name}")
        if spec.has_location and not _in_tests_dir(spec.origin):
            raise ValueError(f"${var}: {name} is {spec.origin}, not a file of {TESTS_DIR}")


def planted_system(family: str) -> type | None:
    """The test-only class ``$RANKCHECK_TEST_PLANTED_SYSTEM`` names for ``family``'s golden system, or None."""
    text = os.environ.get(PLANTED_SYSTEM_VAR, "")
    named, _, dotted = text.partition("=")
    if named != family:
        return None
    check_test_module(dotted.partition(":")[0])
    return resolve(dotted)
