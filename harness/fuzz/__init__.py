"""``harness fuzz``: random valid scenarios against the golden, and the first failure shrunk to a minimal file.

``python -m harness fuzz --family F [--world N ...] [--launcher L] [--impl I]
--budget-s S --seed K`` draws scenarios inside the family's contract
(``harness.fuzz.draw``) from ``random.Random(K)``, so a seed always draws the
same cases, and runs them in batches through the ordinary validation
machinery (``harness.fuzz.run``): the kernel against the golden on a GPU,
and on the cpu launcher the sharded golden over real processes against the
unsharded one. When the budget is spent (between batches) it prints ``N
cases tried (seed K)`` and exits 0. On the first case that fails or errs it
shrinks the case (``harness.fuzz.shrink``: fewer calls, rows, steps, ranks,
a smaller vocabulary or hidden size, fewer injections), writes the minimal
scenario under ``<run>/fuzz/shrunk/<family>/``, prints its path and the
``harness replay`` command that reproduces it, and exits 1. Bad arguments
exit 2, an interrupt 130, and a system under test not available here (e.g.
``--impl kernel`` without a GPU) 3, as ``validate``.

Everything a run writes is under its run directory (``--run-dir``, default
``runs/<timestamp>``): each batch's scenario files, harness log and report
under ``fuzz/batch<i>/``, the shrink rounds' under ``fuzz/shrink<i>/``, the
failing case as drawn under ``fuzz/failing/``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Sequence

from golden.families import FAMILIES
from harness.families import substitution
from harness.fuzz.draw import DEFAULT_WORLDS
from harness.fuzz.run import BatchRunner, FuzzInterrupted, fuzz
from harness.launch.launchers import gpu_count, resolve
from harness.wire.case_files import default_run_dir
from harness.wire.run_dir import run_dir_lock
from harness.wire.case_result import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_NOTHING_RUN, EXIT_OK, EXIT_UNAVAILABLE
from harness.wire.command_line import command_parser, nonnegative_int, positive_int, positive_seconds

EXIT_BAD_ARGUMENTS = EXIT_NOTHING_RUN


def build_parser() -> argparse.ArgumentParser:
    """The argparse parser of ``harness fuzz``."""
    p = command_parser("fuzz", description=__doc__.splitlines()[0])
    p.add_argument("--family", required=True, choices=FAMILIES, help="the family whose scenarios are drawn")
    p.add_argument("--world", nargs="+", type=positive_int, metavar="N",
                   help="worlds to draw from (default 1 2 4)")
    p.add_argument("--launcher", choices=("auto", "torchrun", "virtual", "cpu"), default="auto",
                   help="how ranks start; auto: torchrun on several GPUs, virtual on one, cpu without")
    p.add_argument("--impl", choices=("golden", "kernel"),
                   help="override the launcher's implementation (default: the launcher's)")
    p.add_argument("--budget-s", type=positive_seconds, required=True,
                   metavar="S", help="stop drawing after S seconds (the running batch finishes)")
    p.add_argument("--seed", type=nonnegative_int, default=0, help="the random draw's seed")
    p.add_argument("--batch", type=positive_int, default=4, metavar="N",
                   help="cases per harness run (one job start per world of the batch)")
    p.add_argument("--shrink-budget-s", type=positive_seconds,
                   default=600.0, metavar="S", help="stop shrinking the first failure after S seconds")
    p.add_argument("--run-dir", metavar="DIR", help="where the runs and the shrunk file go (default: runs/<timestamp>/)")
    return p


def check_worlds(family: str, worlds: Sequence[int]) -> None:
    """ValueError naming the world when the family cannot run at it (powers of two up to 8: the mailbox's limit)."""
    for world in worlds:
        if world & (world - 1) or world > 8:
            raise ValueError(f"--world {world}: the fuzzer draws powers of two up to 8 for {family}")


def _launcher_name(launcher: str) -> str:
    """The launcher ``auto`` resolves to here (the replay command names it)."""
    return resolve(launcher, gpu_count())[0]


def fuzz_command(args: argparse.Namespace) -> int:
    """Fuzz as ``args`` say; the exit code."""
    worlds = tuple(args.world or DEFAULT_WORLDS)
    check_worlds(args.family, worlds)
    launcher = _launcher_name(args.launcher)
    run_dir = Path(args.run_dir) if args.run_dir else default_run_dir()
    with run_dir_lock(run_dir):  # another run's directory is refused (exit 2) before anything in it changes
        return fuzz_in(args, worlds, launcher, run_dir)


def fuzz_in(args: argparse.Namespace, worlds: tuple, launcher: str, run_dir: Path) -> int:
    """Fuzz as ``args`` say in the run directory this process holds; the exit code."""
    print(f"# rankcheck fuzz: {args.family}, seed {args.seed}, worlds {list(worlds)}, launcher {launcher}, "
          f"budget {args.budget_s:g} s; run dir {run_dir}", flush=True)
    if substitution():
        print(f"# {substitution()}", flush=True)
    runner = BatchRunner(run_dir, launcher=launcher, impl=args.impl)
    started = time.monotonic()
    result = fuzz(args.family, worlds, args.seed, args.budget_s, runner, batch=args.batch,
                  shrink_budget_s=args.shrink_budget_s, log=lambda line: print(line, flush=True))
    wall = time.monotonic() - started
    if result.failing is None:
        if result.tried and len(runner.unavailable) >= result.tried:
            print(f"{result.tried} cases tried (seed {args.seed}): none available here "
                  f"({next(iter(runner.details.values()), '')[:200]})", flush=True)
            return EXIT_UNAVAILABLE
        print(f"{result.tried} cases tried (seed {args.seed}), none failed, in {wall:.0f} s", flush=True)
        return EXIT_OK
    print(f"{result.tried} cases tried (seed {args.seed}); {result.failing['name']} failed "
          f"({' '.join(result.signature)}), shrunk in {wall:.0f} s to {result.shrunk_path}\n"
          f"replay: {result.replay}", flush=True)
    return EXIT_FAILED


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m harness fuzz`` (dispatched by ``harness.cli``)."""
    try:
        args = build_parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    except SystemExit as exc:  # argparse: --help is 0, a bad argument 2
        return int(exc.code or 0)
    try:
        return fuzz_command(args)
    except ValueError as exc:
        print(f"rankcheck fuzz: {exc}", file=sys.stderr)
        return EXIT_BAD_ARGUMENTS
    except (KeyboardInterrupt, FuzzInterrupted):
        print("rankcheck fuzz: interrupted; what ran so far is in the run directory", file=sys.stderr)
        return EXIT_INTERRUPTED


__all__ = ["build_parser", "check_worlds", "fuzz_command", "fuzz_in", "main"]
