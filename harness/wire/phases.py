"""Where a case's time goes: wall seconds per phase, measured by each rank in the worker.

A rank's case passes through the phases of ``PHASES``: ``start`` (only for
the first case a process runs: from the job's start, which the worker takes
from the job file's time since the launcher writes it as it starts the job,
or else from this module's import, to the case's start: the torchrun agent,
the interpreter, torch, the process group), ``inputs`` (the scenario's plan
and start state), ``construct`` (the family's module, the world handle, the
system and its graphs), ``compile`` (kernel compilation, wherever it
happened: ``cute.compile`` and the export of the compiled object to the
artifact cache), ``load`` (compiled kernels got without compiling: the
artifact cache's key, reading and loading a stored object, and loading the
code into the CUDA context), ``kernel`` (the launches, the agreement
exchange and the host copies of the outputs),
``reference`` (the unsharded reference: its digest, then computed, waited
for or loaded), ``compare`` (the bitwise comparison) and ``store`` (the
golden store check). ``PhaseClock.phase`` times a block; the kernel compile
and load seconds counted inside it (``kernels.compile_clock``, two
process-wide counters) are moved from the block's phase to ``compile`` and
``load``, so the phases do not count them twice, and a warm run's
``compile`` says how much was really compiled. Time outside every block (progress records,
injected delays) belongs to no phase. The launcher keeps each phase's
slowest rank (``slowest``): a case waits for its slowest rank.

The ``start`` phase is one number; where it went is in the first case's
start-up marks (``mark_startup``: the wall time, as ``time.time()``, at which
the process reached each step: ``job`` the job's start, ``process`` the
process's start (``/proc``), ``worker`` the worker's code running (its
imports, torch's among them, done), ``torch`` torch.distributed imported,
``joined`` the process group joined, ``grouped`` its TP group made; a
standby process (``harness.rank.standby``) adds ``cuda``, ``preloaded`` and
``handed``, the job reaching it, and its ``start`` counts from the job only;
a virtual kernel job adds ``fabric``, its ranks' streams made, which makes
the CUDA context), which ``harness.scale`` turns into agent, import,
rendezvous and group-setup seconds and ``harness.reports.startup_steps``
into seconds per step over a run's processes.
"""

from __future__ import annotations

import os
import time
from contextlib import contextmanager
from typing import Iterable, Iterator, Mapping

from kernels.compile_clock import compile_seconds, load_seconds

PHASES = ("start", "inputs", "construct", "compile", "load", "kernel", "reference", "compare", "store")

# The worker imports this module as it is imported itself: until the worker names the
# job's start (count_start_up_from), this stands for the process's.
_process_started = time.monotonic()
_first_case: dict = {}
_startup_marks: dict[str, float] = {}


def process_started_at() -> float | None:
    """This process's start as wall time (``time.time()``), from ``/proc`` (None where there is no ``/proc``)."""
    try:
        with open("/proc/self/stat", "rb") as f:
            ticks = int(f.read().rsplit(b")", 1)[1].split()[19])  # field 22: start time in clock ticks after boot
        with open("/proc/stat", "rb") as f:
            boot = next(int(line.split()[1]) for line in f if line.startswith(b"btime "))
    except (OSError, ValueError, IndexError, StopIteration):
        return None
    return boot + ticks / os.sysconf("SC_CLK_TCK")


def mark_startup(name: str, at: float | None = None) -> None:
    """Record that this process reached start-up step ``name`` at wall time ``at`` (default now); the first mark of a name stays."""
    _startup_marks.setdefault(name, time.time() if at is None else at)


def count_start_up_from(epoch_seconds: float, *, job_only: bool = False) -> None:
    """Count the first case's start-up from ``epoch_seconds`` (the job's start, as ``time.time()``) when earlier,
    or always with ``job_only`` (a standby process started before its job)."""
    global _process_started
    job_started = time.monotonic() - max(0.0, time.time() - epoch_seconds)
    _process_started = job_started if job_only else min(_process_started, job_started)
    mark_startup("job", epoch_seconds)


def startup_seconds(case_key: tuple) -> float:
    """Seconds since the process started when ``case_key`` is the first case it runs (on every rank thread), else 0."""
    # dict.setdefault is atomic: the virtual ranks (threads) of the first case all see their key win.
    if _first_case.setdefault("key", case_key) != case_key:
        return 0.0
    return time.monotonic() - _process_started


class PhaseClock:
    """Wall seconds per phase of one rank's case, ``start`` set at construction."""

    def __init__(self, case_key: tuple) -> None:
        self.seconds = dict.fromkeys(PHASES, 0.0)
        self.seconds["start"] = startup_seconds(case_key)
        # where the start went, for the first case only (the later ones had no start of their own)
        self.startup_marks = dict(_startup_marks) if self.seconds["start"] else {}

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Add the block's wall time to phase ``name``, less the kernel compile and load seconds inside it,
        which go to ``compile`` and ``load``."""
        if name not in self.seconds:
            raise ValueError(f"phase must be one of {PHASES}, got {name!r}")
        started, compiled_before, loaded_before = time.monotonic(), compile_seconds(), load_seconds()
        try:
            yield
        finally:
            elapsed = time.monotonic() - started
            # Capped by the block: a peer thread's compile or load may overlap this block only in part.
            compiling = min(elapsed, compile_seconds() - compiled_before)
            loading = min(elapsed - compiling, load_seconds() - loaded_before)
            self.seconds["compile"] += compiling
            self.seconds["load"] += loading
            self.seconds[name] += elapsed - compiling - loading


def slowest(per_rank: Iterable[Mapping[str, float] | None]) -> dict[str, float]:
    """Each phase's largest seconds over the ranks' phase times, in ``PHASES`` order (ranks without any skipped)."""
    seconds: dict[str, float] = {}
    for phases in per_rank:
        for name, value in (phases or {}).items():
            seconds[name] = max(seconds.get(name, 0.0), float(value))
    order = {name: i for i, name in enumerate(PHASES)}
    return {name: seconds[name] for name in sorted(seconds, key=lambda n: (order.get(n, len(PHASES)), n))}
