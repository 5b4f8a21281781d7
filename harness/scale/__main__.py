"""``rankcheck scale run|summary`` (also ``python -m harness.scale``): the nightly shape at several worlds on one host, and its table and plot.

``run --out DIR --worlds 2 8 32 72``: each world in the order given (see
``harness.scale`` for what is run and measured), under one ``--budget`` for
the whole command; ``scale.json`` is rewritten after every world, so a run
cut short keeps the worlds it finished, and ``scale.md``/``scale.png`` are
written at the end. Exit 0 when every world ran to its end and held what
the nightly must show (the planted hang named in its group within the
per-launch deadline plus 10 s and the merged report's first diagnosis
being that group's, every other group passing, no process left), 1 when a
world missed any of it (each miss is printed and kept in ``checks``), 2 on
bad arguments. ``summary IN.json... --out DIR`` redraws the table and the
plot from result files, e.g. the worlds measured here and those measured on
the GPU machine.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import sys
import tempfile
import time
from pathlib import Path

from harness.families.registry import ADAPTERS
from harness.scale.measure import world_costs
from harness.scale.nightly import run_world, shape_of
from harness.scale.summary import load_results, write_summary
from harness.launch.supervision import install_interrupt_handlers
from harness.wire.command_line import HelpFormatter, command_parser
from harness.wire.run_dir import run_dir_lock

# A world is not started with less time left than this (its two jobs' start-up alone take longer).
MIN_WORLD_S = 60.0
# Kept back from a world's agents for the merge and the measurement.
AFTER_WORLD_S = 10.0
# The bad group must be named within the per-launch deadline plus this many seconds of its hang.
NAMED_WITHIN_S = 10.0


def default_scenarios() -> list[str]:
    """Each family's nightly scenario (its adapter's ``nightly_scenario``), the one the hang is planted in first."""
    chosen = [a for a in ADAPTERS.values() if a.nightly_scenario]
    return [a.nightly_scenario for a in sorted(chosen, key=lambda a: not a.nightly_hang)]


def checks(world: dict, shape, deadline_s: float) -> list[str]:
    """What the world's run missed of what the nightly must show, in words ([] when it held everything)."""
    missed = []
    if world["agents"]["timed_out"]:
        missed.append("the budget ran out before every agent had exited")
    left = world["processes_left"] + world["agents"]["leftovers"]
    if left:
        missed.append(f"processes left after the run: {left}")
    verdicts = world["verdicts"]
    if "error" in verdicts:
        return missed + [verdicts["error"]]
    # a world of one TP group reports it as group None (the group spans the world)
    bad = [] if shape.hang_group is None else [shape.hang_group if shape.groups > 1 else None]
    if verdicts["groups_failing"] != bad:
        missed.append(f"failing groups {verdicts['groups_failing']}, expected {bad}")
    if verdicts["groups_all_pass"] != shape.groups - len(bad):
        missed.append(f"{verdicts['groups_all_pass']} of {shape.groups - len(bad)} healthy groups pass")
    if bad:
        top = verdicts.get("top_diagnosis") or {}
        if top.get("group") != bad[0]:
            missed.append(f"the merged report's first diagnosis is {top or 'absent'}, not group {bad[0]}'s")
        named = [j["hang_named_after_s"] for j in world["jobs"] if "hang_named_after_s" in j]
        if not named or named[0] > deadline_s + NAMED_WITHIN_S:
            missed.append(f"the bad group was named {named[0] if named else 'never'} s after its hang, "
                          f"more than {deadline_s + NAMED_WITHIN_S:g} s")
    return missed


def cmd_run(args: argparse.Namespace) -> int:
    """Run every requested world within the budget; write the results, the table and the plot; return the exit code."""
    started = time.monotonic()
    out = Path(args.out)
    work = Path(args.work) if args.work else out / "raw"
    cache = Path(tempfile.mkdtemp(prefix="rankcheck-scale-cache-"))  # the references, outside what is kept
    shapes = [shape_of(w, args.per_node, args.tp, None if args.hang_group == "none" else int(args.hang_group))
              for w in args.worlds]
    doc = {"command": " ".join([Path(sys.executable).name, "-m", "harness.scale", *sys.argv[1:]]),
           "host": {"host": socket.gethostname(), "cores": os.cpu_count()}, "worlds": []}
    failed = False
    try:
        with run_dir_lock(work):  # two scale runs on one work directory would read each other's node runs
            failed = run_worlds(args, shapes, doc, out, work, cache, started)
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    out.mkdir(parents=True, exist_ok=True)
    (out / "scale.json").write_text(json.dumps(doc, indent=1, default=str), encoding="utf-8")
    for line in write_summary([doc], out):
        print(line)
    return 1 if failed else 0


