"""``python -m harness bench``: time the registered benchmark cases on this GPU.

``main(argv)`` parses ``[--family F] [--case NAME] [--out DIR] [--warmup N]
[--reps N] [--list]``, discovers the cases (``harness/bench/cases/*.py``; see
``harness.bench.registry`` for how a kernel helper declares one), runs them
(``harness.bench.runner``) and writes the results document (and a PNG where
matplotlib exists) under ``--out`` (default ``docs/results``). Exit status:
0 every selected case ran, 1 some case or case module failed, 2 nothing to
run (no GPU, no matching case, bad arguments).
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Sequence

from harness.bench.registry import REGISTRY, BenchCase, BenchContext, Prepared, bench_case, discover

DEFAULT_OUT = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "docs", "results")


def _parser() -> argparse.ArgumentParser:
    """The ``bench`` command line."""
    parser = argparse.ArgumentParser(prog="python -m harness bench", description="Benchmark registered kernel cases.")
    parser.add_argument("--family", help="only this family's cases")
    parser.add_argument("--case", help="only the case with this name")
    parser.add_argument("--out", default=DEFAULT_OUT, help="results directory (default docs/results)")
    parser.add_argument("--warmup", type=int, default=20, help="graph replays / eager loops before timing")
    parser.add_argument("--reps", type=int, default=100, help="timed repetitions per mode")
    parser.add_argument("--list", action="store_true", help="list the registered cases and exit (no GPU needed)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the bench command; return the exit status."""
    args = _parser().parse_args(list(argv) if argv is not None else None)
    failures = discover()
    for failure in failures:
        print(f"bench: case module {failure['module']} failed to import: {failure['error']}", file=sys.stderr)
    selected = REGISTRY.cases(family=args.family, name=args.case)
    if args.list:
        for case in selected:
            print(f"{case.key}\t{case.description}")
        return 1 if failures else 0
    if not selected:
        known = ", ".join(REGISTRY.families()) or "none"
        print(f"bench: no case matches --family {args.family} --case {args.case} (families: {known})", file=sys.stderr)
        return 2
    import torch

    if not torch.cuda.is_available():
        print("bench: needs a CUDA GPU (torch.cuda.is_available() is False); --list works without one", file=sys.stderr)
        return 2
    from harness.bench.results import write_results
    from harness.bench.runner import run_cases

    command = ["python", "-m", "harness", "bench", *(argv if argv is not None else sys.argv[1:])]
    document = run_cases(selected, command=command, warmup=args.warmup, reps=args.reps, failed=failures)
    paths = write_results(document, args.out)
    _print_table(document)
    print(f"bench: results in {paths['json']}" + (f" and {paths['png']}" if paths["png"] else ""))
    return 1 if document["failed"] else 0


def _print_table(document: dict) -> None:
    """A plain table of medians, floors and efficiencies, then the failures."""
    machine = document["machine"]
    print(
        f"{document['device']['name']}: copy {machine['copy_bandwidth_bytes_per_s'] / 1e9:.0f} GB/s, "
        f"empty launch {machine['graph_launch_us']:.2f} us (graph) / {machine['eager_launch_us']:.2f} us (eager)"
    )
    print(f"{'case':40s} {'graph us':>10s} {'floor':>8s} {'eff':>5s} {'eager us':>10s} {'floor':>8s} {'eff':>5s} l2cold")
    for case in document["cases"]:
        print(
            f"{case['family'] + '/' + case['name']:40s} {case['graph']['median_us']:10.2f} {case['floor_us']['graph']:8.2f} "
            f"{case['efficiency']['graph']:5.2f} {case['eager']['median_us']:10.2f} {case['floor_us']['eager']:8.2f} "
            f"{case['efficiency']['eager']:5.2f} {case['l2_cold']}"
        )
    for failure in document["failed"]:
        print(f"FAILED {failure.get('case') or failure.get('module')}: {failure['error']}")


__all__ = ["BenchCase", "BenchContext", "Prepared", "REGISTRY", "bench_case", "discover", "main"]
