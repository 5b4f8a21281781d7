"""The command line: ``python -m harness`` / ``rankcheck``.

Subcommands:

- ``list``: every scenario with its cases (family, name, size, worlds,
  launches, expected outcome).
- ``validate``: run scenarios through a launcher and report (``harness.validate``).
- ``replay SCENARIO``: one scenario, verbose: each rank's progress and the
  diagnostic records side by side (``harness.replay``).
- ``golden [--regenerate]``: check (or record, on purpose) the stored golden
  bits of every cpu scenario through a cpu validation run;
  ``golden --measure-rcp [T...]`` measures the GPU's reciprocal table
  (``harness.rcp_table``).
- ``record``, ``bench``, ``compile``: dispatched to ``harness.record``,
  ``harness.bench`` and ``harness.compile_gate`` (imported only when used,
  so a missing module is a clear message, not an import error at start).

Bad arguments are reported by argparse (exit 2) or as one line naming the
argument (exit 2) before anything runs.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from typing import Sequence

DISPATCHED = {"record": "harness.record", "bench": "harness.bench", "compile": "harness.compile_gate"}


def _positive_float(text: str) -> float:
    """argparse type: a float > 0."""
    value = float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a number > 0, got {text}")
    return value


def _positive_int(text: str) -> int:
    """argparse type: an int >= 1."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text}")
    return value


def _add_torchrun(p: argparse.ArgumentParser) -> None:
    """The torchrun pass-through options (several agents / nodes)."""
    g = p.add_argument_group("torchrun pass-through (multi-node)")
    g.add_argument("--nnodes", type=_positive_int, default=1)
    g.add_argument("--node-rank", type=int, default=0)
    g.add_argument("--rdzv-backend", default=None)
    g.add_argument("--rdzv-endpoint", default=None, help="host:port of the c10d rendezvous")
    g.add_argument("--rdzv-id", default=None)
    g.add_argument("--nproc-per-node", type=_positive_int, default=None)


def build_parser() -> argparse.ArgumentParser:
    """The argparse parser of every subcommand."""
    parser = argparse.ArgumentParser(prog="rankcheck", description="Bit-exact distributed validation of decode kernels.")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("list", help="scenarios and their cases")
    p.add_argument("--family")
    p.add_argument("--size", choices=("cpu", "gpu", "all"), default="all")
    p.add_argument("--scenario-root", help=argparse.SUPPRESS)

    p = sub.add_parser("validate", help="run scenarios through a launcher and report")
    p.add_argument("--launcher", choices=("auto", "torchrun", "virtual", "cpu"), default="auto")
    p.add_argument("--family")
    p.add_argument("--scenario", nargs="+", metavar="NAME", help="name or family/name")
    p.add_argument("--world", nargs="+", type=_positive_int, metavar="N")
    p.add_argument("--size", choices=("cpu", "gpu", "all"), default=None,
                   help="size class (default: cpu without a GPU, all with one)")
    p.add_argument("--tp", type=_positive_int, help="TP group size when smaller than the world")
    p.add_argument("--junit", metavar="PATH")
    p.add_argument("--json", metavar="PATH")
    p.add_argument("--run-dir", metavar="DIR", help="default runs/<timestamp>/")
    p.add_argument("--deadline", type=_positive_float, metavar="S",
                   help="per-launch deadline in seconds (a scenario's deadline_s wins)")
    p.add_argument("--startup", type=_positive_float, default=90.0, metavar="S",
                   help="startup allowance of a job in seconds (interpreters, imports, rendezvous)")
    p.add_argument("--impl", choices=("golden", "kernel"), help="override the launcher's implementation")
    p.add_argument("--no-store", action="store_true", help="skip the stored-golden-bits check")
    p.add_argument("--scenario-root", help=argparse.SUPPRESS)
    _add_torchrun(p)

    p = sub.add_parser("replay", help="one scenario, verbose per-rank diagnostics")
    p.add_argument("scenario", help="name or family/name")
    p.add_argument("--world", type=_positive_int)
    p.add_argument("--launcher", choices=("auto", "torchrun", "virtual", "cpu"), default="auto")
    p.add_argument("--inject", nargs="+", default=[], metavar="KIND:key=value,...",
                   help="extra injections, e.g. hang:rank=1,launch=2")
    p.add_argument("--run-dir", metavar="DIR")
    p.add_argument("--deadline", type=_positive_float, metavar="S")
    p.add_argument("--impl", choices=("golden", "kernel"))
    p.add_argument("--scenario-root", help=argparse.SUPPRESS)

    p = sub.add_parser("golden", help="check or regenerate the stored golden bits")
    p.add_argument("--regenerate", action="store_true", help="recompute and store (on purpose)")
    p.add_argument("--measure-rcp", nargs="*", type=float, default=None, metavar="T",
                   help="measure the GPU's div.full.f32 reciprocal bits of these temperatures (default: every "
                        "temperature of the scenario files and of the table) into golden/data/rcp_f32_sm_90.json")
    p.add_argument("--run-dir", metavar="DIR")

    for name in DISPATCHED:
        sub.add_parser(name, help=f"see `rankcheck {name} --help`", add_help=False)
    return parser


