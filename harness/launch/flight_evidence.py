"""The kernels' flight recorders as evidence of a failed case: what a case's rings say.

Every instance of a kernel family keeps a ring of its last launches in a
file (``kernels.flight``) that its kernels write, CUDA-graph replays
included, and that survives a trap, a hang and a ``kill``. For a harness
case the rings are in ``<case dir>/flight/`` (each rank points its
recorders there before it builds its system:
``harness.wire.worker_evidence.use_case_directory``). When a case failed
or did not complete, ``attach`` reads them, adds each instance's finding
(``kernels.flight.first_divergence``: the first launch where the ranks'
records differ or one rank stopped) to the diagnosis as ``flight``, and
appends the first divergent one to its text; where the progress records
named no rank, the flight recorder's rank is the one blamed.

Rings whose directory is not on tmpfs are links to ``/dev/shm`` files
(the kernels pin the mapping, which Linux allows only for shmem);
``keep`` (called for every case when its verdict is given) turns them into
plain files in the case directory, so the run directory keeps them and
``/dev/shm`` does not.
"""

from __future__ import annotations

import os
from typing import Any

from harness.wire.worker_evidence import flight_directory
from kernels import flight


def keep(case_dir: str | os.PathLike) -> list[str]:
    """Move the case's rings out of ``/dev/shm`` into its flight directory (every case, passed or not, so shared
    memory does not fill up over a run); the problems met, one line each."""
    try:
        flight.collect(flight_directory(case_dir))
    except OSError as exc:
        return [f"collecting rings: {exc}"]
    return []


def findings(case_dir: str | os.PathLike) -> list[dict]:
    """Each instance's finding from the case's rings (divergent first), then one entry per unreadable file."""
    try:
        found, unreadable = flight.directory_findings(flight_directory(case_dir))
    except (OSError, flight.FlightFormatError) as exc:  # a vanished link target, two rings of one rank
        return [{"problem": f"{type(exc).__name__}: {exc}"}]
    return [finding.to_json() for finding in found] + [{"problem": line} for line in unreadable]


def attach(diagnosis: Any, case_dir: str | os.PathLike) -> Any:
    """Add the case's flight findings to ``diagnosis`` (``flight``), name the first divergence in its text, and
    blame its rank where the diagnosis blamed none; the diagnosis is returned."""
    found = findings(case_dir)
    diagnosis.flight = found
    divergent = [f for f in found if f.get("consistent") is False]
    if divergent:
        first = divergent[0]
        diagnosis.text = f"{diagnosis.text}; {first['text']}"
        if diagnosis.rank is None:
            diagnosis.rank = first["rank"]
            diagnosis.cause = diagnosis.cause or "flight"
    return diagnosis


__all__ = ["attach", "findings", "keep"]
