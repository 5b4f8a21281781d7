"""The kernels' flight recorders as evidence of a failed case: where the rings go, and what they say.

Every instance of a kernel family keeps a ring of its last launches in a
file (``kernels.flight``) that its kernels write, CUDA-graph replays
included, and that survives a trap, a hang and a ``kill``. For a harness
case the rings go to ``<case dir>/flight/`` (``use_case_directory``, called
by each rank in its own thread before it builds its system: every rank of
the group writes there, so one directory holds the whole group's rings). When a case failed
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
from pathlib import Path
from typing import Any

FLIGHT_SUBDIR = "flight"


def flight_directory(case_dir: str | os.PathLike) -> Path:
    """Where a case's rings are: ``<case dir>/flight``."""
    return Path(case_dir) / FLIGHT_SUBDIR


def use_case_directory(case_dir: str | os.PathLike) -> None:
    """Make the case's flight directory the default for the rings this thread creates from now on (a rank builds
    its system in its own thread; the virtual launcher runs several groups' ranks in one process)."""
    from kernels import flight  # noqa: PLC0415 - standard library only; imported where a case runs

    flight.set_directory(flight_directory(case_dir), this_thread=True)


def keep(case_dir: str | os.PathLike) -> list[str]:
    """Move the case's rings out of ``/dev/shm`` into its flight directory (every case, passed or not, so shared
    memory does not fill up over a run); the problems met, one line each."""
    from kernels import flight  # noqa: PLC0415

    try:
        flight.collect(flight_directory(case_dir))
    except OSError as exc:
        return [f"collecting rings: {exc}"]
    return []


def findings(case_dir: str | os.PathLike) -> list[dict]:
    """Each instance's finding from the case's rings (divergent first), then one entry per unreadable file."""
    from kernels import flight  # noqa: PLC0415

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


__all__ = ["FLIGHT_SUBDIR", "attach", "findings", "flight_directory", "keep", "use_case_directory"]
