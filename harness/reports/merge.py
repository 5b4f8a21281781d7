"""``harness merge-reports``: one JUnit and one JSON report for a job whose nodes each wrote their own.

On several nodes every node's harness writes its own report files, with its
node rank in the names (``X.node3.json``, ``X.node3.xml``;
``Rendezvous.node_path``), so nodes writing to one shared directory never
overwrite each other. A node's report holds the verdicts of the TP groups
that have ranks on that node, and its provenance names the node
(``provenance["node"]``: rank, node count, rendezvous id; ``Rendezvous.describe``).

This module reads the per-node JSON reports (files, glob patterns or
directories) and writes one report for the job through the same
``harness.reports.report.Report`` a single run uses, so the files have the same
format and the exit code follows the same rule (1 on any fail, timeout or
error; 2 when no case ran; 3 when every case was not available; else 0).

A case is identified by (family, scenario, world, launcher, group). Where a
TP group lies on one node (the nightly shape: TP size = GPUs per node) each
case arrives once. A group spanning nodes arrives once from each of them,
each verdict judged on that node's ranks only; they become one verdict: the
worst status (fail, timeout, error, not-available, pass, in that order), the
mismatch counts summed, and the detail of every node that reported it. Every
merged result keeps its provenance in ``nodes`` (node rank, its status, the
file it came from), and the merged report's provenance holds every node's.

What would make a merged report lie is refused or reported, never hidden:
two reports of one node, or reports of different jobs (rendezvous id, node
count), are an error (exit 2) naming the files; a node of the job with no
report, and a case some node reported that another node has no verdict for
(a node that died or was interrupted part way), each become an ``error``
result, so the job is not green; so does a node report that still says
``running, not finished`` (its harness was killed or crashed before its
last write: ``killed-or-crashed``). An error of a node's own job (family
``job``: its agent stuck in its shutdown, ``harness.launch.jobs``) is that
node's alone and not expected of the others.
"""

from __future__ import annotations

import dataclasses
import functools
import glob
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Sequence

from harness.reports import provenance as provenance_facts
from harness.reports.report import RUNNING, Report
from harness.wire.case_result import FAILING, STORED_BITS_LAUNCHER, CaseResult

# Worst first: the status a case gets when nodes disagree about it.
STATUS_ORDER = FAILING + ("not-available", "pass")
# A merged case keeps at most this many mismatch lines over its nodes (as a single run keeps per case).
MISMATCHES_KEPT = 8
CASE_FIELDS = {f.name for f in dataclasses.fields(CaseResult)}


@dataclass
class MergedResult(CaseResult):
    """A verdict of the job: a ``CaseResult`` plus which nodes reported it (node, status, source file)."""

    nodes: list = field(default_factory=list)


@dataclass
class NodeReport:
    """One node's JSON report as read from disk."""

    path: str
    doc: dict

    @property
    def node(self) -> dict:
        """The node facts the report's provenance carries (rank 0 of 1 for a report of a one-node run)."""
        return (self.doc.get("provenance") or {}).get("node") or {"rank": 0, "nnodes": 1}

    @property
    def rank(self) -> int:
        """The node rank that wrote the report."""
        return int(self.node["rank"])

    @property
    def summary(self) -> dict:
        """The report's summary (counts, planned cases, whether it was interrupted, its result)."""
        return self.doc.get("summary") or {}

    @functools.cached_property
    def results(self) -> list[CaseResult]:
        """The report's results as ``CaseResult`` objects (keys the dataclass does not know are dropped)."""
        return [CaseResult(**{k: v for k, v in r.items() if k in CASE_FIELDS}) for r in self.doc.get("results", [])]


class MergeError(ValueError):
    """The inputs cannot be merged into one honest report (the message names the files)."""


