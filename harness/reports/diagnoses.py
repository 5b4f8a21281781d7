"""What went wrong, listed first in both report files: every failing result's diagnosis, timeouts first."""

from __future__ import annotations

from typing import Sequence

from harness.wire.case_result import FAILING, CaseResult

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
