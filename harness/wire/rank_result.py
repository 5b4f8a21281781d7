"""One rank's result of one case: the typed record a rank writes and the launcher reads back.

A rank writes ``rank<k>.result.json`` atomically when it finishes a case
(``RankResult.write``); the launcher side reads it with ``RankResult.read``
and uses attributes, never key strings. The file's keys are the field names.
The fields every result has come first; the others are written only when
the case got that far (``facts`` once the family's module was imported,
``graph`` once the system was made, ``references`` and ``state`` once the
launches ran, ``store`` when rank 0 checked the golden store, ``abandon``
when the rank gives the job up, ``state_before``/``state_after`` around an
unexpected launch error, ``startup`` on a process's first case). Such a
field is ``UNSET`` until then, and ``UNSET`` is false, so ``if result.store``
reads as it should; ``None`` is a value like any other (``facts: null`` for a
family that needs no architecture facts).

``error`` is ``{"type", "types" (the class and its bases), "message",
"traceback", "phase"}`` (``error_of``); ``comparison`` is
``harness.rank.compare.Comparison.to_json()``; ``refused`` and ``not_refused`` list
the bad-input calls the system refused or accepted; ``protocol_mismatches``
the calls that ran another protocol than the one they name or imply
(``{"launch", "problem"}``, ``FamilyAdapter.protocol_problem``).
"""

from __future__ import annotations

import dataclasses
import json
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.wire.atomic_file import atomic_write


class _Unset:
    """The value of a result field the case never got to (left out of the file; false)."""

    def __bool__(self) -> bool:
        return False

    def __repr__(self) -> str:
        return "UNSET"


UNSET: Any = _Unset()


@dataclass
class RankResult:
    """One rank's record of one case (``status``: ``ok``, ``error`` or ``not-available``)."""

    job: int | None = None
    group: int | None = None
    family: str = ""
    name: str = ""
    rank: int = 0
    group_rank: int = 0
    tp: int = 1
    impl: str = "golden"
    status: str = "ok"
    launches_done: int = 0
    comparison: dict | None = None
    error: dict | None = None
    refused: list = field(default_factory=list)
    not_refused: list = field(default_factory=list)
    protocol_mismatches: list = field(default_factory=list)
    time_s: float = 0.0
    phases: dict = field(default_factory=dict)
    facts: Any = UNSET
    graph: Any = UNSET
    references: Any = UNSET
    state: Any = UNSET
    store: Any = UNSET
    abandon: Any = UNSET
    state_before: Any = UNSET
    state_after: Any = UNSET
    startup: Any = UNSET

    def to_json(self) -> dict:
        """The result as the JSON document of its file (fields left ``UNSET`` are not in it)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if getattr(self, f.name) is not UNSET}

    @classmethod
    def from_json(cls, doc: dict) -> "RankResult":
        """The result a JSON document describes (absent fields take their defaults; an unknown key is an error)."""
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(doc) - known)
        if unknown:
            raise ValueError(f"a rank result has no field {unknown} (known: {sorted(known)})")
        return cls(**doc)

    def write(self, path: Path) -> None:
        """Write the result to ``path`` atomically."""
        atomic_write(path, json.dumps(self.to_json(), indent=1, sort_keys=True, default=str))

    @classmethod
    def read(cls, path: Path) -> "RankResult":
        """The result in file ``path`` (FileNotFoundError or json.JSONDecodeError when it is not there yet)."""
        return cls.from_json(json.loads(Path(path).read_text(encoding="utf-8")))

    @property
    def failed(self) -> bool:
        """Whether the rank raised an unexpected error."""
        return self.status == "error"


def error_of(exc: BaseException) -> dict:
    """An exception as a JSON-ready dict (type, its classes' names, message, last traceback lines)."""
    return {"type": type(exc).__name__, "types": [cls.__name__ for cls in type(exc).__mro__], "message": str(exc),
            "traceback": "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))[-4000:]}
