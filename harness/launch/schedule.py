"""Which jobs a validation runs, in what order, and how many at once.

``validate`` plans (world, cases) pairs; this module cuts them into job
units and runs the units through ``JobRunner``s, several at a time where
they cannot spoil each other's verdict:

- Units: per world, the cases that cannot hang run batched: the cpu-size
  ones in one unit, the gpu-size ones in one unit per family; every case that may hang or end its ranks (an
  injected hang, crash, skip, repeat or disagreement; an expected timeout)
  is a unit of its own, except the faults its family settles in step
  (``Case.isolated``), which end their world's cpu-size unit. Order: cpu-size batches and the fault units first,
  gpu-size batches last, so the reference pool (``harness.references.pool``) has
  computed their references by the time they start.
- Lanes: a unit runs when a lane is free. With ranks sharing devices (the
  virtual launcher, torchrun processes sharing one GPU, the cpu launcher)
  there are ``lanes`` lanes and no device assignment: units time-share the
  GPU and the cores. The fault units mostly wait for a deadline, so they
  overlap well with batches. With one GPU per rank (torchrun + NCCL) a unit
  of world ``w`` takes ``w`` free GPUs (``CUDA_VISIBLE_DEVICES``), so a node
  of 8 GPUs runs four world-2 jobs side by side and a world-8 job alone.
- Never in parallel: several nodes (every node must start the same jobs in
  the same order, their rendezvous ids are job numbers) and TP groups (the
  case directories are keyed by TP size, which several worlds share).

- Order, once a run has measured its units (``harness.launch.durations``):
  longest first (a long unit started last leaves the other lanes idle),
  among the units that need no reference from the pool; while the pool has
  work, the gpu-size batches still come after every other unit. Units no run
  has measured keep the order above.
- Units that wait for a deadline at once: at most ``MAX_FAULT_UNITS`` (the
  fault units that expect a timeout: a hung rank's kernel spins until the
  deadline, and the GPU time-slices between the jobs' processes, so each
  spinner takes a share from the healthy jobs) while any other unit is
  running or pending; once only such units are left, they take every lane
  (there is no healthy job left to slow, and the deadline is wall time). The
  fault units that end by themselves (a crash) take any free lane.

A unit's verdicts are reported as its cases settle (``Report.add`` is
thread-safe); an interrupt reaches the main thread, which ends every live
process tree (``harness.launch.supervision.end_every_tree``) and lets the lanes drain.
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from dataclasses import dataclass, replace
from typing import Callable, Sequence

from harness.launch.durations import UnitDurations, unit_key

from harness.families.catalog import Case

# Units that wait for a deadline (expected timeouts) at once: as many as runs on one H200 have passed with.
MAX_FAULT_UNITS = 4


@dataclass(frozen=True)
class JobUnit:
    """Cases of one world that run as one job (or, for a fault case, alone)."""

    world: int
    cases: tuple[Case, ...]
    isolated: bool

    @property
    def heavy(self) -> bool:
        """Whether the unit holds gpu-size cases (their references come from the pool)."""
        return any(c.size == "gpu" for c in self.cases)

    @property
    def waits_for_deadline(self) -> bool:
        """Whether the unit is a fault case that expects a timeout (its ranks spin until the deadline)."""
        return self.isolated and any("timeout" in getattr(c, "outcomes", ()) for c in self.cases)

    @property
    def kind(self) -> str:
        """What the unit is, in words: a fault case that waits for its deadline, another fault case, or a cpu- or
        gpu-size batch."""
        if self.isolated:
            return "fault, waits for its deadline" if self.waits_for_deadline else "fault"
        return "gpu-size batch" if self.heavy else "cpu-size batch"

    def key(self, launcher: str, impl: str) -> str:
        """The unit's key in the durations file (``harness.launch.durations.unit_key``)."""
        return unit_key(launcher, impl, self.world, [c.key for c in self.cases])


def job_units(pairs: Sequence[tuple[int, Sequence[Case]]], impl: str) -> list[JobUnit]:
    """The units of a plan in run order: cpu-size batches and fault cases first, gpu-size batches last."""
    light, heavy = [], []
    for world, cases in pairs:
        batches: dict[tuple[str, str], list[Case]] = {}
        for case in cases:
            if case.isolated(impl):
                light.append(JobUnit(world, (case,), True))
            else:
                # one job per world for the cpu-size cases (a job start costs seconds); the gpu-size ones
                # per family too, so that lanes can share them out
                batches.setdefault((case.family if case.size == "gpu" else "", case.size), []).append(case)
        for (_, size), batch in batches.items():
            (heavy if size == "gpu" else light).append(JobUnit(world, tuple(batch), False))
    # the longest gpu-size units first, so that no lane is left with one long unit at the end
    heavy.sort(key=lambda u: -u.world * sum(max(c.launches, 1) for c in u.cases))
    return light + heavy


def order_units(units: Sequence[JobUnit], durations: UnitDurations, keys: Sequence[str], *,
                pool_busy: bool) -> list[JobUnit]:
    """The units longest first by their past durations (``keys``: their duration keys, in order); while the pool
    computes, the gpu-size batches after every other unit. A unit no run measured counts as longest (it may be),
    and ties keep ``job_units``' order, so a first run keeps that order."""
    def rank(indexed: tuple[int, JobUnit]) -> tuple[bool, float, int]:
        """Sort key: gpu-size batches last while the pool is busy, then longest first, then the planned order."""
        index, unit = indexed
        seconds = durations.estimate(keys[index])
        return (pool_busy and unit.heavy, -(seconds if seconds is not None else float("inf")), index)

    return [unit for _, unit in sorted(enumerate(units), key=rank)]


