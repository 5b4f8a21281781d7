"""The live view of a validation run on a terminal: a bounded table, counts per world, a bar with an ETA.

A full run has hundreds of cases; a table of all of them grows past any
terminal, and rich's ``Live`` then crops the bottom of what it draws, which
is where the progress bar is. So the view is sized to the terminal every
time it is drawn: the failing rows first (they are why anyone watches),
then the most recent rows that still fit, in arrival order, with one line
saying how many rows are not shown (every row is in the JSON and JUnit
files). Columns never wrap, so a row is one line and the count is exact.

The detail column (first mismatch or diagnosis) takes the width the fixed
columns leave. Where that is under ``MIN_DETAIL`` characters (an 80-column
terminal) the table drops the column and the detail of every failing row
shown goes under the table instead, one wrapped paragraph each, so a
failing row never reads only "fail"; the row budget leaves room for those
lines.

Under the table: one line of counts per world (``world 2: 40/61``, done of
planned), then the bar with cases done of planned, elapsed time, and the
time remaining estimated from the mean wall time per completed case so far
(with jobs side by side that mean is the run's throughput, which is what the
remaining cases will see). ``:stored-bits`` lines are checks attached to a
case, not cases: neither the bar nor the per-world counts include them,
exactly as the footer's case counts do not (``harness.reports.report``).
"""

from __future__ import annotations

from typing import Mapping, Sequence

from rich.console import Console, Group
from rich.live import Live
from rich.progress import BarColumn, Progress, ProgressColumn, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from harness.wire.case_result import graph_totals

STATUS_STYLE = {"pass": "green", "fail": "red", "timeout": "magenta", "error": "red", "not-available": "yellow"}
FAILING = ("fail", "timeout", "error")
# Lines the view draws besides table rows: table title, header, three rule lines, the hidden-rows
# line, the per-world line, the bar, and one line of slack so a terminal never scrolls the bar away.
CHROME_LINES = 9
MIN_ROWS = 2
# Fixed column widths (None: the detail column, which takes what the terminal has left, so it gives way first).
DETAIL = "first mismatch / detail"
COLUMNS = {"family/scenario": 40, "world": 5, "launcher": 8, "result": 13, DETAIL: None, "time": 8}
# Below this many characters the detail column goes under the table (failing rows only).
MIN_DETAIL = 30
# A table's own characters per row: a border and a space either side of each cell.
BORDER_CHARS = 3 * len(COLUMNS) + 1


def detail_width(terminal_width: int) -> int:
    """The characters the detail column gets at ``terminal_width``."""
    return terminal_width - BORDER_CHARS - sum(w for w in COLUMNS.values() if w)


