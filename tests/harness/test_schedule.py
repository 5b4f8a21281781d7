"""The order and concurrency of job units: longest first once measured, and a cap on fault units at once."""

import json
import threading
import time
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


def test_no_more_units_waiting_for_a_deadline_at_once_than_the_cap_and_every_unit_runs():
    units = ([unit(f"t{i}", timeout=True) for i in range(20)] + [unit(f"f{i}", isolated=True) for i in range(6)] +
             [unit(f"b{i}") for i in range(6)])
    unfinished_others = {u.cases[0].key for u in units if not u.waits_for_deadline}
    lock, running, ran = threading.Lock(), {"t": 0, "f": 0}, []
    peak = {"t while others": 0, "t alone": 0, "f": 0}

    def run_unit(_settings, u):
        """Count the timeout units (while other units are unfinished, and after) and the other fault units."""
        key = u.cases[0].key
        kind = "t" if u.waits_for_deadline else "f" if u.isolated else ""
        with lock:
            ran.append(key)
            if kind:
                running[kind] += 1
                when = "f" if kind == "f" else "t while others" if unfinished_others else "t alone"
                peak[when] = max(peak[when], running[kind])
        time.sleep(0.05)
        with lock:
            if kind:
                running[kind] -= 1
            unfinished_others.discard(key)

    run_units(units, lambda world: None, run_unit, lanes=5, max_faults=2)
    assert peak["t while others"] == 2 and peak["f"] > 2  # the cap holds the spinners only, while others remain
    assert peak["t alone"] > 2  # once only spinners are left they take every lane
    assert sorted(ran) == sorted(u.cases[0].key for u in units)


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
