"""What ``python -m harness bench`` prints while it runs: one line per case as it completes.

Every case's line is printed (and flushed) the moment the case ends: its
CUDA-graph and eager per-call medians, its floor and how far it is from it,
the speedup over its baseline where that already ran, and how long its
setup and timing took; a failure is a ``FAILED`` line with the error. On a
terminal, a rich progress bar stays below the lines: the case count,
elapsed time, an estimate of the time left, and the case running now.
Anywhere else (a pipe, a CI log) the lines alone, plain text, so logs stay
readable.

``LiveConsole`` is a run listener (``harness.bench.runner.RunListener``).
"""

from __future__ import annotations

import sys
from typing import IO, Mapping

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn


def case_line(document: Mapping, entry: Mapping) -> str:
    """One completed case: medians, floor, distance to it, speedup over its baseline where measured, wall times."""
    key = f"{entry['family']}/{entry['name']}"
    graph, eager, floor = entry["graph"]["median_us"], entry["eager"]["median_us"], entry["floor_us"]["graph"]
    parts = [f"{key:44s}", f"graph {graph:9.2f} us", f"eager {eager:9.2f} us", f"floor {floor:8.2f} us",
             f"x floor {graph / floor:6.2f}"]
    baseline_name = entry["params"].get("baseline")
    baseline = next((c for c in document["cases"] if c["family"] == entry["family"] and c["name"] == baseline_name), None)
    if baseline is not None:
        parts.append(f"{baseline['graph']['median_us'] / graph:5.2f}x vs {baseline_name}")
    parts += flight_cost(document, entry)
    if "setup_s" in entry:
        parts.append(f"({entry['setup_s']:.1f} s setup, {entry['timed_s']:.1f} s timed)")
    return "  ".join(parts)


def flight_cost(document: Mapping, entry: Mapping) -> list[str]:
    """For a case without the flight recorder whose twin with it already ran (``flight_cost_of``): the recorder's
    cost, the twin's graph median minus this one's, in us and in percent of this one."""
    twin_name = entry["params"].get("flight_cost_of")
    twin = next((c for c in document["cases"] if c["family"] == entry["family"] and c["name"] == twin_name), None)
    if twin is None:
        return []
    graph = entry["graph"]["median_us"]
    cost = twin["graph"]["median_us"] - graph
    return [f"flight recorder {cost:+.2f} us ({100 * cost / graph:+.1f}%) in {twin_name}"]


def failure_line(failure: Mapping) -> str:
    """One failed case: its key and the error."""
    return f"FAILED {failure.get('case') or failure.get('module')}: {failure['error']}"


class LiveConsole:
    """Prints each case's line as it completes; on a terminal, also a progress bar with count, elapsed and ETA."""

    def __init__(self, total: int, *, file: IO[str] | None = None, terminal: bool | None = None) -> None:
        self.total = total
        self.done = 0
        self.file = file or sys.stdout
        interactive = self.file.isatty() if terminal is None else terminal
        self.progress = None
        if interactive:
            self.progress = Progress(
                TextColumn("bench"), BarColumn(bar_width=24), MofNCompleteColumn(), TextColumn("cases"),
                TimeElapsedColumn(), TextColumn("elapsed, ETA"), TimeRemainingColumn(),
                TextColumn("{task.description}"),
                console=Console(file=self.file, force_terminal=True), transient=True,
                # The bar redraws from a thread; once a second keeps it off the eager loops' Python timings.
                refresh_per_second=1,
            )
            self.task = self.progress.add_task("measuring the machine", total=total)

    def __enter__(self) -> "LiveConsole":
        """Show the bar (on a terminal)."""
        if self.progress is not None:
            self.progress.start()
        return self

    def __exit__(self, *exc) -> None:
        """Take the bar down, leaving the printed lines."""
        if self.progress is not None:
            self.progress.stop()

    def print(self, text: str) -> None:
        """Print ``text`` above the bar (or plainly), flushed at once."""
        if self.progress is not None:
            self.progress.console.print(text, markup=False, highlight=False, soft_wrap=True)
        else:
            print(text, file=self.file)
        self.file.flush()

    def machine_measured(self, document: dict) -> None:
        """Print the machine figures every floor is computed from."""
        machine = document["machine"]
        self.print(
            f"{document['device']['name']}: copy {machine['copy_bandwidth_bytes_per_s'] / 1e9:.0f} GB/s, empty launch "
            f"{machine['graph_launch_us']:.2f} us (graph) / {machine['eager_launch_us']:.2f} us (eager); "
            f"{self.total} cases, warm-up {document['settings']['warmup']}, {document['settings']['reps']} reps"
        )

    def case_started(self, document: dict, case) -> None:
        """Name the running case on the bar."""
        if self.progress is not None:
            self.progress.update(self.task, description=case.key, refresh=True)

    def case_finished(self, document: dict, case, entry: dict, failed: bool) -> None:
        """Print the case's line with its position, and advance the bar."""
        self.done += 1
        width = len(str(self.total))
        line = failure_line(entry) if failed else case_line(document, entry)
        self.print(f"[{self.done:{width}d}/{self.total}] {line}")
        if self.progress is not None:
            self.progress.update(self.task, advance=1, refresh=True)
