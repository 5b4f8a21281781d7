"""The order and concurrency of job units: longest first once measured, and a cap on fault units at once."""

import json
import threading
from dataclasses import dataclass

import pytest

from harness.launch.durations import MAX_UNITS, UnitDurations, unit_key
from harness.launch import schedule
from harness.launch.schedule import JobUnit, default_lanes, order_units, run_units


@dataclass(frozen=True)
class FakeCase:
    """The parts of a case the scheduler reads."""

    key: str
    size: str = "cpu"
    launches: int = 1
    outcomes: tuple = ("golden",)


def unit(name: str, *, world: int = 2, size: str = "cpu", isolated: bool = False, timeout: bool = False) -> JobUnit:
    """A one-case unit named ``name`` (a fault case expecting a timeout with ``timeout``)."""
    outcomes = ("timeout",) if timeout else ("golden",)
    return JobUnit(world, (FakeCase(name, size, outcomes=outcomes),), isolated or timeout)


def keys_of(units):
    """The units' duration keys."""
    return [u.key("virtual", "kernel") for u in units]


def test_unmeasured_units_keep_the_planned_order():
    units = [unit("a"), unit("b", isolated=True), unit("c", size="gpu")]
    assert order_units(units, UnitDurations(None), keys_of(units), pool_busy=False) == units


def test_measured_units_run_longest_first_and_gpu_batches_wait_for_a_busy_pool(tmp_path):
    units = [unit("short"), unit("fault", isolated=True), unit("gpu", size="gpu")]
    durations = UnitDurations(tmp_path / "d.json")
    for u, seconds in zip(units, [3.0, 12.0, 30.0]):
        durations.note(u.key("virtual", "kernel"), seconds)
    durations.save()
    again = UnitDurations(tmp_path / "d.json")
    names = lambda us: [u.cases[0].key for u in us]  # noqa: E731
    assert names(order_units(units, again, keys_of(units), pool_busy=False)) == ["gpu", "fault", "short"]
    assert names(order_units(units, again, keys_of(units), pool_busy=True)) == ["fault", "short", "gpu"]


def test_the_durations_file_is_a_hint_bad_files_read_empty_and_it_stays_bounded(tmp_path):
    path = tmp_path / "d.json"
    path.write_text("{not json")
    assert UnitDurations(path).past == {}
    path.write_text(json.dumps({"version": 99, "units": {"k": 1}}))
    assert UnitDurations(path).past == {}
    durations = UnitDurations(path)
    for i in range(MAX_UNITS + 5):
        durations.note(f"k{i}", i)
    durations.save()
    kept = UnitDurations(path).past
    assert len(kept) == MAX_UNITS and f"k{MAX_UNITS + 4}" in kept and "k0" not in kept
    assert unit_key("virtual", "kernel", 2, ["b", "a"]) == unit_key("virtual", "kernel", 2, ["a", "b"])
    assert unit_key("virtual", "kernel", 2, ["a"]) != unit_key("virtual", "kernel", 4, ["a"])


def test_lanes_follow_the_cores_and_the_pool():
    assert default_lanes(nnodes=1, tp=None, cores=16, pool_busy=True) == 5
    assert default_lanes(nnodes=1, tp=None, cores=16, pool_busy=False) == 8
    assert default_lanes(nnodes=2, tp=None, cores=16, pool_busy=False) == 1
    assert default_lanes(nnodes=1, tp=None, cores=2, pool_busy=False) == 2
    assert default_lanes(nnodes=1, tp=None, cores=1, pool_busy=False) == 1


