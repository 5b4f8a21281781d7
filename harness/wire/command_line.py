"""The conventions every rankcheck command line shares: one program name, help with defaults, the version.

Every parser of the project (``rankcheck`` itself and the commands it hands
to other modules: ``record``, ``bench``, ``bench report``, ``bench
breakdown``, ``compile``, ``fuzz``, ``scale``) is made by
``command_parser``, so its usage names the command as a user types it
(``rankcheck bench report``), whether it was started as ``rankcheck``, as
``python -m harness`` or through a module alias such as ``python -m
harness.bench.report``. ``HelpFormatter`` appends ``(default: X)`` to an
option's help where the default is a value (not None, not a flag's False)
and the help does not already say it in words. ``docs/cli.md`` is rendered
from these parsers (``harness.cli_docs``).

The argument types the commands share live here too, so that a number
that does not parse reads the same in every command (``argument --world:
expected a whole number >= 1, got 'x'``): ``number_type`` makes one, and
``positive_int``, ``nonnegative_int``, ``positive_seconds`` and
``finite_float`` are the ones several commands use. ``harness.cli`` hands
``bench``, ``fuzz`` and the other commands to their own modules by name
(``importlib``, so that a command's heavy imports happen only when it
runs); those modules import their argument types from here, never from
``harness.cli``, so no command imports the command line that dispatches to
it. This module is on the lowest floor (``harness.wire``), which every
command may import.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import math
import re
from pathlib import Path
from typing import Callable

PROG = "rankcheck"
DISTRIBUTION = "rankcheck"
_PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"


class HelpFormatter(argparse.HelpFormatter):
    """Text wrapped to the terminal; each option's help followed by ``(default: X)`` when its default is a value."""

    def _get_help_string(self, action: argparse.Action) -> str:
        """The help text of ``action``, its default appended unless None, False, empty, or already in the text."""
        text = action.help or ""
        default = action.default
        if (default is None or default is False or default is argparse.SUPPRESS or default == [] or "default" in text
                or not action.option_strings and action.nargs not in ("?", "*")):
            return text
        return f"{text} (default: %(default)s)"


def command_parser(command: str | None = None, **kwargs) -> argparse.ArgumentParser:
    """An ArgumentParser whose usage reads ``rankcheck <command>`` (``rankcheck`` alone for the top level)."""
    kwargs.setdefault("formatter_class", HelpFormatter)
    return argparse.ArgumentParser(prog=f"{PROG} {command}" if command else PROG, **kwargs)


def number_type(parse: Callable[[str], float], words: str, minimum: float | None = None,
                inclusive: bool = True) -> Callable[[str], float]:
    """An argparse type that parses with ``parse`` and rejects anything else, or below ``minimum``, in words."""
    bound = "" if minimum is None else f" {'>=' if inclusive else '>'} {minimum:g}"

    def check(text: str) -> float:
        """``text`` as the number, or ArgumentTypeError saying what was expected."""
        try:
            value = parse(text)
        except ValueError:
            value = None
        if (value is None or not math.isfinite(value)
                or (minimum is not None and (value < minimum if inclusive else value <= minimum))):
            raise argparse.ArgumentTypeError(f"expected {words}{bound}, got {text!r}")
        return value

    check.__name__ = words  # argparse names the type by it where it does not use our message
    return check


positive_int = number_type(int, "a whole number", 1)
nonnegative_int = number_type(int, "a whole number", 0)
positive_seconds = number_type(float, "a number of seconds", 0, inclusive=False)
finite_float = number_type(float, "a finite number")


def version() -> str:
    """The installed rankcheck version (importlib.metadata), else the one pyproject.toml states."""
    try:
        return importlib.metadata.version(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        match = re.search(r'^version\s*=\s*"([^"]+)"', _PYPROJECT.read_text(encoding="utf-8"), re.MULTILINE)
        return match.group(1) if match else "unknown"


__all__ = ["HelpFormatter", "PROG", "command_parser", "finite_float", "nonnegative_int", "number_type", "positive_int",
           "positive_seconds", "version"]