def run_worlds(args: argparse.Namespace, shapes: list, doc: dict, out: Path, work: Path, cache: Path,
               started: float) -> bool:
    """Run each world in turn within what is left of the budget, adding its costs to ``doc``; True when one missed a check."""
    failed = False
    for shape in shapes:
        left = args.budget - (time.monotonic() - started)
        if left < MIN_WORLD_S:
            doc["worlds"].append({"world": shape.world, "skipped": f"{left:.0f} s of the budget left"})
            print(f"world {shape.world}: skipped ({left:.0f} s of the budget left)", flush=True)
            failed = True
            continue
        print(f"world {shape.world}: {shape.nodes} agent(s) x {shape.per_node}, tp {shape.tp}, hang in group "
              f"{shape.hang_group}; {left:.0f} s left", flush=True)
        record = run_world(shape, out=out / f"w{shape.world}", work=work / f"w{shape.world}",
                           scenarios=args.scenario, deadline_s=args.deadline, budget_s=left - AFTER_WORLD_S,
                           cache_dir=cache)
        world = world_costs(record) | {"wall_s": record["agents"]["wall_s"]}
        world["checks"] = checks(world, shape, args.deadline)
        failed = failed or bool(world["checks"])
        doc["worlds"].append(world)
        (out / "scale.json").write_text(json.dumps(doc, indent=1, default=str), encoding="utf-8")
        print(f"world {shape.world}: {world['wall_s']:.0f} s; " +
              ("; ".join(world["checks"]) if world["checks"] else "every check held"), flush=True)
    return failed


def cmd_summary(args: argparse.Namespace) -> int:
    """Redraw the table and the plot from result files."""
    for line in write_summary(load_results(args.results), Path(args.out)):
        print(line)
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The ``run`` and ``summary`` subcommands."""
    parser = command_parser("scale", description="The nightly job's shape at several worlds on one host (run), and its table and plot (summary).")
    sub = parser.add_subparsers(dest="command", required=True, metavar="ACTION")
    p = sub.add_parser("run", help="run the nightly shape at several worlds and measure it", formatter_class=HelpFormatter,
                       description="Run the nightly shape at several worlds on this host and measure it.")
    p.add_argument("--out", required=True, help="where scale.json, scale.md, scale.png and the merged reports go")
    p.add_argument("--work", help="where the run directories go (default <out>/raw)")
    p.add_argument("--worlds", nargs="+", type=int, default=[2, 8, 32, 72], help="world sizes to run")
    p.add_argument("--per-node", type=int, default=4, help="processes per agent (a simulated node)")
    p.add_argument("--tp", type=int, default=4, help="TP size where it divides an agent's processes")
    p.add_argument("--hang-group", default="-1", help="the TP group the hang is planted in (-1: the middle one; none)")
    p.add_argument("--deadline", type=float, default=5.0, help="per-launch deadline in seconds")
    p.add_argument("--budget", type=float, default=230.0, help="seconds the whole command may take")
    p.add_argument("--scenario", nargs="+", default=default_scenarios(),
                   help="scenarios to run (the hang is planted in the first)")
    p = sub.add_parser("summary", help="the table and plot from result files", formatter_class=HelpFormatter,
                       description="The table and plot from one or more result files.")
    p.add_argument("results", nargs="+", help="scale.json files")
    p.add_argument("--out", required=True, help="where scale.md and scale.png go")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Parse the arguments and run the subcommand (exit 2 on a bad argument)."""
    args = build_parser().parse_args(argv)
    try:
        return cmd_run(args) if args.command == "run" else cmd_summary(args)
    except ValueError as exc:
        print(f"rankcheck scale: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    install_interrupt_handlers()
    sys.exit(main())
