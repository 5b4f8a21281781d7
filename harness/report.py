"""Results as they arrive: a live table for people, JUnit XML for CI, JSON for tools.

One ``CaseResult`` per scenario x world x launcher (x TP group when groups
are smaller than the world). ``Report.add`` updates the live table (rich,
when the console is a terminal; one plain line per result otherwise) and
rewrites the JUnit XML and the JSON file atomically (write to a temporary
file, fsync, ``os.replace``), so an interrupted run keeps every result that
finished and never leaves a half-written file.

Statuses: ``pass``, ``fail`` (bits differ, or an expected error/timeout did
not happen), ``timeout`` (an unexpected hang; the diagnosis names the rank
and launch), ``error`` (an unexpected exception or crash), ``not-available``
(the implementation cannot run here, with the reason; neither pass nor
failure). The footer follows nccl-tests: ``Out of bounds values : N OK`` (or
``FAILED``) where N counts mismatching elements over every case, then the
counts per status; the exit code is non-zero on any fail, timeout or error.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Sequence

STATUSES = ("pass", "fail", "timeout", "error", "not-available")
FAILING = ("fail", "timeout", "error")


@dataclass
class CaseResult:
    """The verdict of one scenario at one world size under one launcher."""

    family: str
    scenario: str
    world: int
    launcher: str
    status: str
    expected: str = "golden"
    detail: str = ""
    mismatch_count: int = 0
    first_mismatch: str = ""
    mismatches: list = field(default_factory=list)
    max_ulps: int = 0
    time_s: float = 0.0
    group: int | None = None
    diagnosis: dict | None = None
    impl: str = "golden"

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"status must be one of {STATUSES}, got {self.status!r}")

    @property
    def case_id(self) -> str:
        """A stable name: family/scenario[world=N,launcher=L(,group=G)]."""
        group = f",group={self.group}" if self.group is not None else ""
        return f"{self.family}/{self.scenario}[world={self.world},launcher={self.launcher}{group}]"


def atomic_write(path: str | os.PathLike, text: str) -> None:
    """Replace ``path`` with ``text`` atomically (temp file in the same directory, fsync, rename)."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def junit_xml(results: Sequence[CaseResult], *, suite: str, header: str) -> str:
    """Render results as a JUnit XML document (one testcase per result)."""
    counts = {s: sum(r.status == s for r in results) for s in STATUSES}
    root = ET.Element("testsuites")
    ts = ET.SubElement(root, "testsuite", {
        "name": suite,
        "tests": str(len(results)),
        "failures": str(counts["fail"]),
        "errors": str(counts["error"] + counts["timeout"]),
        "skipped": str(counts["not-available"]),
        "time": f"{sum(r.time_s for r in results):.3f}",
    })
    props = ET.SubElement(ts, "properties")
    ET.SubElement(props, "property", {"name": "header", "value": header})
    for r in results:
        case = ET.SubElement(ts, "testcase", {
            "classname": f"{r.family}.{r.scenario}",
            "name": f"world={r.world},launcher={r.launcher}" + (f",group={r.group}" if r.group is not None else ""),
            "time": f"{r.time_s:.3f}",
        })
        body = r.detail
        if r.diagnosis:
            body += "\n" + json.dumps(r.diagnosis, indent=1, sort_keys=True, default=str)
        if r.mismatches:
            body += "\n" + "\n".join(m if isinstance(m, str) else json.dumps(m, default=str) for m in r.mismatches)
        if r.status == "fail":
            ET.SubElement(case, "failure", {"message": (r.first_mismatch or r.detail)[:500], "type": "mismatch"}).text = body
        elif r.status in ("error", "timeout"):
            ET.SubElement(case, "error", {"message": r.detail[:500], "type": r.status}).text = body
        elif r.status == "not-available":
            ET.SubElement(case, "skipped", {"message": r.detail[:500]})
        else:
            ET.SubElement(case, "system-out").text = r.detail
    return ET.tostring(root, encoding="unicode", xml_declaration=True)


