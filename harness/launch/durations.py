"""How long each job unit took in past runs, so that the next run can start its longest units first.

A validation's wall time is set by how its units pack into lanes: a long
unit that starts last leaves every other lane idle while it finishes. The
units' lengths are not known in advance (a fault unit waits for a deadline,
a gpu-size batch for its references, a world-8 job constructs eight
systems), so each run keeps what it measured and the next one orders by it
(``harness.launch.schedule.order_units``: longest first).

File: ``<cache>/durations.json`` beside the reference cache
(``harness.references.cache.cache_root``), ``{"version": 1, "units": {key: seconds}}``.
A unit's key is the launcher, the implementation, the world and the sorted
keys of its cases (``unit_key``), so a unit whose cases changed is a new
one. The file is a hint, never a verdict: a missing, unreadable or foreign
file reads as empty, the newest ``MAX_UNITS`` keys are kept, and it is
replaced atomically (``harness.wire.atomic_file.atomic_write``), so two runs (or two
nodes on a shared file system) that write at once keep one of their views,
which is all a hint needs.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Mapping

from harness.wire.atomic_file import atomic_write

VERSION = 1
MAX_UNITS = 2000
FILE_NAME = "durations.json"


def unit_key(launcher: str, impl: str, world: int, case_keys: list[str]) -> str:
    """The key of one unit: a digest of the launcher, implementation, world and its sorted case keys."""
    text = "|".join([launcher, impl, str(world), *sorted(case_keys)])
    return hashlib.sha256(text.encode()).hexdigest()[:24]


class UnitDurations:
    """Past units' seconds from one file, and the ones this run measured, written back with ``save``."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.past = self._read(path)
        self.measured: dict[str, float] = {}

    @staticmethod
    def _read(path: Path | None) -> dict[str, float]:
        """The file's unit seconds (empty when there is no file or it is not one of ours)."""
        if path is None:
            return {}
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
            units = doc["units"] if doc.get("version") == VERSION else {}
            return {str(k): float(v) for k, v in units.items() if float(v) >= 0}
        except (OSError, ValueError, TypeError, KeyError, AttributeError):
            return {}

    def estimate(self, key: str) -> float | None:
        """The seconds the unit took when it last ran (None when no run measured it)."""
        return self.measured.get(key, self.past.get(key))

    def note(self, key: str, seconds: float) -> None:
        """Keep what this run measured for a unit (lanes call it from their threads; dict writes are atomic)."""
        self.measured[key] = round(float(seconds), 2)

    def save(self) -> None:
        """Merge this run's measurements into the file (newest kept, at most ``MAX_UNITS``); nothing without a path."""
        if self.path is None or not self.measured:
            return
        merged: Mapping[str, float] = {**{k: v for k, v in self.past.items() if k not in self.measured},
                                       **self.measured}
        kept = dict(list(merged.items())[-MAX_UNITS:])
        self.path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(self.path, json.dumps({"version": VERSION, "units": kept}, indent=0))


__all__ = ["FILE_NAME", "MAX_UNITS", "UnitDurations", "unit_key"]