def input_paths(inputs: Sequence[str], exclude: Iterable[str] = ()) -> list[str]:
    """The JSON files the inputs name: files as given, glob patterns expanded, ``*.json`` inside directories.

    ``exclude`` (the output paths) is left out, so a directory that will hold
    the merged report can be given as the input."""
    excluded = {Path(p).resolve() for p in exclude if p}
    found: list[Path] = []
    for item in inputs:
        path = Path(item)
        if path.is_dir():
            matches = sorted(path.glob("*.json"))
        elif path.exists():
            matches = [path]
        else:
            matches = sorted(Path(p) for p in glob.glob(item))
        if not matches:
            raise MergeError(f"{item!r} names no report file")
        found.extend(m for m in matches if m.resolve() not in excluded)
    unique = list(dict.fromkeys(p.resolve() for p in found))  # one file named twice is read once
    return [str(p) for p in unique]


def read_reports(paths: Sequence[str]) -> list[NodeReport]:
    """Every per-node report of ``paths``, checked to be one job's, one report per node, ordered by node rank."""
    reports = []
    for path in paths:
        try:
            doc = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            raise MergeError(f"{path}: not a readable JSON report ({exc})") from exc
        if not isinstance(doc, dict) or not isinstance(doc.get("results"), list):
            raise MergeError(f"{path}: not a rankcheck report (no results list)")
        if "merged_from" in (doc.get("provenance") or {}):
            continue  # an earlier merged report lying beside the node reports is not a node's
        reports.append(NodeReport(path, doc))
    if not reports:
        raise MergeError(f"no node report among {list(paths)}")
    by_rank: dict[int, NodeReport] = {}
    for rep in reports:
        if rep.rank in by_rank:
            raise MergeError(f"two reports of node {rep.rank}: {by_rank[rep.rank].path} and {rep.path}")
        by_rank[rep.rank] = rep
    jobs = {(rep.node.get("nnodes"), rep.node.get("rdzv_id")) for rep in reports}
    if len(jobs) > 1:
        seen = "; ".join(f"{rep.path}: nnodes {rep.node.get('nnodes')}, rdzv id {rep.node.get('rdzv_id')}"
                         for rep in reports)
        raise MergeError(f"the reports are of different jobs ({seen})")
    return [by_rank[k] for k in sorted(by_rank)]


def case_key(r: CaseResult) -> tuple:
    """The identity of a verdict in the job: (family, scenario, world, launcher, group)."""
    return (r.family, r.scenario, r.world, r.launcher, r.group)


def merge_verdicts(verdicts: Sequence[tuple[int, str, CaseResult]]) -> MergedResult:
    """One verdict from each node's verdict of one case ((node, source, result) triples, node order)."""
    nodes = [{"node": node, "status": r.status, "source": source} for node, source, r in verdicts]
    merged = verdicts[0][2]
    if len(verdicts) > 1:
        _, _, worst = min(verdicts, key=lambda v: (STATUS_ORDER.index(v[2].status), v[0]))
        merged = dataclasses.replace(
            worst, detail="; ".join(f"node {node} ({r.status}): {r.first_mismatch or r.detail}"
                                    for node, _, r in verdicts),
            mismatches=[m for _, _, r in verdicts for m in r.mismatches][:MISMATCHES_KEPT],
            mismatch_count=sum(r.mismatch_count for _, _, r in verdicts),
            max_ulps=max(r.max_ulps for _, _, r in verdicts), time_s=max(r.time_s for _, _, r in verdicts))
    return MergedResult(**dataclasses.asdict(merged), nodes=nodes)


