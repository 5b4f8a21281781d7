"""Reading one case's files from the run directory: per-rank results and progress, per TP group.

The worker writes, per case and group, ``cases/<family>.<name>/w<tp>[.g<g>]/``
with ``rank<k>.result.json`` and ``rank<k>.progress.jsonl`` (``k`` the
global rank; ``harness.wire.case_files``). This module reads them back for one
``CaseId`` keyed by *group* rank (the rank numbering scenarios use), the
results as ``harness.wire.rank_result.RankResult``, and says whether a group is
complete.

The job runner polls these files several times a second while a job runs,
so a poll reads only the ranks it names (``ranks``: the group's ranks on
this node) and never lists a directory: with a run directory shared by the
nodes of a 72-rank job, a node that listed or read every rank's files would
make each poll cost the world, and the job's polls the world squared.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from harness.wire.case_files import CaseId, case_dir, result_path
from harness.wire.progress import progress_path, read_progress
from harness.wire.rank_result import RankResult
from harness.wire.tp_groups import in_group


@dataclass
class CaseEnd:
    """How a case ended: completed (every rank wrote its result), or the job ended under it."""

    completed: bool
    timed_out: bool = False
    returncode: int | None = None
    # the job out of time: who held the GPU at its deadline, in one sentence (harness.launch.gpu_neighbours.summary)
    gpu_processes: str | None = None


def read_results(run_dir: str | Path, case: CaseId, ranks: Iterable[int] | None = None) -> dict[int, RankResult]:
    """The result files present for the group's ``ranks`` (global; default every rank of the group), keyed by group rank."""
    directory = case.directory(run_dir)
    wanted = None if ranks is None else set(ranks)
    out: dict[int, RankResult] = {}
    for g_rank, rank in enumerate(case.ranks()):
        if wanted is not None and rank not in wanted:
            continue
        try:
            out[g_rank] = RankResult.read(result_path(directory, rank))
        except (FileNotFoundError, json.JSONDecodeError):
            continue
    return out


def read_group_progress(run_dir: str | Path, case: CaseId) -> dict[int, list[dict]]:
    """Every group rank's progress records."""
    directory = case.directory(run_dir)
    return {g_rank: read_progress(progress_path(directory, rank)) for g_rank, rank in enumerate(case.ranks())}


def clear_rank_files(run_dir: str | Path, cases: list, tp: int, groups: list[int | None], ranks) -> int:
    """Remove the result, progress and diagnostic files of ``ranks`` for ``cases`` before a job runs them; return how many.

    A run directory may be reused (``--run-dir``, to keep its reference cache):
    files an earlier run left would otherwise be read as this run's, a case
    taken as started or finished before its job wrote anything. Only this
    node's ranks are cleared, so nodes sharing a directory never remove each
    other's files; in each group's directory only the group's own ranks."""
    removed = 0
    for case in cases:
        for group in groups:
            directory = case_dir(run_dir, case.family, case.name, tp, group)
            if not directory.is_dir():
                continue
            for rank in ranks:
                if not in_group(rank, tp, group):
                    continue
                for path in (result_path(directory, rank), progress_path(directory, rank),
                             directory / f"rank{rank}.diag.json"):
                    try:
                        path.unlink()
                        removed += 1
                    except FileNotFoundError:
                        pass
    return removed


def case_started(run_dir: str | Path, case: CaseId, ranks: Iterable[int]) -> bool:
    """Whether any of the group's ``ranks`` (global) has written a progress record of the case."""
    directory = case.directory(run_dir)
    return any(progress_path(directory, rank).exists() for rank in ranks)


@dataclass
class Activity:
    """The latest signs of life of a case's ranks."""

    newest: float | None = None
    begun: bool = False
    referencing: bool = False


def latest_activity(run_dir: str | Path, case: CaseId, ranks: Iterable[int]) -> Activity:
    """Wall time of the newest progress record (or heartbeat) of the group's ``ranks`` in the case, whether any
    of them has begun a launch, and whether any one's last record is ``reference`` (computing or awaiting a reference)."""
    act = Activity()
    directory = case.directory(run_dir)
    for rank in ranks:
        path = progress_path(directory, rank)
        try:
            mtime = path.stat().st_mtime
        except FileNotFoundError:
            continue
        act.newest = mtime if act.newest is None else max(act.newest, mtime)
        recs = read_progress(path)
        act.begun = act.begun or any(r.get("event") == "begin" for r in recs)
        act.referencing = act.referencing or bool(recs and recs[-1].get("event") == "reference")
    return act
