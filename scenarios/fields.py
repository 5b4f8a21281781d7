"""Field checks for scenario data: every failure names the file and the field path.

``Checker(source)`` wraps the checks a validator needs (mapping with
allowed and required keys, int in a range, number, bool, string from a set or
matching a pattern, list of checked items); each raises ``ScenarioError``
with the message ``<file>: <field path>: expected ..., got ...``, the one
format every scenario and bundle error has. A value quoted in a message is
cut to 60 characters by ``describe``, which never builds the whole repr (a
value may be a very long string or list).
"""

from __future__ import annotations

import math
import re
import reprlib
from typing import Any, Callable, Sequence

from scenarios.model import ERROR_TYPES, ExpectedError


# A size field beyond int32 cannot index a kernel's tensors (CuTe layouts here use 32-bit indices).
MAX_EXTENT = 2**31 - 1


class ScenarioError(ValueError):
    """A scenario file that is not valid; the message names file and field."""


_SHORT = reprlib.Repr()
_SHORT.maxlevel, _SHORT.maxlist, _SHORT.maxdict, _SHORT.maxstring, _SHORT.maxother = 2, 4, 4, 40, 40
_SHORT.maxlong = 40


def describe(value: Any) -> str:
    """A repr of ``value`` of at most 60 characters, built without walking it whole (a value may be huge)."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 128:
        return f"an int of {value.bit_length()} bits"
    text = _SHORT.repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


class Checker:
    """Field checks that raise ``ScenarioError`` naming ``source`` and the path."""

    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, path: str, message: str) -> None:
        """Raise the error for ``path`` with ``message``."""
        raise ScenarioError(f"{self.source}: {path}: {message}")

    def mapping(self, value: Any, path: str, allowed: Sequence[str], required: Sequence[str] = ()) -> dict:
        """``value`` as a dict whose keys are all in ``allowed`` and include ``required``."""
        if not isinstance(value, dict):
            self.fail(path, f"expected a mapping, got {describe(value)}")
        for key in value:
            if key not in allowed:
                self.fail(f"{path}.{key}" if path else str(key),
                          f"unknown key (allowed: {', '.join(sorted(allowed))})")
        for key in required:
            if key not in value:
                self.fail(f"{path}.{key}" if path else key, "required key is missing")
        return value

    def integer(self, value: Any, path: str, lo: int | None = None, hi: int | None = None) -> int:
        """``value`` as an int (not a bool) within ``[lo, hi]``."""
        if isinstance(value, bool) or not isinstance(value, int):
            self.fail(path, f"expected int{self._range(lo, hi)}, got {describe(value)}")
        if (lo is not None and value < lo) or (hi is not None and value > hi):
            self.fail(path, f"expected int{self._range(lo, hi)}, got {describe(value)}")
        return value

    def extent(self, value: Any, path: str, lo: int = 1) -> int:
        """``value`` as a size (a count of rows, requests, tokens...) in ``[lo, MAX_EXTENT]``."""
        return self.integer(value, path, lo, MAX_EXTENT)

    @staticmethod
    def _range(lo: int | None, hi: int | None) -> str:
        """The text of an int range for messages."""
        if lo is not None and hi is not None:
            return f" in {lo}..{hi}"
        if lo is not None:
            return f" >= {lo}"
        if hi is not None:
            return f" <= {hi}"
        return ""

    def number(self, value: Any, path: str, *, positive: bool = False, nonneg: bool = False,
               finite: bool = True) -> float:
        """``value`` as a float (ints accepted), optionally > 0 or >= 0."""
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            self.fail(path, f"expected a number, got {describe(value)}")
        value = float(value)
        if finite and not math.isfinite(value):
            self.fail(path, f"expected a finite number, got {value}")
        if positive and not value > 0:
            self.fail(path, f"expected a number > 0, got {value}")
        if nonneg and not value >= 0:
            self.fail(path, f"expected a number >= 0, got {value}")
        return value

    def boolean(self, value: Any, path: str) -> bool:
        """``value`` as a bool (YAML true/false only)."""
        if not isinstance(value, bool):
            self.fail(path, f"expected true or false, got {describe(value)}")
        return value

    def string(self, value: Any, path: str, choices: Sequence[str] | None = None,
               pattern: str | None = None) -> str:
        """``value`` as a non-empty str, one of ``choices`` or matching ``pattern``."""
        if not isinstance(value, str) or not value:
            self.fail(path, f"expected a non-empty string, got {describe(value)}")
        if choices is not None and value not in choices:
            self.fail(path, f"expected one of {', '.join(choices)}, got {describe(value)}")
        if pattern is not None and not re.fullmatch(pattern, value):
            self.fail(path, f"expected a string matching {pattern}, got {describe(value)}")
        return value

    def sequence(self, value: Any, path: str, item: Callable[[Any, str], Any], *,
                 min_len: int = 0, max_len: int | None = None) -> list:
        """``value`` as a list, each item checked by ``item(value, path[i])``."""
        if not isinstance(value, list):
            self.fail(path, f"expected a list, got {describe(value)}")
        if len(value) < min_len or (max_len is not None and len(value) > max_len):
            bound = f"{min_len}..{max_len}" if max_len is not None else f">= {min_len}"
            self.fail(path, f"expected a list of length {bound}, got {len(value)} items")
        return [item(v, f"{path}[{i}]") for i, v in enumerate(value)]



def check_error(c: Checker, raw: Any, path: str) -> ExpectedError:
    """An expected error: ``type`` (exception class name), ``match`` (regex), optional ``rank``."""
    m = c.mapping(raw, path, ("type", "match", "rank"), required=("type", "match"))
    match = c.string(m["match"], f"{path}.match")
    try:
        re.compile(match)
    except re.error as exc:
        c.fail(f"{path}.match", f"not a valid regular expression: {exc}")
    rank = m.get("rank")
    return ExpectedError(c.string(m["type"], f"{path}.type", ERROR_TYPES), match,
                         None if rank is None else c.integer(rank, f"{path}.rank", 0))


# Checks the families' config and builder options share (each family's checks: scenarios/<family>/).


def is_pow2(n: int) -> bool:
    """Whether ``n`` is a positive power of two."""
    return n > 0 and n & (n - 1) == 0


def exact_reciprocal(t: float) -> bool:
    """Whether 1/t is exact in fp32 (0 = greedy, or a power of two)."""
    if t == 0.0:
        return True
    mantissa, _ = math.frexp(t)
    return mantissa == 0.5


def check_temperatures(c: Checker, raw: Any, path: str, size: str) -> list[float]:
    """Per-request temperatures (cycled over requests); powers of two or 0 at cpu size."""
    temps = c.sequence(raw, path, lambda v, p: c.number(v, p, nonneg=True), min_len=1)
    if size == "cpu":
        for i, t in enumerate(temps):
            if not exact_reciprocal(t):
                c.fail(f"{path}[{i}]", f"cpu-size scenarios need 0 or a power of two "
                                       f"(exact reciprocal without a GPU table), got {t}")
    return temps
