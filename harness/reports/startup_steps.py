"""Where a run's job processes spent their start-up: the seconds between consecutive start-up marks, per step.

A rank's first case carries its process's start-up marks (``startup`` in
``<run>/cases/<family>.<name>/w<tp>[.g<group>]/rank<k>.result.json``; the
marks and their meaning: ``harness.wire.phases``): the wall time at which
the process reached each step. A virtual job started in a spare process
(``harness.launch.spares``) goes ``process`` (the interpreter started),
``worker`` (its imports done), ``torch``, ``cuda`` (CUDA's state, no
context yet), ``preloaded`` (every family's modules), then ``job`` (the
launcher wrote the job file: the spare was taken) and ``handed`` (the spare
read it), and ``fabric`` (the ranks' streams made, which makes the
process's CUDA context); a spare taken before it was ready has ``job``
earlier in that order, and a torchrun rank has ``joined`` and ``grouped``
instead of the spare's steps.

The ranks of one virtual job are threads of one process and share its
marks, so each distinct set of marks is counted once. Each process's marks
are sorted by time; a step is the interval between two neighbours, named
``earlier->later``, so the same step name means the same interval whatever
the order of the others. ``python -m harness.reports.startup_steps RUN_DIR``
prints, per step, how many processes had it, the seconds summed over them,
their median and the largest, the largest sum first; exit 2 when the
directory holds no start-up marks (nothing to say is never a table).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Iterable, Mapping

EXIT_NOTHING = 2


def process_marks(run_dir: str | Path) -> list[dict[str, float]]:
    """Each job process's start-up marks found in ``run_dir``'s rank results, once per process."""
    seen: set[tuple] = set()
    processes = []
    for path in sorted(Path(run_dir).glob("cases/*/*/rank*.result.json")):
        try:
            marks = json.loads(path.read_text(encoding="utf-8")).get("startup") or {}
        except (OSError, UnicodeDecodeError, json.JSONDecodeError, AttributeError):
            continue  # a result being written, or not a result: its marks are not evidence
        key = tuple(sorted(marks.items()))
        if key and key not in seen:
            seen.add(key)
            processes.append({name: float(at) for name, at in marks.items()})
    return processes


def step_seconds(processes: Iterable[Mapping[str, float]]) -> dict[str, list[float]]:
    """Per step (``earlier->later``), the seconds each process spent between those two neighbouring marks."""
    steps: dict[str, list[float]] = {}
    for marks in processes:
        ordered = sorted(marks.items(), key=lambda item: item[1])
        for (earlier, at), (later, then) in zip(ordered, ordered[1:]):
            steps.setdefault(f"{earlier}->{later}", []).append(then - at)
    return steps


def table(steps: Mapping[str, list[float]]) -> str:
    """The steps as text, one line each: processes, sum, median and largest seconds, the largest sum first."""
    lines = [f"{'step':24s} {'processes':>9s} {'sum s':>8s} {'median s':>9s} {'max s':>7s}"]
    for name, seconds in sorted(steps.items(), key=lambda item: -sum(item[1])):
        lines.append(f"{name:24s} {len(seconds):9d} {sum(seconds):8.1f} {statistics.median(seconds):9.2f} "
                     f"{max(seconds):7.2f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Print the start-up steps of a run directory; exit 2 when it has no start-up marks."""
    parser = argparse.ArgumentParser(prog="python -m harness.reports.startup_steps",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("run_dir", help="a validate or replay run directory")
    args = parser.parse_args(argv)
    processes = process_marks(args.run_dir)
    if not processes:
        print(f"startup_steps: {args.run_dir}: no rank result with start-up marks", file=sys.stderr)
        return EXIT_NOTHING
    print(f"# {len(processes)} job process(es) in {args.run_dir}")
    print(table(step_seconds(processes)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
