"""One TP group's way through a job: the case it is in, that case's clock, and whether its time is up.

With ``--tp T`` a job of ``world`` ranks runs ``world / T`` TP groups side by
side, each on its own ranks, its own collectives and its own case files
(``<case>/w<T>.g<g>/``). Nothing makes the groups wait for each other, so
each keeps its own place in the job's cases and its own clock
(``GroupRun``): a group's case is settled as soon as *its* ranks have
written their results, and its next case starts its clock then. A hang in
one group therefore runs out that group's time only; the groups that
finished keep their verdicts, judged from their own files.

The clock of a group's case, as the job runner has always kept it for the
job: until the group's first progress record the startup allowance (its
first case only), then the case's budget (``JobSettings``: the per-launch
deadline times the launches plus a per-case allowance), less the time any
of its ranks spends on an unsharded reference with a fresh heartbeat; and a
group whose newest record is older than a launch's deadline (plus the
allowance before its first launch) has stalled. ``GroupRun.time_up`` says
which of these ran out, in words ("" while none has).

A node reads only the files of its own ranks of a group (``ranks``); the
group's other ranks (``members``) run on other nodes.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from harness.wire.case_files import CaseId
from harness.families.catalog import Case
from harness.launch import records
from harness.wire.rank_result import RankResult

# A reference heartbeat older than this no longer stops the case clock (the worker beats every 5 s).
HEARTBEAT_STALE_S = 30.0


def case_budget(case: Case, per_launch_s: float | None, case_allowance_s: float) -> float:
    """The seconds a case may take once it has started: a deadline per launch plus the per-case allowance."""
    return case.per_launch_s(per_launch_s) * max(case.launches, 1) + case_allowance_s


@dataclass
class GroupRun:
    """One TP group's cases in a job, the case it is in, since when, and why its time ran out."""

    group: int | None
    members: tuple[int, ...]  # every global rank of the group
    ranks: tuple[int, ...]  # the members whose files this node reads (its own)
    cases: list[Case]  # the job's cases this group runs, in job order
    tp: int  # the TP size (ranks per group)
    world: int  # the job's rank count
    position: int = 0
    started: float | None = None  # time.monotonic() when the current case began (None: the first has not)
    paused: float = 0.0  # seconds of the current case spent on references
    expired: str = ""  # why the group's time ran out ("" while it has not)
    abandoned: bool = False  # a rank gave the job up after an unexpected error in a settled case

    @property
    def current(self) -> Case | None:
        """The case the group is in (or about to begin); None when it has settled every case."""
        return self.cases[self.position] if self.position < len(self.cases) else None

    @property
    def rest(self) -> list[Case]:
        """The cases from the current one on."""
        return self.cases[self.position:]

    def advance(self, now: float) -> None:
        """Settle the current case at monotonic time ``now``: the next one's clock starts."""
        self.position += 1
        self.started, self.paused = now, 0.0

    def case_id(self, case: Case | None = None) -> CaseId:
        """The identity of ``case`` (default the current one) as this group runs it."""
        case = case or self.current
        return CaseId(case.family, case.name, self.tp, self.group, self.world)

    def results(self, run_dir: Path, case: Case | None = None) -> dict[int, RankResult]:
        """The result files of this node's ranks of the group for ``case`` (default the current one), by group rank."""
        return records.read_results(run_dir, self.case_id(case), self.ranks)

    def complete(self, run_dir: Path) -> bool:
        """Whether every rank of the group on this node has written its result of the current case."""
        return len(self.results(run_dir)) >= len(self.ranks)

    def has_begun(self, run_dir: Path, case: Case | None = None) -> bool:
        """Whether any of this node's ranks of the group has a progress record of ``case`` (default the current one)."""
        return records.case_started(run_dir, self.case_id(case), self.ranks)

    def time_up(self, run_dir: Path, *, now: float, since_poll: float, job_started: float,
                startup_s: float, per_launch_s: float | None, case_allowance_s: float) -> tuple[str, bool]:
        """(why the current case's time ran out, "" while it has not; whether a rank is on a reference, pausing the clock)."""
        case = self.current
        if self.started is None:
            if not self.has_begun(run_dir):
                late = now - job_started > startup_s
                return (f"no progress record within the {startup_s:g} s startup allowance" if late else ""), False
            self.started = now
        act = records.latest_activity(run_dir, self.case_id(), self.ranks)
        if act.referencing and act.newest is not None and time.time() - act.newest < HEARTBEAT_STALE_S:
            self.paused += since_poll  # a reference is being computed: not the case's time
            return "", True
        budget = case_budget(case, per_launch_s, case_allowance_s)
        if now - self.started - self.paused > budget:
            return f"the case's {budget:g} s budget ran out", False
        stall = case.per_launch_s(per_launch_s) + (0.0 if act.begun else case_allowance_s)
        if act.newest is not None and time.time() - act.newest > stall:
            return f"no progress record for {stall:g} s", False
        return "", False


__all__ = ["GroupRun", "HEARTBEAT_STALE_S", "case_budget"]
