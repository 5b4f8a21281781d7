"""The command line: ``python -m harness`` / ``rankcheck``.

Subcommands:

- ``list``: every scenario with its cases (family, name, size, worlds,
  launches, expected outcome).
- ``validate``: run scenarios through a launcher and report (``harness.validate``).
- ``replay SCENARIO``: one scenario, verbose: each rank's progress and the
  diagnostic records side by side (``harness.replay``); ``replay --bundle
  DIR``: a world recorded by ``rankcheck.recording``, replayed offline
  (``harness.recording.replay``).
- ``flight DIR``: the kernels' flight recorders left under ``DIR`` by a
  job's ranks, one line per instance: consistent, or the first launch where
  a rank's record differs or is missing (``harness.reports.flight_rings``;
  exit 0 consistent, 1 a divergence, 2 no or unreadable rings).
- ``golden [--regenerate]``: check (or record, on purpose) the stored golden
  bits of every cpu scenario through a cpu validation run;
  ``golden --measure-rcp [T...]`` measures the GPU's reciprocal table
  (``harness.calibration.rcp_table``); ``golden --probe`` measures all of a GPU type's
  arithmetic facts (``harness.calibration.probe``); ``golden --arch sm_XY`` validates
  with that architecture's facts where no GPU is present.
- ``record``, ``bench`` (with ``bench report`` and ``bench breakdown``),
  ``compile``, ``fuzz``, ``scale``: dispatched to ``harness.recording.capture``,
  ``harness.bench``, ``harness.compile_gate``, ``harness.fuzz`` (random
  valid scenarios, the first failure shrunk to a minimal file) and
  ``harness.scale`` (imported only when used, so a missing module is a clear
  message, not an import error at start).

One program, ``rankcheck`` (``python -m harness`` is the same parser): every
parser is made by ``harness.wire.command_line.command_parser``, so usage
lines name the command as typed and every option's help shows its default;
``--version`` prints the installed version; ``docs/cli.md`` is rendered from
the parsers (``harness.cli_docs``) and a test keeps it current.

Bad arguments are reported by argparse with the subcommand's usage (exit 2), or as one line naming the
argument (exit 2) before anything runs, and so is a file or directory the
command cannot read or write (named, never a traceback); a scenario file that
is refused is named on stderr while ``list`` and ``validate`` go on with the
others, and their exit code is then 2 where it would have been 0; a number that does not parse says
what was expected in words (``argument --world: expected a whole number >=
1, got 'x'``). The exit codes of ``validate`` and ``replay`` are their
report's verdict (``harness.reports.report.Report.verdict``: 0 ok, 1 failed, 2
nothing run or bad arguments, 3 nothing available, 130 interrupted).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from typing import Sequence

from rich.console import Console
from rich.table import Table

from golden.arch import PROBE_COMMAND, facts_path, normalize_arch, shown
from harness.calibration.rcp_table import measure
from harness.families.arch_facts import ARCH_ENV
from harness.families.catalog import DEFAULT_PER_LAUNCH_S, discover_each, select
from harness.launch.load_scale import MAX_FACTOR, STARTUP_S
from harness.launch.supervision import install_interrupt_handlers
from harness.launch.torchrun_options import Rendezvous
from harness.reports.flight_rings import run_flight
from harness.reports.merge import run_merge
from harness.wire.case_result import EXIT_INTERRUPTED, EXIT_NOTHING_RUN
from harness.wire.command_line import (HelpFormatter, command_parser, finite_float, nonnegative_int, positive_int,
                                       positive_seconds, version)

# Commands handed to another module's ``main(argv)`` (imported only when used): command -> (module, help).
DISPATCHED = {
    "record": ("harness.recording.capture", "record a scenario's ranks as rankcheck.recording records a job, or replay a recording"),
    "bench": ("harness.bench", "benchmark the kernels on this GPU; `bench report` and `bench breakdown` read results"),
    "compile": ("harness.compile_gate", "compile gate: build every kernel variant for an architecture, no GPU needed"),
    "fuzz": ("harness.fuzz", "random valid scenarios through validation; the first failure shrunk to a minimal file"),
    "scale": ("harness.scale.__main__", "the nightly job's shape at several worlds on one host, measured"),
}
# Bad arguments run nothing: argparse's code, the same as a selection that plans no case.
EXIT_BAD_ARGUMENTS = EXIT_NOTHING_RUN


def _add_torchrun(p: argparse.ArgumentParser) -> None:
    """The torchrun pass-through options (several agents / nodes)."""
    g = p.add_argument_group("torchrun pass-through (multi-node)")
    g.add_argument("--nnodes", type=positive_int, default=1, help="agents (nodes) of the job")
    g.add_argument("--node-rank", type=nonnegative_int, default=0, help="this agent's node rank")
    g.add_argument("--rdzv-backend", default=None, help="torchrun's rendezvous backend (default: c10d with --nnodes > 1)")
    g.add_argument("--rdzv-endpoint", default=None, help="host:port of the c10d rendezvous (required with --nnodes > 1; default: none)")
    g.add_argument("--rdzv-id", default=None, help="the job's rendezvous id, the same on every node (default: none)")
    g.add_argument("--nproc-per-node", type=positive_int, default=None,
                   help="processes per agent (default: the world divided by --nnodes)")


def _add_allow_unavailable(p: argparse.ArgumentParser) -> None:
    """The ``--allow-unavailable`` flag: a run where every case is not available exits 0 instead of 3."""
    p.add_argument("--allow-unavailable", action="store_true",
                   help="exit 0, not 3, when every case is not available here (e.g. kernel cases without a GPU)")


def _add_selection(p: argparse.ArgumentParser) -> None:
    """pytest's selection options for ``validate``: -k, --lf, -x, --collect-only (harness.validate)."""
    p.add_argument("-k", dest="keyword", metavar="EXPR",
                   help="only the cases whose words (family, name, file, scenario root, world=N, launcher, case id) match this "
                        "pytest-style expression of substrings with and/or/not, e.g. 'nan and not fused' (default: every case)")
    p.add_argument("--lf", "--last-failed", dest="last_failed", action="store_true",
                   help="only the cases that failed in the last run's JSON report (the newest under runs/; every "
                        "case when it has no failure)")
    p.add_argument("--last-report", metavar="PATH", help="the JSON report --lf reads (default: the newest under runs/)")
    p.add_argument("-x", "--exitfirst", action="store_true",
                   help="start no new job after the first failing result; the cases not run are named, exit 1")
    p.add_argument("--collect-only", action="store_true",
                   help="print the selected case ids and run nothing (exit 0; 2 when nothing is selected)")