class HeldUnits:
    """Units that run until the test releases them: which are running, the peaks of timeout units at once (while
    other units are unfinished, and after), every wait bounded so that a scheduler bug fails instead of hanging."""

    def __init__(self, units) -> None:
        self.cond = threading.Condition()
        self.running: set[str] = set()
        self.released: set[str] = set()
        self.ran: list[str] = []
        self.unfinished_others = {u.cases[0].key for u in units if not u.waits_for_deadline}
        self.peak = {"t while others": 0, "t alone": 0, "f": 0}
        self.kind = {u.cases[0].key: "t" if u.waits_for_deadline else "f" if u.isolated else "b" for u in units}

    def count(self, kind: str) -> int:
        """How many units of ``kind`` are running now (caller holds the condition)."""
        return sum(self.kind[key] == kind for key in self.running)

    def run_unit(self, _settings, u) -> None:
        """Note the start and the peaks, then hold the lane until the test releases this unit."""
        key = u.cases[0].key
        with self.cond:
            self.ran.append(key)
            self.running.add(key)
            if self.kind[key] == "f":
                self.peak["f"] = max(self.peak["f"], self.count("f"))
            if self.kind[key] == "t":
                when = "t while others" if self.unfinished_others else "t alone"
                self.peak[when] = max(self.peak[when], self.count("t"))
            self.cond.notify_all()
            assert self.cond.wait_for(lambda: key in self.released, timeout=60), f"{key} never released"
            self.running.discard(key)
            self.unfinished_others.discard(key)
            self.cond.notify_all()

    def wait_until(self, predicate, what: str) -> None:
        """Block until ``predicate()`` holds (checked under the condition); fail after 60 s (a hang guard)."""
        with self.cond:
            assert self.cond.wait_for(predicate, timeout=60), f"never reached: {what}; running {sorted(self.running)}"

    def release(self, keys) -> None:
        """Let the units ``keys`` finish."""
        with self.cond:
            self.released.update(keys)
            self.cond.notify_all()


def test_no_more_units_waiting_for_a_deadline_at_once_than_the_cap_and_every_unit_runs():
    units = ([unit(f"t{i}", timeout=True) for i in range(20)] + [unit(f"f{i}", isolated=True) for i in range(6)] +
             [unit(f"b{i}") for i in range(6)])
    held = HeldUnits(units)
    errors = []

    def schedule_all() -> None:
        """The scheduler under test, in its own thread so that this one can hold and release units."""
        try:
            run_units(units, lambda world: None, held.run_unit, lanes=5, max_faults=2)
        except BaseException as exc:  # noqa: BLE001 - re-raised by the test thread below
            errors.append(exc)

    scheduler = threading.Thread(target=schedule_all, daemon=True)
    scheduler.start()
    # nothing finishes yet: the five lanes fill with the two timeout units the cap allows and three fault units
    held.wait_until(lambda: len(held.running) == 5, "five lanes busy")
    with held.cond:
        assert held.running == {"t0", "t1", "f0", "f1", "f2"}
    # the other units finish one at a time; each freed lane takes the next unit that is not a timeout unit
    others = [u.cases[0].key for u in units if not u.waits_for_deadline]
    for key in others:
        held.wait_until(lambda key=key: key in held.running, f"{key} started")
        held.release([key])
    held.wait_until(lambda: not held.unfinished_others and held.count("t") == 5, "timeout units on every lane")
    held.release(u.cases[0].key for u in units)
    scheduler.join(timeout=60)
    assert not scheduler.is_alive() and not errors, errors
    assert held.peak["t while others"] == 2 and held.peak["f"] == 3  # the cap holds the spinners only
    assert held.peak["t alone"] == 5  # once only spinners are left they take every lane
    assert sorted(held.ran) == sorted(u.cases[0].key for u in units)


def test_an_error_in_one_lane_stops_the_others_starting_units_and_is_raised(monkeypatch):
    units = [unit("bad")] + [unit(f"u{i}") for i in range(20)]
    ran = []
    dropped = threading.Event()
    drop = schedule._UnitQueue.drop

    def drop_and_say(self):
        """The queue's own drop, then the event the other lane's unit waits for."""
        drop(self)
        dropped.set()
    monkeypatch.setattr(schedule._UnitQueue, "drop", drop_and_say)

    def run_unit(_settings, u):
        """Fail on the first unit; the other lane's unit runs until the queue has been dropped."""
        ran.append(u.cases[0].key)
        if u.cases[0].key == "bad":
            raise RuntimeError("lane failed")
        assert dropped.wait(timeout=60)

    with pytest.raises(RuntimeError, match="lane failed"):
        run_units(units, lambda world: None, run_unit, lanes=2)
    # the other lane may have taken one unit before the failure (it ran until the queue was dropped), never more
    assert "bad" in ran and set(ran) <= {"bad", "u0"}, ran
