"""``--lf``: the cases that failed in a previous run, read back from its JSON report.

The report is the one ``--last-report PATH`` names, else the newest
``report*.json`` (by modification time) in a run directory under
``runs/`` (``harness.wire.case_files.default_run_dir``'s parent): the last
run of this checkout, a node's file of a multi-node run included. A case
failed when its result is ``fail``, ``timeout`` or ``error``; a failing
stored-bits check (``name:stored-bits``) counts as a failure of its case.
Failures are named by ``(family/name, world)``: the world as the report
gives it (the TP size with ``--tp``), whatever the launcher, so a rerun
under another launcher reruns the same scenarios at the same sizes.

A missing or unreadable report, or a file of another format, is a
ValueError naming the option and the file, raised before anything runs.
"""

from __future__ import annotations

import json
from pathlib import Path

from harness.wire.case_files import default_run_dir
from harness.wire.case_result import FAILING, STORED_BITS_LAUNCHER

REPORT_SCHEMA_PREFIX = "rankcheck-validate/"
STORED_BITS_SUFFIX = ":stored-bits"


def runs_root() -> Path:
    """The directory the run directories are made in (``runs/`` of the repository)."""
    return default_run_dir().parent


def newest_report(root: Path | None = None) -> Path:
    """The newest ``report*.json`` one level under ``root`` (default ``runs/``), or ValueError saying none is."""
    root = runs_root() if root is None else Path(root)
    found = sorted(root.glob("*/report*.json"), key=lambda p: p.stat().st_mtime) if root.is_dir() else []
    if not found:
        raise ValueError(f"--lf: no report*.json in a run directory under {root}; "
                         f"name a previous run's JSON report with --last-report PATH")
    return found[-1]


def failed_cases(path: str | Path) -> set[tuple[str, int]]:
    """``(family/name, world)`` of every failing case of the JSON report at ``path``."""
    path = Path(path)
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ValueError(f"--last-report {path}: cannot read it as a JSON report ({exc})") from exc
    schema = doc.get("schema", "") if isinstance(doc, dict) else ""
    if not str(schema).startswith(REPORT_SCHEMA_PREFIX) or not isinstance(doc.get("results"), list):
        raise ValueError(f"--last-report {path}: not a rankcheck validate report (schema {schema!r}; expected "
                         f"{REPORT_SCHEMA_PREFIX}N with a list of results)")
    failed = set()
    for index, result in enumerate(doc["results"]):
        try:
            if result.get("status") not in FAILING:
                continue
            name = str(result["scenario"])
            if result.get("launcher") == STORED_BITS_LAUNCHER and name.endswith(STORED_BITS_SUFFIX):
                name = name[: -len(STORED_BITS_SUFFIX)]
            failed.add((f"{result['family']}/{name}", int(result["world"])))
        except (AttributeError, KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"--last-report {path}: results[{index}] lacks a family, scenario or whole-number "
                             f"world ({type(exc).__name__}: {exc})") from exc
    return failed


__all__ = ["failed_cases", "newest_report", "runs_root"]
