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
counts per status, then the result. Above the footer, whenever anything
failed, the failure summary (``harness.reports.failures``): one line per
failing result naming case, rank, launch, first mismatch or diagnosis and
log. Plain (non-terminal) output is never wrapped.

A case is one scenario at one world (and TP group) under one launcher; the
``<name>:stored-bits`` lines are checks attached to a case (its reference
against the golden store), counted on a line of their own and never as
cases, so the live bar, the planned total and the footer's case counts all
count the same things. A failing stored-bits check still fails the run.

The files on disk always say how the run ended (``summary.ended``): from
the first write (``__enter__``) until the last they say ``running, not
finished`` and the result ``RUNNING, not finished (n of m so far)`` with
exit code 1, so a run that is killed (SIGKILL, a crash, the machine gone)
leaves a report no reader takes for green (``harness merge-reports`` turns
it into an error, ``killed-or-crashed``). The last write, after the
verdict, says ``completed``, ``interrupted(SIGINT)`` or
``interrupted(SIGTERM)``, ``hangup`` (exit 129) or ``aborted``; an interrupt
that lands during that write makes the caller write once more
(``finish``), so the files never keep an ``OK`` the exit code denies. A
report file that cannot be written (read-only or full run directory) is
``ReportWriteError`` naming the file and the cause, a ``ValueError`` that
the command line turns into exit 2 without a traceback.

The result and the exit code are decided in one place (``Report.verdict``),
in this order: still running (``RUNNING``, 1), interrupted
(``INTERRUPTED (n of m run)``, 130; ``HANGUP``, 129), ended by an
exception (``ABORTED (...)``, 1), any fail, timeout or error (``FAILED``,
1), a scenario file refused before the run (``INPUT REFUSED (...)``, 2,
naming the first file and its fault, however many cases passed), no case run (``NOTHING RUN``, 2, with the
reason the caller gave), every case not available (``NOT AVAILABLE``, 3,
unless the caller allows it), else ``OK`` (0). Nothing that did not run is
ever green.

Both files open with what went wrong, before anything else: the JSON's
``diagnoses`` (first key; timeouts, then errors, then failures, each with
its case, TP group, blamed rank as the group numbers it and as the world
does, launch, and the diagnosis's words; ``diagnoses``) and the JUnit
suite's first properties (``result``, then ``diagnosis.<i>``). With TP
groups each JUnit case's classname starts with its group
(``group5.<family>.<name>``), so a CI page lists every group's cases
under it.

A case of a scenario that asks for CUDA graphs carries its graph counts
(``CaseResult.graphs``: graphs captured and replays over the ranks, and the
worst rank's mode); the JSON summary's ``graphs``, the JUnit suite's
``graphs.*`` properties and the footer's ``# Graphs`` line add them up
(``graph_totals``), so a run shows at a glance how much it captured.

Both files carry the run's provenance (``harness.reports.provenance``: versions,
commit, host, GPUs, the multicast variables, the start time); the JSON names
its format (``schema``). A JUnit failure carries the first mismatch and,
where the diagnosis names each rank's log (``diagnosis["logs"]``: rank ->
path), the tail of the log of the rank that failed. ``Report`` may be fed
from several threads: one lock orders every change and every file write.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from dataclasses import asdict
from typing import Mapping, Sequence

from rich.console import Console

from harness.reports import provenance as provenance_facts
from harness.reports.diagnoses import diagnoses
from harness.reports.failures import failure_summary
from harness.reports.junit import junit_xml
from harness.reports.live import LiveView
from harness.wire.atomic_file import atomic_write
from harness.wire.run_dir import RunDirError
from harness.wire.case_result import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_NOTHING_RUN,
    EXIT_OK,
    EXIT_UNAVAILABLE,
    FAILING,
    JSON_SCHEMA,
    STATUSES,
    graph_totals,
    CaseResult,
)


# Exit code of a run ended by SIGHUP (its terminal or SSH session lost): 128 + the signal's number.
EXIT_HANGUP = 129
RUNNING = "running, not finished"


class ReportWriteError(RunDirError):
    """A report file that cannot be written (the message names the file and the cause)."""


def phase_summary(results: Sequence[CaseResult]) -> str:
    """Each phase's seconds summed over ``results``, largest first, as ``reference 12.3 s  kernel 4.5 s``."""
    totals: dict[str, float] = {}
    for r in results:
        for name, seconds in r.phases.items():
            totals[name] = totals.get(name, 0.0) + float(seconds)
    if not totals:
        return "none recorded"
    return "  ".join(f"{name} {seconds:.1f} s" for name, seconds in sorted(totals.items(), key=lambda kv: -kv[1]))


def first_line(text: str) -> str:
    """The first line of ``text`` (a YAML error's message, without the quoted source lines under it)."""
    return (text.splitlines() or [""])[0]


