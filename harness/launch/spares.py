"""Spare processes for virtual jobs: each job's process starts up while the job before it runs.

A virtual job's fixed cost is its process's start-up (Python, torch, the CUDA
context, CuTe DSL and the kernel modules: 5-8 s on the GPU machine), paid
once per job and some 40 times in a full ``make validate``. ``StandbyPool``
keeps up to ``spares`` processes started ahead (``python -m harness.rank.worker
--standby HANDOFF``, the rank side in ``harness.rank.standby``), each a
``harness.launch.supervision.Supervised`` tree from its first moment, so an interrupt
or the end of the run ends it like any job. ``take`` hands a spare the job
(``HANDOFF`` written by atomic rename; the spare's clock restarts then, so the
job's deadline counts from its hand-over) and starts a replacement; it hands
out a spare that has said it is ready (``HANDOFF.ready``) before one that is
still starting. At most ``max_starting`` spares start up at once: a run's
first jobs take spares that are still starting, and replacements started at
the same moment would compete with them for the cores (on the 16-core GPU
machine the first jobs' start took up to 20 s with 24 processes importing
torch at once); the replacements start as the first ones become ready.

Isolation is that of a fresh process: one job per process, the process made
before the job but given nothing else. A spare is used only where it fits:
the virtual launcher, the same environment as the job's, still alive. Any
other job starts its own process.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Mapping, Sequence

from harness.launch.supervision import Supervised
from harness.wire.atomic_file import atomic_write
from harness.wire.spare_handoff import PARENT_VAR, handoff_text, ready_path

SPARE_ARGV_FLAG = "--standby"
READY_POLL_S = 0.25  # how often a full set of starting spares is checked for one that became ready


class StandbyPool:
    """Up to ``spares`` started virtual-job processes, all with environment ``env``, handed jobs by ``take``."""

    def __init__(self, python: str, spares: int, *, env: Mapping[str, str], cwd: str, spare_dir: Path,
                 grace_s: float = 3.0, stacks_dir: Path | None = None, max_starting: int | None = None) -> None:
        self.python = python
        self.spares = max(0, spares)
        self.max_starting = max(1, max_starting if max_starting is not None else self.spares)
        self._starting: list[Path] = []  # handoff paths of spares (idle or handed) not yet ready
        self._filling = False
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
        self.fill(wait=False)  # the first ones now, before any job asks
        threading.Thread(target=self.fill, name="standby-fill", daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def fill(self, wait: bool = True) -> None:
        """Start spares until ``spares`` are idle, at most ``max_starting`` starting at once (none once closed),
        waiting for start-up slots unless ``wait`` is False; one caller fills at a time, the others return."""
        with self._lock:
            if self._filling:
                return
            self._filling = True
        try:
            while (number := self._next_number()) is not None:
                if number == 0:
                    if not wait:
                        return
                    time.sleep(READY_POLL_S)  # every start-up slot is taken: wait for a spare to become ready
                    continue
                spare = self._start(number)
                with self._lock:
                    self._starting.append(spare[1])
                    if self._closed:
                        spare[0].end_all()
                        return
                    self._idle.append(spare)
        finally:
            with self._lock:
                self._filling = False

    def _next_number(self) -> int | None:
        """The number of the next spare to start; 0 while ``max_starting`` are starting; None when full or closed."""
        with self._lock:
            if self._closed or len(self._idle) >= self.spares:
                return None
            self._starting = [h for h in self._starting if not _ready(h)]
            if len(self._starting) >= self.max_starting:
                return 0
            self._count += 1
            return self._count

    def _start(self, number: int) -> tuple[Supervised, Path]:
        """Start spare ``number`` (its output in ``standby-<number>.log`` until a job's log takes over)."""
        self.spare_dir.mkdir(parents=True, exist_ok=True)
        handoff = self.spare_dir / f"standby-{number}.json"
        with open(self.spare_dir / f"standby-{number}.log", "ab") as log:
            sup = Supervised([self.python, "-m", "harness.rank.worker", SPARE_ARGV_FLAG, str(handoff)],
                             env=dict(self.env, **{PARENT_VAR: str(os.getpid())}), cwd=self.cwd, stdout=log,
                             stderr=log, grace_s=self.grace_s, stacks_dir=self.stacks_dir)
        return sup, handoff

    def take(self, argv: Sequence[str], env: Mapping[str, str], log_path: Path) -> Supervised | None:
        """A spare running the virtual job of ``argv`` (its output on ``log_path``), or None where none fits."""
        job, virtual = _virtual_job(argv)
        if job is None or dict(env) != self.env:
            return None
        with self._lock:
            spare = None
            self._idle.sort(key=lambda idle: not _ready(idle[1]))  # ready ones first, each kind oldest first
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
        atomic_write(handoff, handoff_text(job, virtual, log_path))
        sup.spare = "ready" if _ready(handoff) else "starting"
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


def _ready(handoff: Path) -> bool:
    """Whether the spare of ``handoff`` has said it finished starting up (``harness.rank.standby`` writes the file)."""
    return ready_path(handoff).exists()


def _virtual_job(argv: Sequence[str]) -> tuple[str | None, int]:
    """``(job file, ranks)`` of a virtual worker's argv (``--job J --virtual N``), else ``(None, 0)``."""
    args = list(argv)
    try:
        if "harness.rank.worker" not in args or "--virtual" not in args:
            return None, 0
        return args[args.index("--job") + 1], int(args[args.index("--virtual") + 1])
    except (ValueError, IndexError):
        return None, 0


__all__ = ["StandbyPool"]