def default_lanes(*, nnodes: int, tp: int | None, cores: int | None = None, pool_busy: bool = True) -> int:
    """How many units run at once by default: one where order must hold; else one per three cores (at most six)
    while the reference pool takes cores, one per two (at most eight, at least two on two cores or more) when it
    has nothing to compute."""
    if nnodes > 1 or tp is not None:
        return 1
    cores = cores or os.cpu_count() or 1
    if pool_busy:
        return max(1, min(6, cores // 3))
    # two lanes even on two cores: a fault job spends most of its time waiting for its deadline, and beside it
    # the batches run on (the CPU validate on the 2-core CI machine: 186 s with one lane, 140 s with two)
    return max(min(2, cores), min(8, cores // 2))


class _UnitQueue:
    """The units not yet started, handed to lanes in order, at most ``max_faults`` of those that wait for a
    deadline running at once while a unit that does not is running or pending (the cap protects those)."""

    def __init__(self, units: Sequence[JobUnit], max_faults: int) -> None:
        self.pending = list(units)
        self.max_faults = max(1, max_faults)
        self.faults_running = 0
        self.others_running = 0
        self._cond = threading.Condition()

    def _fault_slots(self) -> float:
        """How many more units that wait for a deadline may start now (unbounded once only such units are left)."""
        if not self.others_running and all(unit.waits_for_deadline for unit in self.pending):
            return float("inf")
        return self.max_faults - self.faults_running

    def take(self) -> JobUnit | None:
        """The first pending unit a lane may start now (waiting while only units that wait for a deadline are left
        and the cap is reached); None when none is left."""
        with self._cond:
            while self.pending:
                for index, unit in enumerate(self.pending):
                    if not unit.waits_for_deadline or self._fault_slots() > 0:
                        self.faults_running += unit.waits_for_deadline
                        self.others_running += not unit.waits_for_deadline
                        return self.pending.pop(index)
                self._cond.wait(timeout=1.0)
            return None

    def finished(self, unit: JobUnit) -> None:
        """A lane is done with ``unit``: its slot is free."""
        with self._cond:
            self.faults_running -= unit.waits_for_deadline
            self.others_running -= not unit.waits_for_deadline
            self._cond.notify_all()

    def drop(self) -> None:
        """Start nothing more (a lane failed, or the run is interrupted)."""
        with self._cond:
            self.pending.clear()
            self._cond.notify_all()


class DevicePool:
    """GPUs handed to units of one-GPU-per-rank jobs: ``acquire(n)`` blocks until ``n`` are free."""

    def __init__(self, devices: int) -> None:
        self.free = list(range(devices))
        self.size = devices
        self._cond = threading.Condition()

    def acquire(self, count: int) -> list[int]:
        """Take ``count`` free GPUs (all of them when ``count`` exceeds the node), waiting for them."""
        count = min(count, self.size)
        with self._cond:
            self._cond.wait_for(lambda: len(self.free) >= count)
            taken, self.free = self.free[:count], self.free[count:]
            return taken

    def release(self, devices: list[int]) -> None:
        """Give GPUs back."""
        with self._cond:
            self.free = sorted(self.free + devices)
            self._cond.notify_all()


def run_units(units: Sequence[JobUnit], settings_for_world: Callable, run_unit: Callable, *, lanes: int,
              devices: DevicePool | None = None, max_faults: int = MAX_FAULT_UNITS) -> None:
    """Run every unit in order, ``lanes`` at a time (at most ``max_faults`` that wait for a deadline);
    ``run_unit(settings, unit)`` runs one (a JobRunner)."""

    def one(unit: JobUnit) -> None:
        """Run a unit on its settings, with its own GPUs when the ranks do not share them."""
        settings = settings_for_world(unit.world)
        if devices is None:
            run_unit(settings, unit)
            return
        taken = devices.acquire(unit.world)
        try:
            env = dict(settings.env, CUDA_VISIBLE_DEVICES=",".join(map(str, taken)))
            run_unit(replace(settings, env=env), unit)
        finally:
            devices.release(taken)

    if lanes <= 1:
        for unit in units:
            one(unit)
        return
    queue = _UnitQueue(units, max_faults)

    def lane() -> None:
        """Run units from the queue until none is left."""
        while (unit := queue.take()) is not None:
            try:
                one(unit)
            finally:
                queue.finished(unit)

    with ThreadPoolExecutor(max_workers=lanes, thread_name_prefix="lane") as pool:
        futures = [pool.submit(lane) for _ in range(lanes)]
        try:
            done, _ = wait(futures, return_when=FIRST_EXCEPTION)
        finally:
            queue.drop()  # an error in one lane, or an interrupt: the other lanes finish their unit and stop
        for future in done:
            future.result()  # re-raise the first error of a lane


__all__ = ["DevicePool", "JobUnit", "MAX_FAULT_UNITS", "default_lanes", "job_units", "order_units", "run_units"]
