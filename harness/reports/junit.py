"""JUnit XML for CI: one testcase per result, the run's result and every diagnosis first among the suite's properties.

With TP groups each case's classname starts with its group
(``group5.markov_sharded.basic``), so a CI page lists every group's cases
under it. A failure carries the first mismatch and, where the diagnosis names
each rank's log (``diagnosis["logs"]``: rank -> path), the tail of the log of
the rank that failed. The suite's properties: ``result``, then
``diagnosis.<i>`` (``harness.reports.diagnoses``), the header, the JSON
schema name and the run's provenance.
"""

from __future__ import annotations

import json
import os
import xml.etree.ElementTree as ET
from typing import Mapping, Sequence

from harness.reports import provenance as provenance_facts
from harness.reports.diagnoses import diagnoses
from harness.wire.case_result import JSON_SCHEMA, STATUSES, CaseResult, graph_totals

LOG_TAIL_LINES = 40
LOG_TAIL_BYTES = 64 * 1024


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
