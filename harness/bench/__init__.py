"""``python -m harness bench``: time the registered benchmark cases on this GPU.

``main(argv)`` parses ``[--family F] [--case NAME | --case F/NAME[,F/PATTERN...]] [--all]
[--out DIR] [--warmup N] [--reps N] [--thresholds-into PATH] [--list]``, discovers the cases
(``harness/bench/cases/*.py`` and each family's ``harness/families/<family>/bench*.py``;
see ``harness.bench.registry`` for how a kernel helper declares one) and runs
them (``harness.bench.runner``).

Without ``--all`` (or an explicit ``--case``) it runs the default set: the
cases their families mark ``default``, chosen with ``DEFAULT_WARMUP`` and
``DEFAULT_REPS`` to finish within ``BUDGET_S`` on one H200
(``harness.bench.budget``). While it runs, each case's line is printed as it
completes, under a progress bar on a terminal (``harness.bench.console``);
the results document is rewritten after every case (``results.ResultsWriter``),
and at the end the summary and the plots are written beside it and the
summary printed (``harness.bench.report``). A run (not interrupted) hands
its document to every family whose bench module records tuning from it
(``RECORD_THRESHOLDS``, e.g. the all-reduce's LL/BT crossovers, keyed by
platform, merged into its table in the user cache, which its kernels read
over the shipped defaults), or into ``--thresholds-into PATH``; the source
tree stays clean.

torchrun cases (``launcher="torchrun"``, none in the default set; ``--list``
marks them ``torchrun xN``) run after the others, each in N processes
(``harness.bench.torchrun``), their entries merged into the same document;
with only torchrun cases selected the document takes rank 0's device and
machine figures, and no GPU is needed to start them: their ranks say why
they cannot run.

Exit status, never green when nothing was measured: 0 every selected case
ran; 1 a case or a case module failed, the CUDA context was lost, or a
torchrun case was not available while others ran (unless
``--allow-unavailable``); 2 nothing to run (no case matches the selection,
with what exists; no GPU for in-process cases, with why; torchrun cases that
all said not available, with why, unless ``--allow-unavailable``: 0; bad
arguments); 130 interrupted (SIGINT or SIGTERM; what finished is
kept, with its summary; a second signal ends the process without writing
more, as soon as Python runs again: a CUDA synchronize returns first, within
a kernel's timeout).
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import fnmatch
import importlib
import os
import signal
import sys
import time
from typing import Iterator, Sequence

import torch

from harness.bench.budget import BUDGET_S, DEFAULT_REPS, DEFAULT_WARMUP
from harness.bench.registry import REGISTRY, BenchCase, BenchContext, Prepared, bench_case, discover, family_hooks
from harness.wire.case_files import REPO_ROOT
from harness.wire.command_line import command_parser, nonnegative_int, positive_int
from harness.wire.case_result import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_NOTHING_RUN, EXIT_OK

DEFAULT_OUT = str(REPO_ROOT / "runs" / "bench")


# ``rankcheck bench report|breakdown``: the result readers, each its own module (and ``python -m`` alias).
READERS = {"report": "harness.bench.report", "breakdown": "harness.bench.breakdown"}


def build_parser() -> argparse.ArgumentParser:
    """The ``rankcheck bench`` command line."""
    parser = command_parser(
        "bench",
        usage="rankcheck bench [options] | rankcheck bench {report,breakdown} ...",
        description="Benchmark registered kernel cases on this GPU; each case is printed as it completes. "
                    "`rankcheck bench report` rebuilds a run's summary and plots or compares two runs; "
                    "`rankcheck bench breakdown` times a kernel's phases from its stamps.",
        epilog=(f"Without --all, the default set runs: a representative subset (see --list) chosen to finish "
                f"within {BUDGET_S / 60:.0f} minutes on one H200 at the default --warmup/--reps. --all runs every "
                "case (the all-reduce's whole M sweep and the finalize cases the LL/BT thresholds need); for a "
                "long, careful run: --all --warmup 20 --reps 100. The summary (.md) and plots (.png) are written "
                "beside the JSON; rankcheck bench report rebuilds them from a stored JSON."),
    )
    parser.add_argument("--family", help="only this family's cases (default: every family)")
    parser.add_argument("--case", help="only this case (NAME or FAMILY/NAME), default set or not; several separated "
                                       "by commas, each may be a pattern (FAMILY/torchrun_*)")
    parser.add_argument("--all", action="store_true", help="every registered case, not only the default set")
    parser.add_argument("--out", default=DEFAULT_OUT, help="results directory (default: runs/bench/, git-ignored)")
    parser.add_argument("--warmup", type=nonnegative_int, default=DEFAULT_WARMUP,
                        help=f"graph replays / eager loops before timing (default {DEFAULT_WARMUP})")
    parser.add_argument("--reps", type=positive_int, default=DEFAULT_REPS,
                        help=f"timed replays per mode, each of 16 to 512 calls (default {DEFAULT_REPS})")
    parser.add_argument("--thresholds-into", default=None, metavar="PATH",
                        help="where the thresholds the run measured go (e.g. the all-reduce's LL/BT crossovers; "
                             "default: the family's table in the user cache, which its kernels read over the "
                             "shipped one; name the shipped file to change the defaults; "
                             "harness/families/<family>/thresholds.py)")
    parser.add_argument("--allow-unavailable", action="store_true",
                        help="exit 0 when a torchrun case is not available here (no GPU) and nothing failed")
    parser.add_argument("--list", action="store_true",
                        help="list the selected cases (default or --all) and exit; no GPU needed")
    return parser


def select(family: str | None, case: str | None, everything: bool) -> tuple[list[BenchCase], str]:
    """The cases a selection names, and (when there are none) why: what matched nothing and what exists.

    ``case`` is a name or ``family/name``, or several separated by commas, each
    possibly a shell-style pattern (``FAMILY/torchrun_*``); a pattern
    reaches cases outside the default set as a name does."""
    if case and "," in case:
        found: dict[str, BenchCase] = {}
        for part in filter(None, (p.strip() for p in case.split(","))):
            chosen, why = select(family, part, everything)
            if not chosen:
                return [], why
            found.update((c.key, c) for c in chosen)
        return list(found.values()), ""
    name = case
    if case and "/" in case:
        case_family, name = case.split("/", 1)
        if family and family != case_family:
            return [], f"bench: --family {family} and --case {case} name different families"
        family = case_family
    if name and any(mark in name for mark in "*?["):
        chosen = [c for c in REGISTRY.cases(family=family) if fnmatch.fnmatchcase(c.name, name)]
    else:
        chosen = REGISTRY.cases(family=family, name=name, defaults_only=not (everything or case))
    if chosen:
        return chosen, ""
    known = REGISTRY.families()
    if family and family not in known:
        hint = difflib.get_close_matches(family, known, n=3)
        return [], (f"bench: no family {family!r} (families: {', '.join(known) or 'none'})"
                    + (f"; did you mean {', '.join(hint)}?" if hint else ""))
    if name:
        names = [c.name for c in REGISTRY.cases(family=family)]
        hint = difflib.get_close_matches(name, names, n=3)
        where = f" in {family}" if family else ""
        return [], (f"bench: no case {name!r}{where}" + (f"; did you mean {', '.join(hint)}?" if hint else "")
                    + " (--list --all shows every case)")
    return [], f"bench: the default set of {family} is empty; --all selects its {len(REGISTRY.cases(family=family))} cases"


@contextlib.contextmanager
def interrupts_raise() -> Iterator[None]:
    """Within: the first SIGINT or SIGTERM raises KeyboardInterrupt; a second one ends the process with 130."""
    received = []

    def on_signal(signum, frame) -> None:
        """Raise KeyboardInterrupt the first time; exit at once after that (the JSON on disk is always whole)."""
        received.append(signum)
        if len(received) > 1:
            os._exit(EXIT_INTERRUPTED)
        raise KeyboardInterrupt(signal.Signals(signum).name)

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the bench command; return the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in READERS:
        return importlib.import_module(READERS[argv[0]]).main(argv[1:])
    args = build_parser().parse_args(argv)
    failures = discover()
    for failure in failures:
        print(f"bench: case module {failure['module']} failed to import: {failure['error']}", file=sys.stderr)
    selected, why = select(args.family, args.case, args.all)
    if not selected:
        print(why, file=sys.stderr)
        return EXIT_NOTHING_RUN
    if args.list:
        for case in selected:
            launcher = f"\ttorchrun x{case.world}" if case.launcher == "torchrun" else ""
            print(f"{case.key}\t{'default' if case.default else '--all'}{launcher}\t{case.description}")
        return EXIT_FAILED if failures else EXIT_OK

    in_process = [case for case in selected if case.launcher != "torchrun"]
    if in_process and not torch.cuda.is_available():
        print(f"bench: needs a CUDA GPU (torch.cuda.is_available() is False); nothing was run of the "
              f"{len(selected)} selected cases; --list works without one (torchrun cases alone report "
              "why they are not available)", file=sys.stderr)
        return EXIT_NOTHING_RUN
    with interrupts_raise():
        return _run(selected, failures, args, ["python", "-m", "harness", "bench", *argv])


def _run(selected: list[BenchCase], failures: list[dict], args: argparse.Namespace, command: list[str]) -> int:
    """Run ``selected`` with live output and incremental results (torchrun cases after the others), then report."""
    from harness.bench.console import LiveConsole  # noqa: PLC0415 - runnable with -m: the package must not import it first
    from harness.bench.results import ResultsWriter  # noqa: PLC0415 - runnable with -m: the package must not import it first
    from harness.bench.runner import run_cases  # noqa: PLC0415 - runnable with -m: the package must not import it first
    from harness.bench.torchrun import run_spawned  # noqa: PLC0415 - runnable with -m: the package must not import it first

    started = time.monotonic()
    writer = ResultsWriter(args.out)
    interrupted = False
    in_process = [case for case in selected if case.launcher != "torchrun"]
    spawned = [case for case in selected if case.launcher == "torchrun"]
    settings = {"warmup": args.warmup, "reps": args.reps}
    merged: list[dict] = []  # the torchrun cases' document once it exists (an interrupt keeps what they measured)
    try:
        if in_process:
            with LiveConsole(len(in_process)) as live:
                run_cases(in_process, command=command, warmup=args.warmup, reps=args.reps, failed=failures,
                          listeners=(writer, live))
            failures = []
        document, unmerged = writer.document, []
        if spawned:
            document, unmerged = run_spawned(
                spawned, writer.document, command=command,
                settings=writer.document["settings"] if writer.document else settings,
                selected=[c.key for c in selected], failed=failures, say=lambda line: print(line, flush=True),
                on_document=merged.append)
    except KeyboardInterrupt:
        interrupted, document = True, writer.document or (merged[0] if merged else None)
    if document is None and not interrupted:
        return _nothing_measured(spawned, unmerged, args)
    if document is None:
        print(f"bench: INTERRUPTED before any case was measured (0 of {len(selected)}); nothing written",
              file=sys.stderr)
        return EXIT_INTERRUPTED
    if interrupted:
        finished = {f"{c['family']}/{c['name']}" for c in document["cases"]} | {f.get("case") for f in document["failed"]}
        document["status"] = "interrupted"
        document["not_run"] = [case.key for case in selected if case.key not in finished]
    document["wall_s"] = round(time.monotonic() - started, 1)
    return _finish(document, writer.out_dir, len(selected), interrupted, args.allow_unavailable,
                   args.thresholds_into)


def _finish(document: dict, out_dir: str, selected: int, interrupted: bool, allow_unavailable: bool = False,
            thresholds_into: str | None = None) -> int:
    """Write the final document, its summary and plots, print the summary and the footer; hand the document (not of
    an interrupted run) to each family's ``RECORD_THRESHOLDS``; return the exit status."""
    from harness.bench.report import write_report  # noqa: PLC0415 - runnable with -m: the package must not import it first
    from harness.bench.results import write_results  # noqa: PLC0415 - runnable with -m: the package must not import it first

    path = write_results(document, out_dir)
    written = write_report(document, out_dir)
    print(written["text"], end="")
    print(f"bench: results in {path}, summary in {written['summary']}"
          + "".join(f"\nbench: plot {p}" for p in written["plots"]))
    if not interrupted:
        for record in family_hooks("RECORD_THRESHOLDS").values():
            for line in record(document, path, thresholds_into):
                print(line)
    if written["plot_note"]:
        print(f"bench: no plots: {written['plot_note']}")
    measured = len(document["cases"])
    if interrupted:
        print(f"bench: INTERRUPTED ({measured} of {selected} run)", flush=True)
        return EXIT_INTERRUPTED
    failed = len(document["failed"])
    print(f"bench: {measured} of {selected} cases measured in {document['wall_s']:.0f} s, {failed} failed"
          + (f", {len(document['not_run'])} not reached (CUDA context lost)" if document.get("not_run") else ""),
          flush=True)
    missing = [item for item in document.get("not_available", []) if not item.get("optional")]
    for item in document.get("not_available", []):
        print(f"bench: not available: {item['case']}: {item['why']}" + (" (optional peer)" if item.get("optional") else ""))
    if failed or document.get("not_run"):
        return EXIT_FAILED
    return EXIT_FAILED if missing and not allow_unavailable else EXIT_OK


def _nothing_measured(spawned: list[BenchCase], failed: list[dict], args: argparse.Namespace) -> int:
    """The end of a run whose torchrun cases measured nothing (told as they ran): 1 a failure, else 2 (0 if allowed)."""
    print(f"bench: nothing measured of {len(spawned)} torchrun case(s), {len(failed)} failure(s); nothing written"
          + ("" if args.allow_unavailable or failed else " (--allow-unavailable: exit 0 when nothing failed)"),
          file=sys.stderr, flush=True)
    if failed:
        return EXIT_FAILED
    return EXIT_OK if args.allow_unavailable else EXIT_NOTHING_RUN


__all__ = ["BenchCase", "BenchContext", "Prepared", "REGISTRY", "bench_case", "discover", "main", "select"]
