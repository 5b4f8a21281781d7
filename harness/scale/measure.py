"""The costs of one world's nightly run, from the files its nodes left: start-up marks, progress records, timing files.

Per job (every node runs the same jobs; job ``i`` of one node meets job
``i`` of the others), with ``t0`` the job's start on the last node to begin
it (a node whose last job ended early begins the next one sooner and waits
for the others: ``nodes_started_within_s``):

- ``agents_s``: ``t0`` to the first worker process's start (the agents
  start, meet in c10d and spawn their workers);
- ``import_s``: the longest a rank took from its start to its code running
  (the interpreter and the imports, torch's above all; every rank imports at
  once, so this is the host's cores shared by the processes);
- ``rendezvous_s``: ``t0`` to the last rank having joined the world's
  process group, everything before it included;
- ``groups_s`` and ``setup_s``: from the last rank joining to the last TP
  group made, and to the last rank's first case started;
- per case and group: the wall time from its first rank's ``start`` record
  to its last rank's ``done``, less the slowest rank's kernel, reference and
  comparison seconds (``overhead_s``: inputs, construction, the progress
  records, the agreement exchange), and from the last ``done`` to the verdict
  (``verdict_latency_s``, the job runner's polling);
- ``teardown_s``: a node's last ``done`` record to its job's tree being gone,
  and ``linger_s``: for the nodes whose agent the job runner ended after
  every case there was settled (it waited in torchrun's exit barrier), from
  the node's last verdict to the end;
- ``hang_named_after_s``: from the planted hang's progress record to the
  bad group's verdict.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass
from pathlib import Path

from harness.wire.progress import read_progress
from harness.wire.tp_groups import group_of

WORK_PHASES = ("kernel", "reference", "compare")


def _load(path: Path) -> dict | None:
    """A JSON file, or None when it is missing or torn."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None


@dataclass
class RankCase:
    """One rank's files of one case on one node: its progress records and its result (None: it wrote none)."""

    node: int
    case: str  # family/name
    group: int | None
    records: list
    result: dict | None


def rank_files(run_dir: Path, node: int) -> list[RankCase]:
    """Every rank's progress records (and result, where it wrote one) of every case in node ``node``'s run directory."""
    out = []
    for path in sorted(run_dir.glob("cases/*/*/rank*.progress.jsonl")):
        family, _, name = path.parent.parent.name.partition(".")
        _, _, group = path.parent.name.partition(".g")
        result = _load(path.with_name(path.name.replace(".progress.jsonl", ".result.json")))
        out.append(RankCase(node, f"{family}/{name}", int(group) if group else None, read_progress(path), result))
    return out


def job_of(run_dir: Path, node_groups: list) -> dict[tuple[str, int | None], int]:
    """(case, group) -> the last job of a node's run directory that ran it (its job files list the cases and groups)."""
    owner: dict[tuple[str, int | None], int] = {}
    jobs = [(doc["job"], doc) for path in run_dir.glob("jobs/job*.json") if (doc := _load(path)) and "job" in doc]
    for index, doc in sorted(jobs, key=lambda item: item[0]):
        for spec in doc["cases"]:
            for group in spec.get("groups") or node_groups:
                owner[(f"{spec['family']}/{spec['name']}", group)] = index
    return owner


def _event_time(records: list[dict], event: str) -> float | None:
    """The wall time of the first record of ``event`` (None when there is none)."""
    return next((float(r["t"]) for r in records if r.get("event") == event), None)


def _spread(values: list[float]) -> dict:
    """Median and max of ``values`` (None when empty)."""
    return {"median": statistics.median(values) if values else None, "max": max(values) if values else None}


