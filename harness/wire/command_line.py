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
"""

from __future__ import annotations

import argparse
import importlib.metadata
import re
from pathlib import Path

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


def version() -> str:
    """The installed rankcheck version (importlib.metadata), else the one pyproject.toml states."""
    try:
        return importlib.metadata.version(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        match = re.search(r'^version\s*=\s*"([^"]+)"', _PYPROJECT.read_text(encoding="utf-8"), re.MULTILINE)
        return match.group(1) if match else "unknown"


__all__ = ["HelpFormatter", "PROG", "command_parser", "version"]
