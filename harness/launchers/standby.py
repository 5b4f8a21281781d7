"""Spare processes for virtual jobs: each job's process starts up while the job before it runs.

A virtual job's fixed cost is its process's start-up (Python, torch, the CUDA
context, CuTe DSL and the kernel modules: 5-8 s on the GPU machine), paid
once per job and some 40 times in a full ``make validate``. ``StandbyPool``
keeps up to ``spares`` processes started ahead (``python -m harness.worker
--standby HANDOFF``, the rank side in ``harness.standby``), each a
``harness.watchdog.Supervised`` tree from its first moment, so an interrupt
or the end of the run ends it like any job. ``take`` hands a spare the job
(``HANDOFF`` written by atomic rename; the spare's clock restarts then, so the
job's deadline counts from its hand-over) and starts a replacement.

Isolation is that of a fresh process: one job per process, the process made
before the job but given nothing else. A spare is used only where it fits:
the virtual launcher, the same environment as the job's, still alive. Any
other job starts its own process as before.
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import Mapping, Sequence

from harness.report import atomic_write
from harness.standby import PARENT_VAR
from harness.watchdog import Supervised

SPARE_ARGV_FLAG = "--standby"


class StandbyPool:
    """Up to ``spares`` started virtual-job processes, all with environment ``env``, handed jobs by ``take``."""

    def __init__(self, python: str, spares: int, *, env: Mapping[str, str], cwd: str, spare_dir: Path,
                 grace_s: float = 3.0, stacks_dir: Path | None = None) -> None:
        self.python = python
        self.spares = max(0, spares)
        self.env = dict(env)
        self.cwd = cwd
        self.spare_dir = Path(spare_dir)
        self.grace_s = grace_s
        self.stacks_dir = stacks_dir
        self._lock = threading.Lock()
        self._idle: list[tuple[Supervised, Path]] = []
        self._count = 0
        self._closed = False
        self.handed = 0

    def __enter__(self) -> "StandbyPool":
        self.fill()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def fill(self) -> None:
        """Start spares until ``spares`` are idle (none once closed)."""
        while True:
            with self._lock:
                if self._closed or len(self._idle) >= self.spares:
                    return
                self._count += 1
                number = self._count
            spare = self._start(number)
            with self._lock:
                if self._closed:
                    spare[0].end_all()
                    return
                self._idle.append(spare)

    def _start(self, number: int) -> tuple[Supervised, Path]:
        """Start spare ``number`` (its output in ``standby-<number>.log`` until a job's log takes over)."""
        self.spare_dir.mkdir(parents=True, exist_ok=True)
        handoff = self.spare_dir / f"standby-{number}.json"
        with open(self.spare_dir / f"standby-{number}.log", "ab") as log:
            sup = Supervised([self.python, "-m", "harness.worker", SPARE_ARGV_FLAG, str(handoff)], env=dict(self.env, **{PARENT_VAR: str(os.getpid())}),
                             cwd=self.cwd, stdout=log, stderr=log, grace_s=self.grace_s, stacks_dir=self.stacks_dir)
        return sup, handoff

    def take(self, argv: Sequence[str], env: Mapping[str, str], log_path: Path) -> Supervised | None:
        """A spare running the virtual job of ``argv`` (its output on ``log_path``), or None where none fits."""
        job, virtual = _virtual_job(argv)
        if job is None or dict(env) != self.env:
            return None
        with self._lock:
            spare = None
            while self._idle and spare is None:
                candidate = self._idle.pop(0)
                if candidate[0].proc is not None and candidate[0].proc.poll() is None:
                    spare = candidate
                else:
                    candidate[0].end_all()
        threading.Thread(target=self.fill, name="standby-fill", daemon=True).start()
        if spare is None:
            return None
        sup, handoff = spare
        atomic_write(handoff, json.dumps({"job": job, "virtual": virtual, "log": str(log_path)}))
        sup.started = time.monotonic()  # the job's deadline counts from its hand-over
        with self._lock:
            self.handed += 1
        return sup

    def close(self) -> None:
        """End every idle spare (a spare handed a job belongs to that job's runner)."""
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for sup, _ in idle:
            sup.end_all()

    def describe(self) -> str:
        """One line for the report's notes."""
        return (f"# standby: {self.spares} spare process(es) start up ahead of the virtual jobs"
                if self.spares else "# standby: off")


def _virtual_job(argv: Sequence[str]) -> tuple[str | None, int]:
    """``(job file, ranks)`` of a virtual worker's argv (``--job J --virtual N``), else ``(None, 0)``."""
    args = list(argv)
    try:
        if "harness.worker" not in args or "--virtual" not in args:
            return None, 0
        return args[args.index("--job") + 1], int(args[args.index("--virtual") + 1])
    except (ValueError, IndexError):
        return None, 0


__all__ = ["StandbyPool"]