def build_parser() -> argparse.ArgumentParser:
    """The argparse parser of every subcommand."""
    parser = command_parser(description="Bit-exact distributed validation of decode kernels.",
                            epilog="`python -m harness` is the same program. Each command's options: "
                                   "`rankcheck COMMAND --help`; all of them: docs/cli.md.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add in (_add_list, _add_validate, _add_replay, _add_flight, _add_golden, _add_merge_reports):
        add(sub)
    for name, (_, words) in DISPATCHED.items():
        sub.add_parser(name, help=words, add_help=False)
    return parser


def _add_list(sub) -> None:
    """The ``list`` subcommand."""
    p = sub.add_parser("list", help="scenarios and their cases", formatter_class=HelpFormatter,
                       description="Every scenario with its cases: family, name, size, worlds, launches, expected outcome.")
    p.add_argument("--family", help="only this family's scenarios (default: every family)")
    p.add_argument("--size", choices=("cpu", "gpu", "all"), default="all", help="only scenarios of this size class")
    p.add_argument("--scenario-root", help=argparse.SUPPRESS)


def _add_validate(sub) -> None:
    """The ``validate`` subcommand."""
    p = sub.add_parser("validate", help="run scenarios through a launcher and report", formatter_class=HelpFormatter,
                       description="Run scenarios through a launcher; a live table, JUnit XML and JSON report, "
                                   "and an exit code that is the verdict (0 ok, 1 failed, 2 nothing run, "
                                   "3 nothing available, 130 interrupted).")
    p.add_argument("--launcher", choices=("auto", "torchrun", "virtual", "cpu"), default="auto",
                   help="how ranks start; auto: torchrun on several GPUs, virtual on one, cpu without")
    p.add_argument("--family", help="only this family's scenarios (default: every family)")
    p.add_argument("--scenario", nargs="+", metavar="NAME",
                   help="name, family/name or a shell pattern of either (markov_*/nan*) (default: every scenario)")
    p.add_argument("--world", nargs="+", type=positive_int, metavar="N",
                   help="world sizes (default: each scenario's own worlds)")
    _add_selection(p)
    p.add_argument("--size", choices=("cpu", "gpu", "all"), default=None,
                   help="size class (default: cpu without a GPU, all with one)")
    p.add_argument("--tp", type=positive_int, help="TP group size when smaller than the world (default: one group, the world)")
    p.add_argument("--junit", metavar="PATH", help="JUnit XML report (default: <run dir>/report.xml)")
    p.add_argument("--json", metavar="PATH", help="JSON report (default: <run dir>/report.json)")
    p.add_argument("--run-dir", metavar="DIR",
                   help="where logs, stacks and reports go; a directory another run holds is refused "
                        "(default: a new runs/<UTC time>-<host>-<pid>-<random>/)")
    p.add_argument("--deadline", type=positive_seconds, metavar="S",
                   help="per-launch deadline in seconds (a scenario's deadline_s wins; default: "
                        f"{DEFAULT_PER_LAUNCH_S:g} times the load per core at the start, as --startup's)")
    p.add_argument("--startup", type=positive_seconds, metavar="S",
                   help="startup allowance of a job in seconds (interpreters, imports, rendezvous; default: "
                        f"{STARTUP_S:g} times the one-minute load per core at the start, between x1 and x{MAX_FACTOR:g})")
    p.add_argument("--impl", choices=("golden", "kernel"),
                   help="override the launcher's implementation (default: the launcher's: golden on cpu, else kernel)")
    p.add_argument("--no-store", action="store_true", help="skip the stored-golden-bits check")
    p.add_argument("--no-cache", action="store_true",
                   help="bypass the persistent reference and kernel cache ($RANKCHECK_CACHE_DIR, default "
                        "~/.cache/rankcheck): references go to the run directory, kernels compile afresh")
    p.add_argument("--jobs", type=positive_int, metavar="N",
                   help="job units run at once (default: one per three cores, at most six, while references are "
                        "computed, else one per two cores, two to eight; one with several nodes or --tp)")
    p.add_argument("--no-standby", action="store_true",
                   help="virtual jobs start their processes when due (default: two spares per lane start up ahead)")
    p.add_argument("--ref-workers", type=nonnegative_int, metavar="N",
                   help="processes precomputing gpu-size references (default: one per two cores; 0: off)")
    p.add_argument("--inject", nargs="+", default=[], metavar="SCENARIO:KIND:key=value,...",
                   help="plant a fault in one scenario for this run, e.g. "
                        "FAMILY/SCENARIO:hang:rank=1,launch=1,group=5 (group: that TP group only; default: none)")
    _add_allow_unavailable(p)
    p.add_argument("--scenario-root", help=argparse.SUPPRESS)
    _add_torchrun(p)


def _add_replay(sub) -> None:
    """The ``replay`` subcommand."""
    p = sub.add_parser("replay", help="one scenario, verbose per-rank diagnostics; or a recorded world (--bundle)",
                       formatter_class=HelpFormatter,
                       description="One scenario, verbose: each rank's progress and the diagnostic records side "
                                   "by side; or a world recorded by rankcheck.recording (--bundle), offline.")
    p.add_argument("scenario", nargs="?", help="name or family/name (or --bundle)")
    p.add_argument("--bundle", metavar="DIR", help="replay the world recorded here (rankcheck.recording) instead (default: none)")
    p.add_argument("--world", type=positive_int, help="the world size (default: the scenario's smallest)")
    p.add_argument("--launcher", choices=("auto", "torchrun", "virtual", "cpu"), default="auto",
                   help="how ranks start; auto: torchrun on several GPUs, virtual on one, cpu without")
    p.add_argument("--inject", nargs="+", default=[], metavar="KIND:key=value,...",
                   help="extra injections, e.g. hang:rank=1,launch=2 (group=G: that TP group only; default: none)")
    p.add_argument("--run-dir", metavar="DIR", help="where logs, stacks and reports go (default: runs/<timestamp>/)")
    p.add_argument("--deadline", type=positive_seconds, metavar="S",
                   help=f"per-launch deadline in seconds (default: the scenario's deadline_s, else {DEFAULT_PER_LAUNCH_S:g})")
    p.add_argument("--impl", choices=("golden", "kernel"),
                   help="override the launcher's implementation (default: the launcher's: golden on cpu, else kernel)")
    _add_allow_unavailable(p)
    p.add_argument("--scenario-root", help=argparse.SUPPRESS)


def _add_flight(sub) -> None:
    """The ``flight`` subcommand."""
    p = sub.add_parser("flight", help="read every rank's flight-recorder rings under DIR: the first launch a rank "
                                      "missed or made differently", formatter_class=HelpFormatter,
                       description="Read the rings the kernels' flight recorders left under DIR (every instance of "
                                   "AllReduceMHC, ShardedMarkovSampler and MarkovKernels, CUDA-graph replays "
                                   "included) and print one line per instance: consistent, or the rank, launch, "
                                   "kernel and what differed. Exit 0 consistent, 1 a divergence named, 2 no ring "
                                   "or an unreadable one (named).")
    p.add_argument("directory", metavar="DIR", help="the rings' directory (the instances' flight_dir or "
                                                    "$RANKCHECK_FLIGHT_DIR), searched recursively")
    p.add_argument("--json", metavar="PATH", help="also write the findings here as JSON (default: none)")


def _add_golden(sub) -> None:
    """The ``golden`` subcommand."""
    p = sub.add_parser("golden", help="check or regenerate the stored golden bits", formatter_class=HelpFormatter,
                       description="Check (or, with --regenerate, record on purpose) the stored golden bits of "
                                   "every cpu scenario through a cpu validation run; or measure a GPU's arithmetic.")
    p.add_argument("--regenerate", action="store_true", help="recompute and store (on purpose)")
    p.add_argument("--measure-rcp", nargs="*", type=finite_float, default=None, metavar="T",
                   help="measure the GPU's div.full.f32 reciprocal bits of these temperatures (default: every "
                        "temperature of the scenario files and of the table) into golden/data/rcp_f32_<GPU arch>.json")
    p.add_argument("--probe", action="store_true",
                   help="measure this GPU type's arithmetic facts into golden/data/arch/<arch>.json (with "
                        "--regenerate: replace stored facts that differ)")
    p.add_argument("--arch", metavar="sm_XY",
                   help="without a GPU: whose arithmetic facts the golden uses (default sm_90, the stored bits')")
    p.add_argument("--run-dir", metavar="DIR", help="where logs and reports go (default: runs/<timestamp>/)")


def _add_merge_reports(sub) -> None:
    """The ``merge-reports`` subcommand."""
    p = sub.add_parser("merge-reports", help="one JUnit and one JSON from the per-node reports of a multi-node job",
                       formatter_class=HelpFormatter,
                       description="One JUnit and one JSON report for a job whose nodes each wrote their own; "
                                   "the exit code follows validate's rule.")
    p.add_argument("inputs", nargs="+", metavar="IN", help="per-node JSON reports: files, glob patterns or directories")
    p.add_argument("--junit", metavar="PATH", help="where the merged JUnit XML goes (default: none; --junit or --json)")
    p.add_argument("--json", metavar="PATH", help="where the merged JSON goes (default: none; --junit or --json)")
    _add_allow_unavailable(p)


def parse(parser: argparse.ArgumentParser, argv: Sequence[str]) -> argparse.Namespace:
    """``argv`` parsed; an argument the subcommand does not know is reported with the subcommand's usage (exit 2)."""
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        subparsers.choices[args.command].error(f"unrecognized arguments: {' '.join(unknown)}")
    return args


def cmd_list(args: argparse.Namespace) -> int:
    """Print every scenario with its cases."""
    found, bad_files = discover_each(args.scenario_root)
    cases = select(found, family=args.family, size=args.size)
    table = Table(title=f"{len(cases)} scenarios")
    for col in ("family", "name", "size", "worlds", "launches", "expected", "description"):
        table.add_column(col)
    for c in cases:
        table.add_row(c.family, c.name, c.size, ",".join(map(str, c.worlds)), str(c.launches), c.expected_text,
                      c.description)
    Console(width=200 if not sys.stdout.isatty() else None).print(table)
    for message in bad_files:
        print(f"rankcheck list: scenario file refused: {message}", file=sys.stderr)
    return EXIT_BAD_ARGUMENTS if bad_files else 0


def cmd_validate(args: argparse.Namespace) -> int:
    """Run ``validate``."""
    from harness.validate import ValidateRequest, run_validate  # noqa: PLC0415 - imports torch: --help and list start without it

    req = ValidateRequest(launcher=args.launcher, family=args.family, scenarios=args.scenario, worlds=args.world,
                          size=args.size, tp=args.tp, junit=args.junit, json=args.json, run_dir=args.run_dir,
                          deadline=args.deadline, startup=args.startup, scenario_root=args.scenario_root,
                          impl=args.impl, store=None if args.no_store else "check",
                          rendezvous=Rendezvous(nnodes=args.nnodes, node_rank=args.node_rank, backend=args.rdzv_backend,
                                                endpoint=args.rdzv_endpoint, id=args.rdzv_id,
                                                nproc_per_node=args.nproc_per_node),
                          allow_unavailable=args.allow_unavailable, cache=not args.no_cache, lanes=args.jobs,
                          ref_workers=args.ref_workers, inject=args.inject, standby=not args.no_standby,
                          keyword=args.keyword, last_failed=args.last_failed, last_report=args.last_report,
                          exitfirst=args.exitfirst, collect_only=args.collect_only)
    if args.last_report and not args.last_failed:
        raise ValueError("--last-report PATH names the report --lf reads: give --lf with it")
    return run_validate(req)


def cmd_replay(args: argparse.Namespace) -> int:
    """Run ``replay`` of a scenario, or of a recorded world with ``--bundle``."""
    if (args.scenario is None) == (args.bundle is None):
        print("replay: give a scenario or --bundle DIR (exactly one)", file=sys.stderr)
        return EXIT_NOTHING_RUN
    if args.bundle is not None:
        from harness.recording.replay import run_bundle_replay  # noqa: PLC0415 - imports torch: --help and list start without it

        return run_bundle_replay(args.bundle, impl=args.impl, launcher=args.launcher, deadline=args.deadline,
                                 run_dir=args.run_dir)
    from harness.replay import run_replay  # noqa: PLC0415 - imports torch: --help and list start without it

    return run_replay(args.scenario, world=args.world, launcher=args.launcher, inject=args.inject,
                      run_dir=args.run_dir, deadline=args.deadline, impl=args.impl, scenario_root=args.scenario_root,
                      allow_unavailable=args.allow_unavailable)


def cmd_flight(args: argparse.Namespace) -> int:
    """Run ``flight``: the findings of the rings under the directory."""
    return run_flight(args.directory, json_path=args.json)


def checked_arch(arch: str) -> str:
    """``arch`` normalized (``sm_100a`` -> ``sm_100``); ValueError naming the missing facts file when there is none."""
    name = normalize_arch(arch)
    path = facts_path(name)
    if not path.is_file():
        known = ", ".join(sorted(p.stem for p in path.parent.glob("*.json"))) or "none"
        raise ValueError(f"--arch {arch}: no arithmetic facts for {name}: {shown(path)} does not exist (facts exist "
                         f"for: {known}; measure {name}'s on one GPU of that type: {PROBE_COMMAND})")
    return name


def cmd_golden(args: argparse.Namespace) -> int:
    """Check the stored golden bits of every cpu scenario (or record them with --regenerate)."""
    from harness.validate import ValidateRequest, run_validate  # noqa: PLC0415 - imports torch: --help and list start without it

    if args.probe:
        from harness.calibration.probe import run_probe  # noqa: PLC0415 - imports torch: --help and list start without it

        if args.measure_rcp is not None or args.arch:
            raise ValueError("--probe measures the GPU present: no --measure-rcp or --arch with it")
        return run_probe(args.run_dir, replace=args.regenerate)
    if args.measure_rcp is not None:
        if args.regenerate:
            raise ValueError("--measure-rcp and --regenerate: run one at a time")
        return measure(args.measure_rcp or None)
    if args.arch:
        os.environ[ARCH_ENV] = checked_arch(args.arch)  # read by every rank (they inherit the environment)
    return run_validate(ValidateRequest(launcher="cpu", size="cpu", run_dir=args.run_dir,
                                        store="record" if args.regenerate else "check"))


def cmd_merge_reports(args: argparse.Namespace) -> int:
    """Merge per-node reports into one (``harness.reports.merge``)."""
    if not (args.junit or args.json):
        raise ValueError("--junit or --json: say where the merged report goes")
    return run_merge(args.inputs, junit=args.junit, json_path=args.json, allow_unavailable=args.allow_unavailable)


def dispatch(command: str, argv: Sequence[str]) -> int:
    """Hand ``argv`` to another package's ``main``; a missing module is a clear message (exit 2)."""
    module_name = DISPATCHED[command][0]
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        print(f"rankcheck {command}: {module_name} is not available ({exc})", file=sys.stderr)
        return EXIT_BAD_ARGUMENTS
    main_fn = getattr(module, "main", None)
    if not callable(main_fn):
        print(f"rankcheck {command}: {module_name} has no main(argv)", file=sys.stderr)
        return EXIT_BAD_ARGUMENTS
    return int(main_fn(list(argv)) or 0)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m harness`` and ``rankcheck``."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in DISPATCHED:
        return dispatch(argv[0], argv[1:])
    args = parse(build_parser(), argv)
    handlers = {"list": cmd_list, "validate": cmd_validate, "replay": cmd_replay, "flight": cmd_flight,
                "golden": cmd_golden,
                "merge-reports": cmd_merge_reports}
    try:
        return handlers[args.command](args)
    except ValueError as exc:
        print(f"rankcheck {args.command}: {exc}", file=sys.stderr)
        return EXIT_BAD_ARGUMENTS
    except OSError as exc:  # a file or directory the command needs (disk full, read-only, gone): named, no traceback
        where = f"{exc.filename}: " if exc.filename else ""
        print(f"rankcheck {args.command}: {where}{exc.strerror or exc}", file=sys.stderr)
        return EXIT_BAD_ARGUMENTS
    except KeyboardInterrupt:
        print(f"rankcheck {args.command}: interrupted; results so far are in the run directory", file=sys.stderr)
        return EXIT_INTERRUPTED


def entry() -> int:
    """The ``rankcheck`` console script: the interrupt handlers first (as ``python -m harness``), then ``main``."""
    install_interrupt_handlers()
    return main()
