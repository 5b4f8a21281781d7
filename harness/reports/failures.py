"""The failure summary printed at the end of every run, above the footer: one line per failing result.

A live table at 80 columns, or a plain log of hundreds of lines, buries
what went wrong; the summary lists every fail, timeout and error once more,
in the order ``harness.reports.diagnoses`` uses (hangs, then other errors,
then wrong bits, each in arrival order), each line naming the case, the
rank that failed (as its TP group numbers it, and the world's number when
they differ), the launch, the first mismatch or the diagnosis, and the log
to read (the failing rank's ``stderr.log`` when the diagnosis names one) and,
for a hang, the failing rank's stack file (``stacks/rank<k>-<pid>.txt``).
Lines are never wrapped: each is one line a terminal or ``grep`` shows whole.
"""

from __future__ import annotations

import re
from typing import Sequence

from harness.reports.diagnoses import DIAGNOSIS_ORDER
from harness.wire.case_result import FAILING, CaseResult

# "rank 1, launch 2, cache[...]": how a first mismatch names its rank and launch (harness.launch.verdict).
_MISMATCH_WHERE = re.compile(r"^rank (?P<rank>\d+), (?:launch (?P<launch>\d+), )?")


def where(r: CaseResult) -> tuple[str, str]:
    """(rank, launch) of a failing result in words: the diagnosis's, else the first mismatch's; ``-`` when unknown."""
    d = r.diagnosis or {}
    rank, launch = d.get("rank"), d.get("launch")
    if rank is None and launch is None:
        match = _MISMATCH_WHERE.match(r.first_mismatch or "")
        if match:
            rank, launch = match["rank"], match["launch"]
    members = d.get("group_ranks") or []
    text = "-" if rank is None else str(rank)
    if rank is not None and isinstance(rank, int) and 0 <= rank < len(members) and members[rank] != rank:
        text += f" (global {members[rank]})"
    return text, "-" if launch is None else str(launch)


def log_of(r: CaseResult, rank: str) -> str:
    """The log of the failing rank (or the first the diagnosis names); ``-`` without one."""
    logs = (r.diagnosis or {}).get("logs") or {}
    by_rank = {str(k): str(v) for k, v in logs.items()}
    return by_rank.get(rank.split()[0], next(iter(by_rank.values()), "-"))


def stack_of(r: CaseResult, rank: str) -> str:
    """The stack file of the failing rank's process (``stacks/rank<k>-<pid>.txt``); "" without one."""
    files = {str(k): str(v) for k, v in ((r.diagnosis or {}).get("stack_files") or {}).items()}
    return files.get(rank.split()[0], "")


def failure_line(r: CaseResult) -> str:
    """One line: status, case, rank, launch, first mismatch or diagnosis, log (and stack file when there is one)."""
    rank, launch = where(r)
    what = r.first_mismatch or (r.diagnosis or {}).get("text") or r.detail
    stack = stack_of(r, rank)
    return (f"#   {r.status.upper():<8} {r.case_id}  rank {rank}  launch {launch}  {what}  log {log_of(r, rank)}"
            + (f"  stack {stack}" if stack else ""))


def failure_summary(results: Sequence[CaseResult]) -> str:
    """``# Failures : N`` and a line per failing result (hangs, errors, wrong bits); "" when nothing failed."""
    failing = sorted((DIAGNOSIS_ORDER.index(r.status), i, r) for i, r in enumerate(results) if r.status in FAILING)
    if not failing:
        return ""
    lines = [f"# Failures : {len(failing)} (case, rank, launch, first mismatch or diagnosis, log)"]
    return "\n".join(lines + [failure_line(r) for _, _, r in failing])


__all__ = ["failure_line", "failure_summary", "where"]
