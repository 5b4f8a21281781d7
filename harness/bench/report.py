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
- ``python -m harness.bench.report RESULT.json --previous DIR`` does the
  first, then compares RESULT with the newest ``bench-<stamp>.json`` in DIR
  stamped before it (``previous_result``; the repository's results folder
  keeps the run of record) and writes that page beside the summary as
  ``bench-compare-<old stamp>-<new stamp>.md``, the name that folder keeps
  it under.

``write_report`` is also what ``python -m harness bench`` calls at the end
of a run (and after an interrupt, for what finished). Exit status: 0 done;
2 a file cannot be read or is not a ``rankcheck-bench/1`` document, or the
comparison has no case in common (nothing to compare), or ``--previous``
names a folder without an earlier result (the summary is written all the same).
"""

from __future__ import annotations

import argparse
import glob
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


def previous_result(directory: str, document: Mapping) -> str | None:
    """The newest ``bench-<stamp>.json`` in ``directory`` stamped before ``document``'s run, or None."""
    own = result_stem(document["date"])
    earlier = [path for path in glob.glob(os.path.join(directory, "bench-*Z.json"))
               if os.path.basename(path)[:-len(".json")] < own]
    return max(earlier, key=os.path.basename) if earlier else None


def write_comparison(old: Mapping, new: Mapping, old_path: str, out_dir: str) -> tuple[str, str]:
    """Write the comparison of ``old`` (read from ``old_path``) with ``new`` into ``out_dir``; return (path, text)."""
    new_stem = result_stem(new["date"])
    text = compare_markdown(old, new, os.path.basename(old_path), new_stem + ".json")
    path = os.path.join(out_dir, f"bench-compare-{result_stem(old['date']).removeprefix('bench-')}-"
                                 f"{new_stem.removeprefix('bench-')}.md")
    with open(path, "w") as fh:
        fh.write(text)
    return path, text


def _against_previous(document: Mapping, directory: str, out_dir: str) -> int:
    """Compare ``document`` with the newest earlier result in ``directory`` and write the page; the exit status."""
    found = previous_result(directory, document)
    if found is None:
        print(f"report: no bench-<stamp>.json in {directory} earlier than {result_stem(document['date'])}; "
              "no comparison written", file=sys.stderr)
        return EXIT_NOTHING_RUN
    try:
        old = load_result(found)
    except ReportInputError as exc:
        print(f"report: {exc}", file=sys.stderr)
        return EXIT_NOTHING_RUN
    path, text = write_comparison(old, document, found, out_dir)
    print(text, end="")
    print(f"report: comparison with {found} in {path}")
    if not compare(old, document)["matched"]:
        print(f"report: {found} and this run have no case in common", file=sys.stderr)
        return EXIT_NOTHING_RUN
    return EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    """The ``rankcheck bench report`` command line (also ``python -m harness.bench.report``)."""
    parser = command_parser(
        "bench report",
        description="Rebuild a bench run's summary (.md) and plots (.png) from its JSON, or compare two runs.",
    )
    parser.add_argument("result", nargs="?", help="a bench results JSON (rankcheck-bench/1)")
    parser.add_argument("--out", help="where to write the summary and plots (default: beside RESULT)")
    parser.add_argument("--compare", nargs=2, metavar=("OLD", "NEW"), help="print new/old median ratios per case (default: no comparison)")
    parser.add_argument("--previous", metavar="DIR",
                        help="also compare RESULT with the newest earlier bench-<stamp>.json in DIR (the results "
                             "folder of record) "
                             "and write bench-compare-<old>-<new>.md beside the summary (default: no comparison)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the report command; return the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if bool(args.compare) == bool(args.result) or (args.compare and args.previous):
        parser.print_usage(sys.stderr)
        print("report: give either RESULT.json [--previous DIR] or --compare OLD.json NEW.json", file=sys.stderr)
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
    out_dir = args.out or os.path.dirname(os.path.abspath(args.result))
    written = write_report(document, out_dir)
    print(written["text"], end="", flush=True)
    print(f"report: summary in {written['summary']}" + "".join(f"\nreport: plot {p}" for p in written["plots"]))
    if written["plot_note"]:
        print(f"report: no plots: {written['plot_note']}")
    return _against_previous(document, args.previous, out_dir) if args.previous else EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