class Report:
    """Collects results, shows them live, and keeps JUnit/JSON files current after each one."""

    def __init__(self, *, header: str, junit_path: str | os.PathLike | None = None,
                 json_path: str | os.PathLike | None = None, total: int | None = None,
                 stream=None, live: bool | None = None, planned: Mapping[int, int] | None = None,
                 allow_unavailable: bool = False, empty_reason: str = "", refused_inputs: Sequence[str] = (),
                 provenance: Mapping | None = None, interrupt_signal=lambda: None) -> None:
        self.header = header
        self.junit_path = junit_path
        self.json_path = json_path
        self.results: list[CaseResult] = []
        self.started = time.time()
        self.planned = dict(planned or {})
        self.total = total if total is not None or planned is None else sum(self.planned.values())
        self.allow_unavailable = allow_unavailable
        self.empty_reason = empty_reason
        # the input files refused before the run (a scenario file that does not load): never an OK run
        self.refused_inputs = list(refused_inputs)
        self.interrupted = False
        self.aborted = ""  # the exception that ended the run early, in words ("" when none did)
        # False from ``__enter__`` until the last write: the files say the run is still going
        self.finished = True
        # the name of the signal that interrupted the run ("SIGHUP", "SIGTERM"; None: a plain KeyboardInterrupt)
        self.interrupt_signal = interrupt_signal
        self.provenance = dict(provenance) if provenance is not None else provenance_facts.collect(self.started)
        self.stream = stream if stream is not None else sys.stdout
        self._live_enabled = self.stream.isatty() if live is None else live
        self._live = None
        self._console = None
        # add/note arrive from the job threads; the list, the view and the files change under one lock
        self._lock = threading.RLock()

    def __enter__(self) -> "Report":
        with self._lock:
            # Plain output is never wrapped (soft_wrap): a log line stays one line, whatever its length.
            self._console = Console(file=self.stream, force_terminal=self._live_enabled or None,
                                    highlight=False, soft_wrap=not self._live_enabled)
            self._console.print(self.header, markup=False)
            self.finished = False
            if self._live_enabled:
                self._live = LiveView(self._console, total=self.total, planned=self.planned).__enter__()
            self._write_files()
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        with self._lock:
            if exc_type is not None and issubclass(exc_type, Exception):
                self.aborted = f"{exc_type.__name__}: {exc}"
            elif exc_type is not None:
                self.interrupted = True  # KeyboardInterrupt, or SystemExit from a signal handler
            if self._live is not None:
                self._live.__exit__(exc_type, exc, tb)
            self.finish()
            failures = failure_summary(self.results)
            if failures:
                self._console.print(failures, markup=False, soft_wrap=True)
            self._console.print(self.footer(), markup=False, soft_wrap=True)

    def finish(self) -> None:
        """Write the files for the last time, with how the run ended (again when an interrupt cut a last write)."""
        with self._lock:
            self.finished = True
            self._write_files()

    def ended(self) -> str:
        """How the run ended, as the files say it: running, completed, interrupted(SIGINT|SIGTERM), hangup, aborted."""
        if not self.finished:
            return RUNNING
        if self.interrupted:
            name = self.interrupt_signal() or "SIGINT"
            return "hangup" if name == "SIGHUP" else f"interrupted({name})"
        return "aborted" if self.aborted else "completed"

    def set_total(self, total: int) -> None:
        """Set how many cases the progress bar expects."""
        with self._lock:
            self.total = total
            if self._live is not None:
                self._live.set_total(total)

    def note(self, text: str) -> None:
        """Print a line of context above the table (a job starting, a launcher choice)."""
        with self._lock:
            if self._console is not None:
                self._console.print(text, markup=False)

    def add(self, result: CaseResult) -> None:
        """Record one result: show it, and rewrite the JUnit and JSON files atomically."""
        with self._lock:
            self.results.append(result)
            self._write_files()
            if self._live is not None:
                self._live.show(self.results)
            elif self._console is not None:
                self._console.print(self._line(result), markup=False)

    def cases(self) -> list[CaseResult]:
        """The results that are cases (every result but the stored-bits checks)."""
        return [r for r in self.results if not r.is_stored_bits_check]

    def _line(self, r: CaseResult) -> str:
        """One plain-text line for a result, with cases done of planned."""
        what = r.first_mismatch or r.detail
        done = f"[{len(self.cases())}/{self.total if self.total is not None else '?'}]"
        return f"{done:<9} {r.status.upper():<13} {r.case_id:<70} {r.time_s:7.2f}s  {what}"

    def summary(self) -> dict:
        """Counts per status of the cases and of the stored-bits checks, mismatching elements, wall time, verdict."""
        cases = self.cases()
        checks = [r for r in self.results if r.is_stored_bits_check]
        result, code = self.verdict()
        return {"counts": {s: sum(r.status == s for r in cases) for s in STATUSES},
                "stored_bits": {s: sum(r.status == s for r in checks) for s in STATUSES},
                "mismatching_elements": sum(r.mismatch_count for r in self.results),
                "graphs": graph_totals(self.results),
                "cases": len(cases), "planned": self.total, "interrupted": self.interrupted,
                "empty_reason": self.empty_reason, "wall_s": time.time() - self.started, "ok": self.ok,
                "refused_inputs": self.refused_inputs, "result": result, "exit_code": code, "ended": self.ended()}

    @property
    def ok(self) -> bool:
        """True when no result failed, timed out unexpectedly or errored."""
        return not any(r.status in FAILING for r in self.results)

    def verdict(self) -> tuple[str, int]:
        """(the footer's result words, the exit code): the one place that decides both."""
        cases = self.cases()
        failed = sum(r.status in FAILING for r in self.results)
        planned = self.total if self.total is not None else "?"
        if not self.finished:
            return f"RUNNING, not finished ({len(cases)} of {planned} so far)", EXIT_FAILED
        if self.interrupted:
            also = f"; {failed} failed" if failed else ""
            if self.ended() == "hangup":
                return f"HANGUP ({len(cases)} of {planned} run{also})", EXIT_HANGUP
            return f"INTERRUPTED ({len(cases)} of {planned} run{also})", EXIT_INTERRUPTED
        if self.aborted:
            return f"ABORTED ({self.aborted[:300]})", EXIT_FAILED
        if failed:
            return "FAILED", EXIT_FAILED
        if self.refused_inputs:
            ran = f"{len(cases)} case(s) run, none failed" if cases else "nothing run"
            return (f"INPUT REFUSED ({len(self.refused_inputs)} scenario file(s) refused, not run: "
                    f"{first_line(self.refused_inputs[0])[:300]}; {ran})"), EXIT_NOTHING_RUN
        if not cases:
            return f"NOTHING RUN ({self.empty_reason or 'no case selected'})", EXIT_NOTHING_RUN
        if all(r.status == "not-available" for r in cases):
            if self.allow_unavailable:
                return "OK (every case not available, allowed by --allow-unavailable)", EXIT_OK
            return ("NOT AVAILABLE (every case; nothing was validated here, "
                    "--allow-unavailable accepts that)"), EXIT_UNAVAILABLE
        return "OK", EXIT_OK

    def footer(self) -> str:
        """The nccl-tests-style footer: out-of-bounds (mismatching) values, the counts and the result."""
        s = self.summary()
        c = s["counts"]
        oob = s["mismatching_elements"]
        stored = s["stored_bits"]
        stored_line = (f"# Stored bits : {sum(stored.values())} checked  pass {stored['pass']}  "
                       f"fail {stored['fail']}  not-available {stored['not-available']}\n"
                       if any(stored.values()) else "")
        g = s["graphs"]
        graph_line = (f"# Graphs : {g['captured']} captured  {g['replays']} replays  over {g['cases']} graph cases  "
                      f"not captured {g['not_captured']}  not available {g['not_available']}\n" if g["cases"] else "")
        planned = f" of {s['planned']}" if s["planned"] is not None else ""
        return (
            f"# Out of bounds values : {oob} {'OK' if oob == 0 else 'FAILED'}\n"
            f"# Cases : {s['cases']}{planned}  pass {c['pass']}  fail {c['fail']}  timeout {c['timeout']}  "
            f"error {c['error']}  not-available {c['not-available']}\n"
            f"{stored_line}"
            f"{graph_line}"
            f"# Phases : {phase_summary(self.results)}\n"
            f"# Result : {s['result']}  (exit {s['exit_code']}, {s['wall_s']:.1f} s)"
        )

    def exit_code(self) -> int:
        """The exit code of the run (``verdict``): 0 OK, 1 failed (or still running), 2 nothing run, 3 nothing
        available, 129 hangup, 130 interrupted."""
        return self.verdict()[1]

    def _write_files(self) -> None:
        """Rewrite the JUnit XML and JSON outputs (atomically) from the results so far; ReportWriteError naming the
        file when one cannot be written."""
        with self._lock:
            if self.junit_path:
                _write_named(self.junit_path, lambda: junit_xml(self.results, suite="rankcheck", header=self.header,
                                                               provenance=self.provenance, verdict=self.verdict()))
            if self.json_path:
                _write_named(self.json_path, self._json_text)

    def _json_text(self) -> str:
        """The JSON report of the results so far ("diagnoses" sorts first among the keys: what went wrong is on top)."""
        doc = {"diagnoses": diagnoses(self.results), "schema": JSON_SCHEMA, "header": self.header,
               "provenance": self.provenance, "summary": self.summary(),
               "results": [asdict(r) | {"case_id": r.case_id} for r in self.results]}
        return json.dumps(doc, indent=1, sort_keys=True, default=str)


def _write_named(path, text) -> None:
    """``atomic_write(path, text())``; an OSError becomes ReportWriteError naming ``path`` and the cause."""
    try:
        atomic_write(path, text())
    except OSError as exc:
        raise ReportWriteError(f"cannot write the report {path}: {exc.strerror or exc}") from None
