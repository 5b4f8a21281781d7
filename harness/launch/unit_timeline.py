"""When each job unit of a validation ran, on which lane, and how well the units packed the lanes.

A validation's wall time is the latest end over its lanes; what sets it is
either one long unit (the critical path) or lanes left idle while a capped
kind of unit (``harness.launch.schedule.MAX_FAULT_UNITS``) waits. The phase
sums of the report (``# Phases``) add seconds over lanes and cannot tell the
two apart; this timeline can.

File: ``<run dir>/units.json``, written once the units are done (also when
the run was cut short), ``{"version": 1, "lanes": L, "wall_s": W, "units":
[{"lane", "start_s", "seconds", "world", "cases", "kind", "first_case",
"after_last_verdict_s"}, ...]}`` in start order, times in seconds from the
first unit's start; ``after_last_verdict_s`` is how long the unit's job
processes took to end once their last verdict was given
(``harness.launch.jobs``): time the lane is held while nothing is tested. Its
summary (``summary``) is printed when the units are done, above the footer:
the ``# Units`` line (lane occupancy: the units' seconds over lanes x wall,
and the longest unit) and the ``# Unit time`` line (the units' seconds per
kind, and the part of them spent after the last verdicts), which together
with ``# Phases`` say whether a run is bound by one unit or by the units'
sum, and which kind of unit to make cheaper.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

from harness.wire.atomic_file import atomic_write

VERSION = 1
FILE_NAME = "units.json"


class UnitTimeline:
    """The start, length and lane of every unit of one run, noted by the lanes as their units end."""

    def __init__(self, lanes: int, clock=time.monotonic) -> None:
        self.lanes = lanes
        self._clock = clock
        self._origin: float | None = None
        self._units: list[dict] = []
        self._lock = threading.Lock()

    def start(self) -> float:
        """The clock now, the first call also fixing the timeline's origin."""
        now = self._clock()
        with self._lock:
            if self._origin is None:
                self._origin = now
        return now

    def note(self, started: float, unit, after_last_verdict_s: float = 0.0) -> float:
        """``unit`` (a ``harness.launch.schedule.JobUnit``), begun at ``started`` (from ``start``) on the calling
        lane's thread, ended now, its job processes ending ``after_last_verdict_s`` after their last verdicts;
        returns its seconds."""
        ended = self._clock()
        with self._lock:
            self._units.append({"lane": threading.current_thread().name, "start_s": round(started - self._origin, 3),
                                "seconds": round(ended - started, 3), "world": unit.world, "cases": len(unit.cases),
                                "kind": unit.kind, "first_case": unit.cases[0].key if unit.cases else "",
                                "after_last_verdict_s": round(after_last_verdict_s, 3)})
        return ended - started

    def document(self) -> dict:
        """The timeline as ``units.json`` holds it."""
        with self._lock:
            units = sorted(self._units, key=lambda u: u["start_s"])
        wall = max((u["start_s"] + u["seconds"] for u in units), default=0.0)
        return {"version": VERSION, "lanes": self.lanes, "wall_s": round(wall, 3), "units": units}

    def summary(self) -> str:
        """Two lines: units, lane occupancy over the units' wall time and the longest unit; the units' seconds
        per kind and after their last verdicts."""
        doc = self.document()
        units, wall = doc["units"], doc["wall_s"]
        if not units or wall <= 0:
            return "# Units : none ran"
        busy = sum(u["seconds"] for u in units)
        longest = max(units, key=lambda u: u["seconds"])
        return (f"# Units : {len(units)} on {self.lanes} lane(s) in {wall:.1f} s, lanes busy "
                f"{100 * busy / (self.lanes * wall):.0f}% ({busy:.1f} unit-s); the longest {longest['seconds']:.1f} s "
                f"from {longest['start_s']:.1f} s: world {longest['world']}, {longest['cases']} case(s), "
                f"{longest['kind']}, {longest['first_case']}\n" + _time_split(units, busy))

    def write(self, run_dir: Path) -> Path:
        """Write ``units.json`` into ``run_dir`` (atomically) and return its path."""
        path = Path(run_dir) / FILE_NAME
        atomic_write(path, json.dumps(self.document(), indent=1))
        return path


def _time_split(units: list[dict], busy: float) -> str:
    """The ``# Unit time`` line: the units' seconds per kind (most first), and those after their last verdicts."""
    kinds: dict[str, list[float]] = {}
    for u in units:
        kinds.setdefault(u["kind"], []).append(u["seconds"])
    most_first = sorted(kinds.items(), key=lambda kv: -sum(kv[1]))
    parts = ", ".join(f"{kind} {len(seconds)} ({sum(seconds):.1f})" for kind, seconds in most_first)
    after = sum(u["after_last_verdict_s"] for u in units)
    return (f"# Unit time : {busy:.1f} unit-s by kind: {parts}; {after:.1f} of them after the units' last verdicts "
            f"(their job processes ending)")


__all__ = ["FILE_NAME", "UnitTimeline"]
