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
counts per status, then the result.

A case is one scenario at one world (and TP group) under one launcher; the
``<name>:stored-bits`` lines are checks attached to a case (its reference
against the golden store), counted on a line of their own and never as
cases, so the live bar, the planned total and the footer's case counts all
count the same things. A failing stored-bits check still fails the run.

The result and the exit code are decided in one place (``Report.verdict``),
in this order: interrupted (``INTERRUPTED (n of m run)``, 130), ended by an
exception (``ABORTED (...)``, 1), any fail, timeout or error (``FAILED``,
1), no case run (``NOTHING RUN``, 2, with the
reason the caller gave), every case not available (``NOT AVAILABLE``, 3,
unless the caller allows it), else ``OK`` (0). Nothing that did not run is
ever green.

Both files open with what went wrong, before anything else: the JSON's
``diagnoses`` (first key; timeouts, then errors, then failures, each with
its case, TP group, blamed rank as the group numbers it and as the world
does, launch, and the diagnosis's words; ``diagnoses``) and the JUnit
suite's first properties (``result``, then ``diagnosis.<i>``). With TP
groups each JUnit case's classname starts with its group
(``group5.markov_sharded.basic``), so a CI page lists every group's cases
under it.

A case of a scenario that asks for CUDA graphs carries its graph counts
(``CaseResult.graphs``: graphs captured and replays over the ranks, and the
worst rank's mode); the JSON summary's ``graphs``, the JUnit suite's
``graphs.*`` properties and the footer's ``# Graphs`` line add them up
(``graph_totals``), so a run shows at a glance how much it captured.

Both files carry the run's provenance (``harness.provenance``: versions,
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
import tempfile
import threading
import time
import xml.etree.ElementTree as ET
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Mapping, Sequence

from harness import provenance as provenance_facts

STATUSES = ("pass", "fail", "timeout", "error", "not-available")
FAILING = ("fail", "timeout", "error")
JSON_SCHEMA = "rankcheck-validate/2"
# The launcher name the job runner gives a stored-golden-bits check (a check attached to a case, not a case).
STORED_BITS_LAUNCHER = "store"
LOG_TAIL_LINES = 40
LOG_TAIL_BYTES = 64 * 1024
EXIT_OK, EXIT_FAILED, EXIT_NOTHING_RUN, EXIT_UNAVAILABLE, EXIT_INTERRUPTED = 0, 1, 2, 3, 130


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
    phases: dict = field(default_factory=dict)  # seconds per phase, the slowest rank's (harness.phases)
    facts: str | None = None  # the architecture facts file the golden used (harness.arch_facts), None: none needed
    graphs: dict | None = None  # {"mode", "captured", "replays"} of a graph scenario (launchers.verdict.graph_counts)

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"status must be one of {STATUSES}, got {self.status!r}")

    @property
    def is_stored_bits_check(self) -> bool:
        """True for a stored-golden-bits check (a check attached to a case, not a case of its own)."""
        return self.launcher == STORED_BITS_LAUNCHER

    @property
    def case_id(self) -> str:
        """A stable name: family/scenario[world=N,launcher=L(,group=G)]."""
        group = f",group={self.group}" if self.group is not None else ""
        return f"{self.family}/{self.scenario}[world={self.world},launcher={self.launcher}{group}]"


def phase_summary(results: Sequence[CaseResult]) -> str:
    """Each phase's seconds summed over ``results``, largest first, as ``reference 12.3 s  kernel 4.5 s``."""
    totals: dict[str, float] = {}
    for r in results:
        for name, seconds in r.phases.items():
            totals[name] = totals.get(name, 0.0) + float(seconds)
    if not totals:
        return "none recorded"
    return "  ".join(f"{name} {seconds:.1f} s" for name, seconds in sorted(totals.items(), key=lambda kv: -kv[1]))


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


def log_tail(path: str | os.PathLike, lines: int = LOG_TAIL_LINES) -> str:
    """The last ``lines`` lines of the file at ``path`` ("" when it cannot be read)."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(f.tell() - LOG_TAIL_BYTES, 0))
            text = f.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def failing_rank_log(diagnosis: Mapping | None) -> tuple[str, str] | None:
    """(rank, log path) of the rank the diagnosis blames (else its first logged rank); None without logs."""
    logs = (diagnosis or {}).get("logs") or {}
    if not isinstance(logs, Mapping) or not logs:
        return None
    by_rank = {str(rank): str(path) for rank, path in logs.items()}
    blamed = str(diagnosis.get("rank"))
    rank = blamed if blamed in by_rank else next(iter(by_rank))
    return rank, by_rank[rank]


def failure_text(r: CaseResult) -> str:
    """The body of a failing JUnit case: detail, first mismatch, diagnosis, mismatches, the failing rank's log tail."""
    body = r.detail
    if r.first_mismatch and r.first_mismatch != r.detail:
        body += "\nfirst mismatch: " + r.first_mismatch
    if r.diagnosis:
        body += "\n" + json.dumps(r.diagnosis, indent=1, sort_keys=True, default=str)
    if r.mismatches:
        body += "\n" + "\n".join(m if isinstance(m, str) else json.dumps(m, default=str) for m in r.mismatches)
    logged = failing_rank_log(r.diagnosis)
    if logged:
        rank, path = logged
        tail = log_tail(path)
        body += f"\n--- rank {rank} log {path} (last {LOG_TAIL_LINES} lines) ---\n" + (tail or "(no such file)")
    return body


def graph_totals(results: Sequence[CaseResult]) -> dict:
    """Over the cases of graph scenarios: how many there were, graphs captured, replays, and cases per mode."""
    graphed = [r.graphs for r in results if r.graphs and not r.is_stored_bits_check]
    return {"cases": len(graphed), "captured": sum(int(g.get("captured", 0)) for g in graphed),
            "replays": sum(int(g.get("replays", 0)) for g in graphed),
            "not_captured": sum(g.get("mode") == "not-captured" for g in graphed),
            "not_available": sum(g.get("mode") == "not-available" for g in graphed)}


# The order diagnoses are listed in: a hang or a crash first, then other errors, then wrong bits.
DIAGNOSIS_ORDER = ("timeout", "error", "fail")


def diagnoses(results: Sequence[CaseResult]) -> list[dict]:
    """Every failing result's diagnosis, timeouts first: case, group, status, blamed rank (group and global), launch."""
    found = []
    for index, r in enumerate(results):
        d = r.diagnosis
        if r.status not in FAILING or not d:
            continue
        members = d.get("group_ranks") or []
        rank = d.get("rank")
        entry = {"case_id": r.case_id, "group": r.group, "status": r.status, "rank": rank,
                 "global_rank": members[rank] if rank is not None and 0 <= rank < len(members) else rank,
                 "launch": d.get("launch"), "text": d.get("text", "")}
        if getattr(r, "nodes", None):
            entry["nodes"] = [n["node"] for n in r.nodes]
        found.append((DIAGNOSIS_ORDER.index(r.status), index, entry))
    return [entry for _, _, entry in sorted(found, key=lambda t: t[:2])]


def testcase_classname(r: CaseResult) -> str:
    """A JUnit case's classname: ``family.scenario``, under ``group<G>.`` when the case ran in TP group G."""
    base = f"{r.family}.{r.scenario}"
    return base if r.group is None else f"group{r.group}.{base}"


def junit_xml(results: Sequence[CaseResult], *, suite: str, header: str, provenance: Mapping | None = None,
              result: str | None = None) -> str:
    """Render results as a JUnit XML document (one testcase per result); the suite's properties: the result and
    every diagnosis first, then the header, the provenance and the graph totals (``graphs.*``)."""
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
    if result is not None:
        ET.SubElement(props, "property", {"name": "result", "value": result})
    for i, d in enumerate(diagnoses(results)):
        ET.SubElement(props, "property", {"name": f"diagnosis.{i}",
                                          "value": f"{d['status'].upper()} {d['case_id']}: {d['text']}"})
    ET.SubElement(props, "property", {"name": "header", "value": header})
    ET.SubElement(props, "property", {"name": "schema", "value": JSON_SCHEMA})
    for name, value in provenance_facts.flat(provenance or {}, "provenance.").items():
        ET.SubElement(props, "property", {"name": name, "value": value})
    for name, value in graph_totals(results).items():
        ET.SubElement(props, "property", {"name": f"graphs.{name}", "value": str(value)})
    for r in results:
        case = ET.SubElement(ts, "testcase", {
            "classname": testcase_classname(r),
            "name": f"world={r.world},launcher={r.launcher}" + (f",group={r.group}" if r.group is not None else ""),
            "time": f"{r.time_s:.3f}",
        })
        if r.facts:
            ET.SubElement(ET.SubElement(case, "properties"), "property", {"name": "facts", "value": r.facts})
        if r.status == "fail":
            ET.SubElement(case, "failure", {"message": (r.first_mismatch or r.detail)[:500],
                                            "type": "mismatch"}).text = failure_text(r)
        elif r.status in ("error", "timeout"):
            ET.SubElement(case, "error", {"message": r.detail[:500], "type": r.status}).text = failure_text(r)
        elif r.status == "not-available":
            ET.SubElement(case, "skipped", {"message": r.detail[:500]})
        else:
            ET.SubElement(case, "system-out").text = r.detail
    return ET.tostring(root, encoding="unicode", xml_declaration=True)


class Report:
    """Collects results, shows them live, and keeps JUnit/JSON files current after each one."""

    def __init__(self, *, header: str, junit_path: str | os.PathLike | None = None,
                 json_path: str | os.PathLike | None = None, total: int | None = None,
                 stream=None, live: bool | None = None, planned: Mapping[int, int] | None = None,
                 allow_unavailable: bool = False, empty_reason: str = "",
                 provenance: Mapping | None = None) -> None:
        self.header = header
        self.junit_path = junit_path
        self.json_path = json_path
        self.results: list[CaseResult] = []
        self.started = time.time()
        self.planned = dict(planned or {})
        self.total = total if total is not None or planned is None else sum(self.planned.values())
        self.allow_unavailable = allow_unavailable
        self.empty_reason = empty_reason
        self.interrupted = False
        self.aborted = ""  # the exception that ended the run early, in words ("" when none did)
        self.provenance = dict(provenance) if provenance is not None else provenance_facts.collect(self.started)
        self.stream = stream if stream is not None else sys.stdout
        self._live_enabled = self.stream.isatty() if live is None else live
        self._live = None
        self._console = None
        # add/note arrive from the job threads; the list, the view and the files change under one lock
        self._lock = threading.RLock()

    def __enter__(self) -> "Report":
        from rich.console import Console  # noqa: PLC0415 - only the report draws

        with self._lock:
            self._console = Console(file=self.stream, force_terminal=self._live_enabled or None,
                                    highlight=False, width=None if self._live_enabled else 200)
            self._console.print(self.header, markup=False)
            if self._live_enabled:
                from harness.live import LiveView  # noqa: PLC0415

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
            self._write_files()
            self._console.print(self.footer(), markup=False)

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
                "result": result, "exit_code": code}

    @property
    def ok(self) -> bool:
        """True when no result failed, timed out unexpectedly or errored."""
        return not any(r.status in FAILING for r in self.results)

    def verdict(self) -> tuple[str, int]:
        """(the footer's result words, the exit code): the one place that decides both."""
        cases = self.cases()
        failed = sum(r.status in FAILING for r in self.results)
        if self.interrupted:
            planned = self.total if self.total is not None else "?"
            also = f"; {failed} failed" if failed else ""
            return f"INTERRUPTED ({len(cases)} of {planned} run{also})", EXIT_INTERRUPTED
        if self.aborted:
            return f"ABORTED ({self.aborted[:300]})", EXIT_FAILED
        if failed:
            return "FAILED", EXIT_FAILED
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
            f"# Result : {s['result']}  ({s['wall_s']:.1f} s)"
        )

    def exit_code(self) -> int:
        """The exit code of the run (``verdict``): 0 OK, 1 failed, 2 nothing run, 3 nothing available, 130 interrupted."""
        return self.verdict()[1]

    def _write_files(self) -> None:
        """Rewrite the JUnit XML and JSON outputs (atomically) from the results so far."""
        with self._lock:
            if self.junit_path:
                atomic_write(self.junit_path, junit_xml(self.results, suite="rankcheck", header=self.header,
                                                        provenance=self.provenance, result=self.verdict()[0]))
            if self.json_path:
                # "diagnoses" sorts first among the keys: what went wrong is on top of the file
                doc = {"diagnoses": diagnoses(self.results), "schema": JSON_SCHEMA, "header": self.header,
                       "provenance": self.provenance, "summary": self.summary(),
                       "results": [asdict(r) | {"case_id": r.case_id} for r in self.results]}
                atomic_write(self.json_path, json.dumps(doc, indent=1, sort_keys=True, default=str))