class Report:
    """Collects results, shows them live, and keeps JUnit/JSON files current after each one."""

    def __init__(self, *, header: str, junit_path: str | os.PathLike | None = None,
                 json_path: str | os.PathLike | None = None, total: int | None = None,
                 stream=None, live: bool | None = None) -> None:
        self.header = header
        self.junit_path = junit_path
        self.json_path = json_path
        self.results: list[CaseResult] = []
        self.started = time.time()
        self.total = total
        self.stream = stream if stream is not None else sys.stdout
        self._live_enabled = self.stream.isatty() if live is None else live
        self._live = None
        self._progress = None
        self._task = None
        self._console = None

    def __enter__(self) -> "Report":
        from rich.console import Console  # noqa: PLC0415 - only the report draws

        self._console = Console(file=self.stream, force_terminal=self._live_enabled or None,
                                highlight=False, width=None if self._live_enabled else 200)
        self._console.print(self.header, markup=False)
        if self._live_enabled:
            from rich.live import Live  # noqa: PLC0415
            from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn  # noqa: PLC0415
            from rich.console import Group  # noqa: PLC0415

            self._progress = Progress(TextColumn("{task.description}"), BarColumn(),
                                      TextColumn("{task.completed}/{task.total}"), TimeElapsedColumn(),
                                      console=self._console)
            self._task = self._progress.add_task("cases", total=self.total)
            self._group_cls = Group
            self._live = Live(self._renderable(), console=self._console, refresh_per_second=4)
            self._live.__enter__()
        self._write_files()
        return self

    def __exit__(self, *exc) -> None:
        if self._live is not None:
            self._live.update(self._renderable())
            self._live.__exit__(*exc)
        self._console.print(self.footer(), markup=False)

    def set_total(self, total: int) -> None:
        """Set how many cases the progress bar expects."""
        self.total = total
        if self._progress is not None:
            self._progress.update(self._task, total=total)

    def note(self, text: str) -> None:
        """Print a line of context above the table (a job starting, a launcher choice)."""
        if self._console is not None:
            self._console.print(text, markup=False)

    def add(self, result: CaseResult) -> None:
        """Record one result: show it, and rewrite the JUnit and JSON files atomically."""
        self.results.append(result)
        self._write_files()
        if self._live is not None:
            self._progress.update(self._task, completed=sum(r.launcher != "store" for r in self.results))
            self._live.update(self._renderable())
        elif self._console is not None:
            self._console.print(self._line(result), markup=False)

    def _line(self, r: CaseResult) -> str:
        """One plain-text line for a result."""
        what = r.first_mismatch or r.detail
        return f"{r.status.upper():<13} {r.case_id:<70} {r.time_s:7.2f}s  {what}"

    def _table(self):
        """The live table of every result so far."""
        from rich.table import Table  # noqa: PLC0415

        style = {"pass": "green", "fail": "red", "timeout": "magenta", "error": "red", "not-available": "yellow"}
        table = Table(title="rankcheck", expand=False)
        for col in ("family/scenario", "world", "launcher", "result", "first mismatch / detail", "time"):
            table.add_column(col)
        for r in self.results:
            table.add_row(f"{r.family}/{r.scenario}", str(r.world) + (f" g{r.group}" if r.group is not None else ""),
                          r.launcher, f"[{style[r.status]}]{r.status}[/]",
                          (r.first_mismatch or r.detail)[:120], f"{r.time_s:.2f}s")
        return table

    def _renderable(self):
        """The table plus the progress bar."""
        return self._group_cls(self._table(), self._progress)

    def summary(self) -> dict:
        """Counts per status, total mismatching elements, and wall time."""
        counts = {s: sum(r.status == s for r in self.results) for s in STATUSES}
        return {"counts": counts, "mismatching_elements": sum(r.mismatch_count for r in self.results),
                "cases": len(self.results), "wall_s": time.time() - self.started, "ok": self.ok}

    @property
    def ok(self) -> bool:
        """True when no result failed, timed out unexpectedly or errored."""
        return not any(r.status in FAILING for r in self.results)

    def footer(self) -> str:
        """The nccl-tests-style footer: out-of-bounds (mismatching) values and the counts."""
        s = self.summary()
        c = s["counts"]
        oob = s["mismatching_elements"]
        return (
            f"# Out of bounds values : {oob} {'OK' if oob == 0 else 'FAILED'}\n"
            f"# Cases : {s['cases']}  pass {c['pass']}  fail {c['fail']}  timeout {c['timeout']}  "
            f"error {c['error']}  not-available {c['not-available']}\n"
            f"# Result : {'OK' if self.ok else 'FAILED'}  ({s['wall_s']:.1f} s)"
        )

    def exit_code(self) -> int:
        """0 when every case passed or was not available; 1 otherwise."""
        return 0 if self.ok else 1

    def _write_files(self) -> None:
        """Rewrite the JUnit XML and JSON outputs (atomically) from the results so far."""
        if self.junit_path:
            atomic_write(self.junit_path, junit_xml(self.results, suite="rankcheck", header=self.header))
        if self.json_path:
            doc = {"header": self.header, "summary": self.summary(),
                   "results": [asdict(r) | {"case_id": r.case_id} for r in self.results]}
            atomic_write(self.json_path, json.dumps(doc, indent=1, sort_keys=True, default=str))
