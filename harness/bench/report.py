"""``python -m harness.bench.report``: the summary and plots of a stored result, or two results compared.

- ``python -m harness.bench.report RESULT.json [--out DIR]`` rebuilds
  ``<stem>.md`` (``harness.bench.summary``), ``<stem>.ratios.json``
  (``harness.bench.cases.ratios``) and ``<stem>.<family>.png``
  (``harness.bench.plot``) from a stored results document, beside it or in
  ``DIR``, and prints the summary. No GPU and no kernel is needed: it reads
  only the JSON.
- ``python -m harness.bench.report --compare OLD.json NEW.json`` prints
  each case's change as new/old median ratios (``harness.bench.compare``)
  as Markdown.

``write_report`` is also what ``python -m harness bench`` calls at the end
of a run (and after an interrupt, for what finished). Exit status: 0 done;
2 a file cannot be read or is not a ``rankcheck-bench/1`` document, or the
comparison has no case in common (nothing to compare).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Mapping, Sequence

from harness.bench.cases.ratios import write_ratios
from harness.bench.compare import compare, compare_markdown
from harness.bench.plot import plot_results, plotting_unavailable
from harness.bench.results import result_stem, validate_result
from harness.bench.summary import summary_markdown
from harness.wire.case_result import EXIT_NOTHING_RUN, EXIT_OK
from harness.wire.command_line import command_parser


class ReportInputError(ValueError):
    """A results file that cannot be read or does not follow the schema."""


def load_result(path: str) -> dict:
    """Read and validate the results document at ``path``; ``ReportInputError`` says why it cannot be used."""
    try:
        with open(path) as fh:
            document = json.load(fh)
        validate_result(document)
    except (OSError, ValueError) as exc:
        raise ReportInputError(f"{path}: {exc}") from exc
    return document


def write_report(document: Mapping, out_dir: str) -> dict:
    """Write ``<stem>.md``, ``<stem>.ratios.json`` and the per-family PNGs of ``document`` into ``out_dir``; return their paths and any note."""
    os.makedirs(out_dir, exist_ok=True)
    stem = os.path.join(out_dir, result_stem(document["date"]))
    text = summary_markdown(document)
    with open(stem + ".md", "w") as fh:
        fh.write(text)
    write_ratios(document, stem + ".ratios.json", os.path.basename(stem) + ".json")
    return {"summary": stem + ".md", "ratios": stem + ".ratios.json", "text": text, "plots": plot_results(document, stem),
            "plot_note": plotting_unavailable()}


def build_parser() -> argparse.ArgumentParser:
    """The ``rankcheck bench report`` command line (also ``python -m harness.bench.report``)."""
    parser = command_parser(
        "bench report",
        description="Rebuild a bench run's summary (.md) and plots (.png) from its JSON, or compare two runs.",
    )
    parser.add_argument("result", nargs="?", help="a bench results JSON (rankcheck-bench/1)")
    parser.add_argument("--out", help="where to write the summary and plots (default: beside RESULT)")
    parser.add_argument("--compare", nargs=2, metavar=("OLD", "NEW"), help="print new/old median ratios per case (default: no comparison)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the report command; return the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if bool(args.compare) == bool(args.result):
        parser.print_usage(sys.stderr)
        print("report: give either RESULT.json or --compare OLD.json NEW.json", file=sys.stderr)
        return EXIT_NOTHING_RUN
    try:
        if args.compare:
            old_path, new_path = args.compare
            old, new = load_result(old_path), load_result(new_path)
            print(compare_markdown(old, new, old_path, new_path), end="", flush=True)
            if not compare(old, new)["matched"]:
                print(f"report: {old_path} and {new_path} have no case in common", file=sys.stderr)
                return EXIT_NOTHING_RUN
            return EXIT_OK
        document = load_result(args.result)
    except ReportInputError as exc:
        print(f"report: {exc}", file=sys.stderr)
        return EXIT_NOTHING_RUN
    written = write_report(document, args.out or os.path.dirname(os.path.abspath(args.result)))
    print(written["text"], end="", flush=True)
    print(f"report: summary in {written['summary']}" + "".join(f"\nreport: plot {p}" for p in written["plots"]))
    if written["plot_note"]:
        print(f"report: no plots: {written['plot_note']}")
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