def absent_node_results(reports: Sequence[NodeReport]) -> list[MergedResult]:
    """An ``error`` result for every node of the job without a report, and for every case a node has no verdict of."""
    nnodes = int(reports[0].node.get("nnodes") or 1)
    present = {rep.rank for rep in reports}
    out = [MergedResult("job", f"node{k}:report", 0, "-", "error", expected="a report from every node",
                        detail=f"node {k} of {nnodes}: no report among the inputs (the node did not run, or its "
                               f"report is elsewhere)") for k in range(nnodes) if k not in present]
    out += [MergedResult("job", f"node{rep.rank}:report", 0, "-", "error", expected="a finished report from every node",
                         detail=f"node {rep.rank}: killed-or-crashed (its report {rep.path} still says "
                                f"{RUNNING!r}: the harness ended before its last write)")
            for rep in reports if rep.summary.get("ended") == RUNNING]
    # Every node plans the same cases; each reports them for its own groups (stored-bits checks on one node only,
    # a node's own job errors, family "job", on that node only: harness.launch.jobs.stuck_shutdown_result).
    planned = {rep.rank: {case_key(r)[:4] for r in rep.results
                          if r.launcher != STORED_BITS_LAUNCHER and r.family != "job"}
               for rep in reports}
    everywhere = set().union(*planned.values())
    for rep in reports:
        for family, scenario, world, launcher in sorted(everywhere - planned[rep.rank], key=str):
            out.append(MergedResult(family, scenario, world, launcher, "error", expected="a verdict from every node",
                                    detail=f"node {rep.rank} has no verdict for this case, which other nodes report "
                                           f"(its report {rep.path} ends early)",
                                    nodes=[{"node": rep.rank, "status": "absent", "source": rep.path}]))
    return out


def merge(reports: Sequence[NodeReport]) -> list[MergedResult]:
    """The job's verdicts: every case once per (family, scenario, world, launcher, group), in first-seen order."""
    by_case: dict[tuple, list[tuple[int, str, CaseResult]]] = {}
    for rep in reports:
        for r in rep.results:
            by_case.setdefault(case_key(r), []).append((rep.rank, rep.path, r))
    return [merge_verdicts(v) for v in by_case.values()] + absent_node_results(reports)


def merged_header(reports: Sequence[NodeReport]) -> str:
    """The merged report's header: what was merged, then the header of the lowest node's run."""
    node = reports[0].node
    lines = [f"# rankcheck merge-reports: {len(reports)} node report(s) of {node.get('nnodes', 1)} node(s), "
             f"rendezvous id {node.get('rdzv_id')}"]
    lines += [f"#   node {rep.rank}: {rep.path} (its result: {rep.summary.get('result', '?')})"
              for rep in reports]
    return "\n".join(lines + [reports[0].doc.get("header", "")])


def planned_total(reports: Sequence[NodeReport], results: Sequence[MergedResult]) -> int | None:
    """The cases the job planned: the nodes' planned counts summed where no case came from two nodes, else None.

    Where a group spans nodes each of them plans it, so the sum would count
    it more than once; no total is better than a wrong one."""
    counts = [rep.summary.get("planned") for rep in reports]
    shared = any(len(r.nodes) > 1 for r in results)
    return None if shared or None in counts else sum(counts)


def run_merge(inputs: Sequence[str], *, junit: str | None, json_path: str | None, allow_unavailable: bool = False,
              stream=None) -> int:
    """Merge the per-node reports ``inputs`` into ``junit`` and ``json_path``; return the job's exit code."""
    reports = read_reports(input_paths(inputs, exclude=[junit, json_path]))
    results = merge(reports)
    prov = {"merged_from": [rep.path for rep in reports], "merge": provenance_facts.collect(time.time()),
            "nodes": {str(rep.rank): rep.doc.get("provenance") for rep in reports}}
    reasons = {rep.summary.get("empty_reason") for rep in reports} - {None, ""}
    # a file one node refused keeps the job's verdict from OK (each node reads the same scenario root)
    refused = list(dict.fromkeys(f for rep in reports for f in rep.summary.get("refused_inputs") or ()))
    with Report(header=merged_header(reports), junit_path=junit, json_path=json_path, stream=stream, live=False,
                total=planned_total(reports, results), allow_unavailable=allow_unavailable,
                empty_reason="; ".join(sorted(reasons)), refused_inputs=refused, provenance=prov) as report:
        # a node cut short (an interrupt, the scheduler's time limit) leaves the job's verdict cut short too
        report.interrupted = any(rep.summary.get("interrupted") for rep in reports)
        report.results.extend(results)  # one write at the end, not one per case
        for r in results:
            if r.status != "pass":
                report.note(f"{r.status.upper():<13} {r.case_id}  {r.first_mismatch or r.detail}")
    return report.exit_code()


__all__ = ["MergeError", "MergedResult", "NodeReport", "input_paths", "merge", "merge_verdicts", "read_reports",
           "run_merge"]
