"""Per-rank progress records: what each rank had begun and finished when it stopped.

Every rank appends one JSON line per event to ``<dir>/rank<k>.progress.jsonl``:
``{"rank", "launch", "event": "begin"|"end"|"skip"|"crash"|"hang", "params",
"state", "t", "pid", "thread"}``. Each line is flushed and fsynced before the launch it
announces starts, so a rank that is killed (or whose CUDA context dies) leaves
an exact account: the last ``begin`` without an ``end`` is the launch it was
in, and a missing ``begin`` is a launch it never reached. ``state`` is the
system's ``state()`` (launch counter, generation, ...) at that moment, which
is what the rank *believed* when it stopped. ``pid`` and ``thread``
(``threading.get_ident()``) name the process and thread that wrote the
record: the virtual launcher runs every rank as a thread of one process, and
the diagnosis cuts that process's stack dump down to the hung rank's thread
(``harness.launch.evidence``).

A ``reference`` record says the rank is computing (or waiting for) the
unsharded reference of that launch; while it does, it refreshes the file's
modification time every few seconds (``touch``), so the job runner can tell
a long reference computation from a stalled rank.

The reader tolerates a torn last line (a process killed mid-write).
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import Any, Mapping


def progress_path(directory: str | os.PathLike, rank: int) -> Path:
    """The progress file of ``rank`` inside ``directory``."""
    return Path(directory) / f"rank{rank}.progress.jsonl"


def _plain(value: Any) -> Any:
    """Convert params/state values to JSON-ready plain values (tensors become short descriptions)."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, (bool, int, float, str)) or value is None:
        return value
    if hasattr(value, "shape") and hasattr(value, "dtype"):
        return f"tensor{tuple(value.shape)} {value.dtype}"
    if hasattr(value, "item"):
        return value.item()
    return str(value)


class ProgressWriter:
    """Appends one rank's progress records, each durable before the next action."""

    def __init__(self, directory: str | os.PathLike, rank: int) -> None:
        self.rank = rank
        self.path = progress_path(directory, rank)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = open(self.path, "a", encoding="utf-8")

    def write(self, event: str, launch: int, params: Mapping | None = None,
              state: Mapping | None = None, **extra: Any) -> None:
        """Append one event record, then flush and fsync it."""
        record = {
            "rank": self.rank,
            "launch": launch,
            "event": event,
            "params": _plain(params or {}),
            "state": _plain(state or {}),
            "t": time.time(),
            "pid": os.getpid(),
            "thread": threading.get_ident(),
        }
        record.update({k: _plain(v) for k, v in extra.items()})
        self._file.write(json.dumps(record, sort_keys=True) + "\n")
        self._file.flush()
        os.fsync(self._file.fileno())

    def begin(self, launch: int, params: Mapping | None = None, state: Mapping | None = None, **extra: Any) -> None:
        """Record that ``launch`` is about to start (``extra``: e.g. the parameters that deviate from the call's)."""
        self.write("begin", launch, params, state, **extra)

    def end(self, launch: int, params: Mapping | None = None, state: Mapping | None = None) -> None:
        """Record that ``launch`` returned."""
        self.write("end", launch, params, state)

    def touch(self) -> None:
        """Refresh the file's modification time (a heartbeat while a long reference is computed or awaited)."""
        os.utime(self.path)

    def close(self) -> None:
        """Close the file (records already written are durable)."""
        self._file.close()


def read_progress(path: str | os.PathLike) -> list[dict]:
    """Read a progress file's records, ignoring a torn final line; [] if the file is absent."""
    records: list[dict] = []
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        return records
    for line in text.splitlines():
        line = line.strip()
        if not line:
            continue
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            break
    return records


def read_all_progress(directory: str | os.PathLike, world: int, first_rank: int = 0) -> dict[int, list[dict]]:
    """Every rank's progress records in ``directory`` for ranks first_rank..first_rank+world-1."""
    return {r: read_progress(progress_path(directory, r)) for r in range(first_rank, first_rank + world)}
