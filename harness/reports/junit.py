"""JUnit XML for CI, valid against the ``junit-10.xsd`` schema that Jenkins' xUnit plugin and pytest check.

The document is ``<testsuites>`` holding the suite ``rankcheck`` (one
testcase per case) and, when the run checked stored golden bits, the suite
``rankcheck:stored-bits`` (one testcase per check: a check attached to a
case, never counted among the cases, so ``tests`` counts the cases).

Each testcase is unique by its ``name``, the case id
(``family/scenario[world=N,launcher=L(,group=G)]``: scenario, world and
launcher), and its ``classname`` is ``family.scenario``, under
``group<G>.`` when the case ran in TP group G, so a CI page lists every
group's cases under it. A failing case carries ``<failure type="mismatch">``
(wrong bits, or an expected error/timeout that did not happen) or ``<error>``
of type ``timeout`` (an unexpected hang), ``crash`` (a rank ended without a
result: an exit, a signal) or ``error`` (an exception); its text holds the
first mismatch and, where the diagnosis names each rank's log
(``diagnosis["logs"]``: rank -> path), the tail of the log of the rank that
failed. The schema allows no properties on a testcase, so a case's
architecture-facts file is a line of its ``system-out`` and the suite's
``facts`` property lists every facts file the run used.

Each suite carries ``timestamp`` (the run's start, UTC) and ``hostname``; its
properties: ``result``, then ``diagnosis.<i>`` (``harness.reports.diagnoses``),
``exit_code`` (the exit code the run returned with that result), the header, the JSON schema name, the run's provenance and the graph totals
(``graphs.*``).
"""

from __future__ import annotations

import json
import os
import socket
import time
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


def failure_type(r: CaseResult) -> str:
    """The JUnit type of a failing result: ``mismatch``, ``timeout``, ``crash`` (a rank ended without a result) or ``error``."""
    if r.status == "fail":
        return "mismatch"
    if r.status == "timeout":
        return "timeout"
    crashed = (r.diagnosis or {}).get("cause") == "crash" or any(
        words in r.detail for words in ("ended without a result", "ended early"))
    return "crash" if crashed else "error"


def suite_element(parent: ET.Element, name: str, results: Sequence[CaseResult], *, timestamp: str,
                  hostname: str) -> ET.Element:
    """A ``<testsuite>`` under ``parent`` with the counts of ``results``, its start time and host."""
    counts = {s: sum(r.status == s for r in results) for s in STATUSES}
    return ET.SubElement(parent, "testsuite", {
        "name": name,
        "tests": str(len(results)),
        "failures": str(counts["fail"]),
        "errors": str(counts["error"] + counts["timeout"]),
        "skipped": str(counts["not-available"]),
        "time": f"{sum(r.time_s for r in results):.3f}",
        "timestamp": timestamp,
        "hostname": hostname,
    })


def add_testcase(suite: ET.Element, r: CaseResult) -> None:
    """One ``<testcase>`` for ``r``: its failure, error or skip, and what it printed (detail, facts file)."""
    case = ET.SubElement(suite, "testcase", {"classname": testcase_classname(r), "name": r.case_id,
                                             "time": f"{r.time_s:.3f}"})
    if r.status == "fail":
        ET.SubElement(case, "failure", {"message": (r.first_mismatch or r.detail)[:500],
                                        "type": failure_type(r)}).text = failure_text(r)
    elif r.status in ("error", "timeout"):
        ET.SubElement(case, "error", {"message": r.detail[:500], "type": failure_type(r)}).text = failure_text(r)
    elif r.status == "not-available":
        ET.SubElement(case, "skipped", {"message": r.detail[:500]})
    out = [r.detail] if r.status == "pass" else []
    if r.facts:
        out.append(f"facts: {r.facts}")
    if out:
        ET.SubElement(case, "system-out").text = "\n".join(out)


def suite_properties(suite: ET.Element, results: Sequence[CaseResult], *, header: str, provenance: Mapping,
                     verdict: tuple[str, int] | None) -> None:
    """The suite's properties: the result and every diagnosis first, then the exit code, header, schema, facts files, provenance and
    the graph totals (``graphs.*``)."""
    props = ET.SubElement(suite, "properties")
    if verdict is not None:
        ET.SubElement(props, "property", {"name": "result", "value": verdict[0]})
    for i, d in enumerate(diagnoses(results)):
        ET.SubElement(props, "property", {"name": f"diagnosis.{i}",
                                          "value": f"{d['status'].upper()} {d['case_id']}: {d['text']}"})
    if verdict is not None:
        ET.SubElement(props, "property", {"name": "exit_code", "value": str(verdict[1])})
    ET.SubElement(props, "property", {"name": "header", "value": header})
    ET.SubElement(props, "property", {"name": "schema", "value": JSON_SCHEMA})
    facts = sorted({r.facts for r in results if r.facts})
    if facts:
        ET.SubElement(props, "property", {"name": "facts", "value": ", ".join(facts)})
    for name, value in provenance_facts.flat(provenance, "provenance.").items():
        ET.SubElement(props, "property", {"name": name, "value": value})
    for name, value in graph_totals(results).items():
        ET.SubElement(props, "property", {"name": f"graphs.{name}", "value": str(value)})


def junit_xml(results: Sequence[CaseResult], *, suite: str, header: str, provenance: Mapping | None = None,
              verdict: tuple[str, int] | None = None) -> str:
    """Render results as a JUnit XML document: the cases' suite (with the result, diagnoses and provenance as its
    properties) and, when there are any, the stored-bits checks' suite ``<suite>:stored-bits``."""
    provenance = provenance or {}
    timestamp = str(provenance.get("started") or provenance_facts.utc_iso(time.time())).removesuffix("Z")
    hostname = str(provenance.get("host") or (provenance.get("merge") or {}).get("host") or socket.gethostname())
    cases = [r for r in results if not r.is_stored_bits_check]
    checks = [r for r in results if r.is_stored_bits_check]
    root = ET.Element("testsuites", {"name": suite, "tests": str(len(results)),
                                     "failures": str(sum(r.status == "fail" for r in results)),
                                     "errors": str(sum(r.status in ("error", "timeout") for r in results)),
                                     "time": f"{sum(r.time_s for r in results):.3f}"})
    ts = suite_element(root, suite, cases, timestamp=timestamp, hostname=hostname)
    suite_properties(ts, results, header=header, provenance=provenance, verdict=verdict)
    for r in cases:
        add_testcase(ts, r)
    if checks:
        stored = suite_element(root, f"{suite}:stored-bits", checks, timestamp=timestamp, hostname=hostname)
        for r in checks:
            add_testcase(stored, r)
    return ET.tostring(root, encoding="unicode", xml_declaration=True)
