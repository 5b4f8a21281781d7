"""``docs/cli.md``, rendered from the parsers: every command's ``--help`` as the program prints it.

The page lists ``rankcheck`` and then each command in the order of
``rankcheck --help``, each followed by its own subcommands (``record
capture``, ``scale run``, ``bench report``, ...). The commands
``harness.cli`` hands to other modules are read from those modules'
``build_parser`` (imported by name, as the dispatch does), and ``bench``'s
result readers from ``harness.bench.READERS``. Help is rendered at a fixed
width (``WIDTH``), so the page does not depend on the terminal that wrote it.
``python -m harness.cli_docs`` rewrites the page; ``--check`` exits 1 when
the page differs from the parsers (tests/harness/test_cli_docs.py runs it).
"""

from __future__ import annotations

import argparse
import functools
import importlib
import sys
from pathlib import Path
from typing import Sequence

from harness.cli import DISPATCHED, build_parser
from harness.wire.command_line import PROG

WIDTH = 100
PAGE = Path(__file__).resolve().parents[1] / "docs" / "cli.md"
INTRO = (f"# The `{PROG}` command line\n\n"
         "Generated from the parsers by `.venv/bin/python -m harness.cli_docs`; do not edit by hand "
         "(a test fails when this page and the parsers differ). `python -m harness` is the same program as "
         f"`{PROG}`.\n")


def subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """The subcommand parsers of ``parser`` by name (empty when it has none)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def command_parsers() -> dict[str, argparse.ArgumentParser]:
    """``rankcheck``, ``rankcheck list``, ... -> parser: every command and subcommand in help order."""
    found: dict[str, argparse.ArgumentParser] = {}

    def walk(name: str, parser: argparse.ArgumentParser) -> None:
        """Record ``parser`` under ``name``, then its subcommands under theirs."""
        found[name] = parser
        for sub, child in subcommands(parser).items():
            walk(f"{name} {sub}", child)

    top = build_parser()
    found[PROG] = top
    for command, parser in subcommands(top).items():
        if command in DISPATCHED:
            module = importlib.import_module(DISPATCHED[command][0])
            walk(f"{PROG} {command}", module.build_parser())
            for reader, reader_module in getattr(module, "READERS", {}).items():
                walk(f"{PROG} {command} {reader}", importlib.import_module(reader_module).build_parser())
        else:
            walk(f"{PROG} {command}", parser)
    return found


def help_text(parser: argparse.ArgumentParser) -> str:
    """``parser``'s help as printed at ``WIDTH`` columns."""
    kept = parser.formatter_class
    parser.formatter_class = functools.partial(kept, width=WIDTH)
    try:
        return parser.format_help()
    finally:
        parser.formatter_class = kept


def render() -> str:
    """The whole page: the intro, a contents line, then each command's help in a code block."""
    parsers = command_parsers()
    contents = " · ".join(f"[`{name}`](#{name.replace(' ', '-')})" for name in parsers)
    sections = [f"## {name}\n\n```text\n{help_text(parser).rstrip()}\n```\n" for name, parser in parsers.items()]
    return "\n".join([INTRO, contents + "\n", *sections])


def main(argv: Sequence[str] | None = None) -> int:
    """Write docs/cli.md, or with ``--check`` exit 1 (naming the file) when it is not current."""
    parser = argparse.ArgumentParser(prog="python -m harness.cli_docs", description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare only; exit 1 when the page is stale")
    args = parser.parse_args(argv)
    page = render()
    if args.check:
        current = PAGE.read_text(encoding="utf-8") if PAGE.exists() else ""
        if current != page:
            print(f"{PAGE} is stale: run .venv/bin/python -m harness.cli_docs", file=sys.stderr)
            return 1
        return 0
    PAGE.write_text(page, encoding="utf-8")
    print(f"wrote {PAGE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