def wrapped_lines(text: str, width: int) -> int:
    """How many lines ``text`` takes when folded at ``width`` characters."""
    return max(1, -(-len(text) // max(width, 1)))


def eta_s(elapsed_s: float, done: int, total: int | None) -> float | None:
    """Seconds left at the mean wall time per completed case so far (None before the first or without a total)."""
    if not done or total is None:
        return None
    return elapsed_s / done * max(total - done, 0)


def clock(seconds: float | None) -> str:
    """``seconds`` as ``h:mm:ss`` (``-:--:--`` when unknown)."""
    if seconds is None:
        return "-:--:--"
    whole = int(round(seconds))
    return f"{whole // 3600}:{whole % 3600 // 60:02d}:{whole % 60:02d}"


class MeanEtaColumn(ProgressColumn):
    """A progress column: ``ETA h:mm:ss`` from the mean time per completed case."""

    def render(self, task) -> Text:
        """The ETA text of ``task``."""
        return Text(f"ETA {clock(eta_s(task.elapsed or 0.0, int(task.completed), task.total))}")


def rows_to_show(results: Sequence, budget: int) -> tuple[list, int]:
    """(rows, hidden): failing results first claim the budget, then the latest others; shown in arrival order."""
    budget = max(budget, MIN_ROWS)
    failing = [i for i, r in enumerate(results) if r.status in FAILING]
    keep = set(failing[-budget:])
    others = [i for i in range(len(results)) if i not in keep]
    room = budget - len(keep)
    keep.update(others[max(len(others) - room, 0):] if room > 0 else [])
    return [results[i] for i in sorted(keep)], len(results) - len(keep)


def world_counts(results: Sequence, planned: Mapping[int, int]) -> str:
    """``world 1: 3/4 · world 2: 0/4``: cases done of planned per world (worlds without a plan: done only)."""
    done: dict[int, int] = {}
    for r in results:
        done[r.world] = done.get(r.world, 0) + 1
    parts = []
    for world in sorted(set(planned) | set(done)):
        plan = planned.get(world)
        parts.append(f"world {world}: {done.get(world, 0)}" + (f"/{plan}" if plan is not None else ""))
    return " · ".join(parts)


class LiveView:
    """Draws results as they arrive, sized to the terminal's height; the bar and the counts count cases only."""

    def __init__(self, console: Console, *, total: int | None, planned: Mapping[int, int] | None = None) -> None:
        self.console = console
        self.planned = dict(planned or {})
        self.progress = Progress(TextColumn("cases"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                                 TimeElapsedColumn(), MeanEtaColumn(), console=console)
        self.task = self.progress.add_task("cases", total=total)
        self.results: list = []
        self.live = Live(self.renderable(), console=console, refresh_per_second=4)

    def set_total(self, total: int | None) -> None:
        """Set how many cases the bar expects."""
        self.progress.update(self.task, total=total)

    def detail_inline(self) -> bool:
        """Whether the terminal is wide enough for the detail column (else failing details go under the table)."""
        return detail_width(self.console.size.width) >= MIN_DETAIL

    def details_below(self, shown: Sequence) -> list[Text]:
        """The detail of each failing row of ``shown``, one foldable paragraph each (none when the column fits)."""
        if self.detail_inline():
            return []
        return [Text(f"{r.status} {r.case_id}: {r.first_mismatch or r.detail}", style=STATUS_STYLE[r.status],
                     overflow="fold") for r in shown if r.status in FAILING]

    def shown_rows(self) -> tuple[list, int, list[Text]]:
        """(rows, hidden, details below): the rows that fit with the lines their details below take."""
        budget = self.console.size.height - CHROME_LINES
        shown, hidden = rows_to_show(self.results, budget)
        below = self.details_below(shown)
        used = sum(wrapped_lines(t.plain, self.console.size.width) for t in below)
        if used:
            shown, hidden = rows_to_show(self.results, budget - used)
            below = self.details_below(shown)
        return shown, hidden, below

    def table(self, shown: Sequence | None = None, hidden: int = 0) -> Table:
        """The rows that fit the terminal (failures plus the latest), one line each; no detail column when narrow."""
        if shown is None:
            shown, hidden, _ = self.shown_rows()
        inline = self.detail_inline()
        table = Table(title="rankcheck", expand=True,
                      caption=f"{hidden} earlier row(s) not shown (all of them: the JSON report)" if hidden else None)
        for col, width in COLUMNS.items():
            if col != DETAIL or inline:
                table.add_column(col, no_wrap=True, overflow="ellipsis", width=width, ratio=None if width else 1)
        for r in shown:
            # Text, not markup: details hold brackets (``cache[row 0]``) that markup would swallow
            cells = [Text(f"{r.family}/{r.scenario}"), Text(str(r.world) + (f" g{r.group}" if r.group is not None else "")),
                     Text(r.launcher), Text(r.status, style=STATUS_STYLE[r.status]),
                     Text(r.first_mismatch or r.detail), Text(f"{r.time_s:.2f}s")]
            table.add_row(*(cells if inline else cells[:4] + cells[5:]))
        return table

    def cases(self) -> list:
        """The results that are cases (not stored-bits checks)."""
        return [r for r in self.results if not r.is_stored_bits_check]

    def renderable(self) -> Group:
        """The table, the failing rows' details when the terminal is narrow, the per-world counts (and the graphs
        captured so far) and the bar."""
        shown, hidden, below = self.shown_rows()
        counts = world_counts(self.cases(), self.planned)
        graphs = graph_totals(self.results)
        if graphs["cases"]:
            counts += f" · graphs: {graphs['captured']} captured, {graphs['replays']} replays"
        return Group(self.table(shown, hidden), *below, Text(counts), self.progress)

    def show(self, results: Sequence) -> None:
        """Redraw with ``results`` (every result so far, in arrival order)."""
        self.results = list(results)
        self.progress.update(self.task, completed=len(self.cases()))
        self.live.update(self.renderable())

    def __enter__(self) -> "LiveView":
        self.live.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self.live.update(self.renderable())
        self.live.__exit__(*exc)


__all__ = ["LiveView", "clock", "detail_width", "eta_s", "rows_to_show", "world_counts"]
