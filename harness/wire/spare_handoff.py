"""The hand-over of a job to a spare process: the files and the variable both sides name.

The launching side (``harness.launch.spares``) starts a spare with
``$RANKCHECK_STANDBY_PARENT`` set to the harness's pid and a handoff path;
the spare (``harness.rank.standby``) writes ``ready_path(handoff)`` when it
has started up, and waits for ``handoff``: JSON ``{"job": path, "virtual":
N, "log": path}``, written by atomic rename.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

PARENT_VAR = "RANKCHECK_STANDBY_PARENT"  # the harness's pid: a spare whose parent changed is orphaned


def ready_path(handoff: str | os.PathLike) -> Path:
    """The file a spare writes when it has started up: ``<handoff>.ready``."""
    handoff = Path(handoff)
    return handoff.with_name(handoff.name + ".ready")


def handoff_text(job: str, virtual: int, log_path: str | os.PathLike) -> str:
    """The handoff file's JSON for ``job`` with ``virtual`` ranks, its output going to ``log_path``."""
    return json.dumps({"job": job, "virtual": virtual, "log": str(log_path)})


def read_handoff(handoff: str | os.PathLike) -> tuple[Path, int, str]:
    """``(job file, virtual ranks, log path)`` from a handoff file."""
    job = json.loads(Path(handoff).read_text(encoding="utf-8"))
    return Path(job["job"]), int(job["virtual"]), str(job["log"])
