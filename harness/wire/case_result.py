"""The verdict record of one case (``CaseResult``), its statuses, and the run's exit codes.

One ``CaseResult`` per scenario x world x launcher (x TP group when groups
are smaller than the world): the launching side makes it from the ranks'
result files (``harness.launch.verdict``), the reports show and write it
(``harness.reports``), ``merge`` reads it back from JSON.

Statuses: ``pass``, ``fail`` (bits differ, or an expected error/timeout did
not happen), ``timeout`` (an unexpected hang; the diagnosis names the rank
and launch), ``error`` (an unexpected exception or crash), ``not-available``
(the implementation cannot run here, with the reason; neither pass nor
failure). A result whose launcher is ``STORED_BITS_LAUNCHER`` is a check
attached to a case (its reference against the golden store), never a case
of its own. The exit codes are decided by ``harness.reports.report.Report.verdict``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

STATUSES = ("pass", "fail", "timeout", "error", "not-available")
FAILING = ("fail", "timeout", "error")
# The format of the JSON report that lists these records (written by Report, read by merge).
JSON_SCHEMA = "rankcheck-validate/2"
# The launcher name of a stored-golden-bits check: a check attached to a case, not a case
STORED_BITS_LAUNCHER = "store"
EXIT_OK, EXIT_FAILED, EXIT_NOTHING_RUN, EXIT_UNAVAILABLE, EXIT_INTERRUPTED = 0, 1, 2, 3, 130


def case_id(family: str, scenario: str, world: int, launcher: str, group: int | None = None) -> str:
    """The stable name of a case: ``family/scenario[world=N,launcher=L(,group=G)]``."""
    in_group = f",group={group}" if group is not None else ""
    return f"{family}/{scenario}[world={world},launcher={launcher}{in_group}]"


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
    phases: dict = field(default_factory=dict)  # seconds per phase, the slowest rank's (harness.wire.phases)
    facts: str | None = None  # the architecture facts file the golden used (harness.families.arch_facts), None: none needed
    graphs: dict | None = None  # {"mode", "captured", "replays"} of a graph scenario (launch.verdict.graph_counts)

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"status must be one of {STATUSES}, got {self.status!r}")

    @property
    def is_stored_bits_check(self) -> bool:
        """True for a stored-golden-bits check (a check attached to a case, not a case of its own)."""
        return self.launcher == STORED_BITS_LAUNCHER

    @property
    def case_id(self) -> str:
        """A stable name: family/scenario[world=N,launcher=L(,group=G)] (``case_id``)."""
        return case_id(self.family, self.scenario, self.world, self.launcher, self.group)


def graph_totals(results: Sequence[CaseResult]) -> dict:
    """Over the cases of graph scenarios: how many there were, graphs captured, replays, and cases per mode."""
    graphed = [r.graphs for r in results if r.graphs and not r.is_stored_bits_check]
    return {"cases": len(graphed), "captured": sum(int(g.get("captured", 0)) for g in graphed),
            "replays": sum(int(g.get("replays", 0)) for g in graphed),
            "not_captured": sum(g.get("mode") == "not-captured" for g in graphed),
            "not_available": sum(g.get("mode") == "not-available" for g in graphed)}