def cmd_list(args: argparse.Namespace) -> int:
    """Print every scenario with its cases."""
    from rich.console import Console  # noqa: PLC0415
    from rich.table import Table  # noqa: PLC0415

    from harness.families.catalog import discover, select  # noqa: PLC0415

    cases = select(discover(args.scenario_root), family=args.family, size=args.size)
    table = Table(title=f"{len(cases)} scenarios")
    for col in ("family", "name", "size", "worlds", "launches", "expected", "description"):
        table.add_column(col)
    for c in cases:
        table.add_row(c.family, c.name, c.size, ",".join(map(str, c.worlds)), str(c.launches), c.expected_text,
                      c.description)
    Console(width=200 if not sys.stdout.isatty() else None).print(table)
    return 0


def cmd_validate(args: argparse.Namespace) -> int:
    """Run ``validate``."""
    from harness.launchers.jobs import Rendezvous  # noqa: PLC0415
    from harness.validate import ValidateRequest, run_validate  # noqa: PLC0415

    req = ValidateRequest(launcher=args.launcher, family=args.family, scenarios=args.scenario, worlds=args.world,
                          size=args.size, tp=args.tp, junit=args.junit, json=args.json, run_dir=args.run_dir,
                          deadline=args.deadline, startup=args.startup, scenario_root=args.scenario_root,
                          impl=args.impl, store=None if args.no_store else "check",
                          rendezvous=Rendezvous(nnodes=args.nnodes, node_rank=args.node_rank, backend=args.rdzv_backend,
                                                endpoint=args.rdzv_endpoint, id=args.rdzv_id,
                                                nproc_per_node=args.nproc_per_node))
    return run_validate(req)


def cmd_replay(args: argparse.Namespace) -> int:
    """Run ``replay``."""
    from harness.replay import run_replay  # noqa: PLC0415

    return run_replay(args.scenario, world=args.world, launcher=args.launcher, inject=args.inject,
                      run_dir=args.run_dir, deadline=args.deadline, impl=args.impl, scenario_root=args.scenario_root)


def cmd_golden(args: argparse.Namespace) -> int:
    """Check the stored golden bits of every cpu scenario (or record them with --regenerate)."""
    from harness.validate import ValidateRequest, run_validate  # noqa: PLC0415

    if args.measure_rcp is not None:
        from harness.rcp_table import measure  # noqa: PLC0415

        if args.regenerate:
            raise ValueError("--measure-rcp and --regenerate: run one at a time")
        return measure(args.measure_rcp or None)
    return run_validate(ValidateRequest(launcher="cpu", size="cpu", run_dir=args.run_dir,
                                        store="record" if args.regenerate else "check"))


def dispatch(command: str, argv: Sequence[str]) -> int:
    """Hand ``argv`` to another package's ``main``; a missing module is a clear message (exit 2)."""
    module_name = DISPATCHED[command]
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        print(f"rankcheck {command}: {module_name} is not available ({exc})", file=sys.stderr)
        return 2
    main_fn = getattr(module, "main", None)
    if not callable(main_fn):
        print(f"rankcheck {command}: {module_name} has no main(argv)", file=sys.stderr)
        return 2
    return int(main_fn(list(argv)) or 0)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m harness`` and ``rankcheck``."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in DISPATCHED:
        return dispatch(argv[0], argv[1:])
    args = build_parser().parse_args(argv)
    handlers = {"list": cmd_list, "validate": cmd_validate, "replay": cmd_replay, "golden": cmd_golden}
    try:
        return handlers[args.command](args)
    except ValueError as exc:
        print(f"rankcheck {args.command}: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"rankcheck {args.command}: interrupted; results so far are in the run directory", file=sys.stderr)
        return 130