def job_costs(index: int, timings: list[dict], ranks: list[RankCase]) -> dict:
    """The costs of job ``index`` from every node's timing file of it and every rank's files of the job's cases."""
    first_start = min(t["started"] for t in timings)
    t0 = max(t["started"] for t in timings)  # the rendezvous cannot end before the last node has begun the job
    marks = [(r.result["startup"], _event_time(r.records, "start")) for r in ranks
             if r.result and r.result.get("startup")]
    costs: dict = {"job": index, "wall_s": max(t["ended"] for t in timings) - first_start,
                   "nodes_started_within_s": t0 - first_start, "ranks_with_marks": len(marks)}
    if marks and all(k in m for m, _ in marks for k in ("process", "worker", "joined", "grouped")):
        joined = max(m["joined"] for m, _ in marks)
        firsts = [first for _, first in marks if first is not None]
        costs.update(agents_s=min(m["process"] for m, _ in marks) - t0,
                     import_s=max(m["worker"] - m["process"] for m, _ in marks),
                     rendezvous_s=joined - t0, groups_s=max(m["grouped"] for m, _ in marks) - joined,
                     setup_s=max(firsts) - joined if firsts else None)
    verdicts = {(v["case"], v["group"]): v for t in timings for v in t["verdicts"]}
    by_case: dict = {}
    for r in ranks:
        by_case.setdefault((r.case, r.group), []).append(r)
    overhead, latency = [], []
    for key, members in sorted(by_case.items(), key=str):
        starts = [t for r in members if (t := _event_time(r.records, "start")) is not None]
        dones = [t for r in members if (t := _event_time(r.records, "done")) is not None]
        if len(dones) < len(members) or not starts or not all(r.result for r in members):
            continue  # a rank that never finished (the hung group): no overhead to speak of
        work = max(sum(float((r.result.get("phases") or {}).get(p, 0.0)) for p in WORK_PHASES) for r in members)
        overhead.append(max(dones) - min(starts) - work)
        if key in verdicts:
            latency.append(verdicts[key]["at"] - max(dones))
    costs.update(overhead_s=_spread(overhead), verdict_latency_s=_spread(latency), cases_measured=len(overhead))
    teardown, linger = [], []
    for t in timings:
        given = t["verdicts"]
        # ended on time with every verdict given and none of its groups out of time: it waited for other nodes
        lingered = t["timed_out"] and given and not any(v.get("expired") for v in given)
        dones = [done for r in ranks if r.node == t["node"] and (done := _event_time(r.records, "done")) is not None]
        if lingered:
            linger.append(t["ended"] - max(v["at"] for v in given))
        if dones:
            teardown.append(t["ended"] - max(dones))
    costs.update(teardown_s=_spread(teardown), linger_s=_spread(linger))
    hangs = [t for r in ranks if (t := _event_time(r.records, "hang")) is not None]
    bad = [v for v in verdicts.values() if v.get("expired")]
    if hangs and bad:
        costs["hang_named_after_s"] = max(v["at"] for v in bad) - min(hangs)
        costs["bad_groups"] = sorted({v["group"] for v in bad}, key=str)
    return costs


def verdict_counts(merged_json: Path) -> dict:
    """From the merged report: cases per status, the groups whose every case passed, the groups with a failing case,
    and the first diagnosis (what the report shows on top)."""
    doc = _load(merged_json)
    if doc is None:
        return {"error": f"no merged report at {merged_json}"}
    cases = [r for r in doc["results"] if r["launcher"] != "store"]
    by_group: dict = {}
    for r in cases:
        by_group.setdefault(r["group"], []).append(r["status"])
    failing = sorted((g for g, s in by_group.items() if any(x != "pass" for x in s)), key=str)
    return {"statuses": {s: sum(r["status"] == s for r in cases) for s in sorted({r["status"] for r in cases})},
            "groups_all_pass": sum(all(x == "pass" for x in s) for s in by_group.values()),
            "groups_failing": failing, "exit_code": doc["summary"]["exit_code"],
            "top_diagnosis": (doc.get("diagnoses") or [None])[0]}


def world_costs(record: dict) -> dict:
    """Every job's costs of one world's run (``nightly.run_world``'s record), its verdicts and its memory."""
    work = Path(record["work"])
    shape = record["shape"]
    timings: dict[int, list[dict]] = {}
    by_job: dict[int, list[RankCase]] = {}
    for node in range(shape["nodes"]):
        run_dir = work / f"run{node}"
        for path in sorted(run_dir.glob("timing/job*.json")):
            doc = _load(path)
            if doc is not None:
                timings.setdefault(int(doc["job"]), []).append(doc)
        per_node = shape["world"] // shape["nodes"]
        ranks = range(node * per_node, (node + 1) * per_node)
        # in rank order, each once: the node's groups ([None] when one group spans the world)
        groups = list(dict.fromkeys(group_of(rank, shape["world"], shape["tp"]) for rank in ranks))
        owner = job_of(run_dir, groups)
        for r in rank_files(run_dir, node):
            if (r.case, r.group) in owner:
                by_job.setdefault(owner[(r.case, r.group)], []).append(r)
    jobs = [job_costs(i, timings[i], by_job.get(i, [])) for i in sorted(timings)]
    return {"world": shape["world"], "shape": shape, "jobs": jobs,
            "verdicts": verdict_counts(Path(record["merged"]["json"])), "memory": record["memory"],
            "agents": record["agents"], "processes_left": record["processes_left"]}


__all__ = ["RankCase", "job_costs", "job_of", "rank_files", "verdict_counts", "world_costs"]
