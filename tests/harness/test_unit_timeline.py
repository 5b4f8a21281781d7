"""The unit timeline: start order, lane occupancy and the longest unit, on a fake clock; units.json on disk."""

import json
from types import SimpleNamespace

from harness.launch.unit_timeline import FILE_NAME, UnitTimeline


class FakeClock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def unit(world: int, keys: list[str], kind: str) -> SimpleNamespace:
    """The parts of a job unit the timeline reads."""
    return SimpleNamespace(world=world, cases=[SimpleNamespace(key=k) for k in keys], kind=kind)


def test_occupancy_and_the_longest_unit(tmp_path):
    clock = FakeClock()
    timeline = UnitTimeline(2, clock=clock)
    a = timeline.start()  # lane 0: 0-10 s
    clock.now += 2
    b = timeline.start()  # lane 1: 2-4 s, then idle
    clock.now += 2
    # its seconds, for the durations file
    assert timeline.note(b, unit(2, ["f/x", "f/y"], "cpu-size batch"), after_last_verdict_s=0.75) == 2.0
    clock.now += 6
    timeline.note(a, unit(8, ["f/hang"], "fault, waits for its deadline"))
    doc = json.loads(timeline.write(tmp_path).read_text())
    assert (tmp_path / FILE_NAME).exists()
    assert [u["start_s"] for u in doc["units"]] == [0.0, 2.0]  # start order, from the first unit's start
    assert {u["lane"] for u in doc["units"]} == {"MainThread"}  # the thread that ran the unit
    assert doc["wall_s"] == 10.0 and doc["lanes"] == 2
    line = timeline.summary()
    assert "2 on 2 lane(s) in 10.0 s" in line and "busy 60% (12.0 unit-s)" in line
    assert "the longest 10.0 s from 0.0 s: world 8, 1 case(s), fault, waits for its deadline, f/hang" in line
    assert [u["after_last_verdict_s"] for u in doc["units"]] == [0.0, 0.75]


def test_unit_time_by_kind_and_after_the_last_verdicts():
    clock = FakeClock()
    timeline = UnitTimeline(3, clock=clock)
    starts = [timeline.start() for _ in range(3)]
    for seconds, start, kind, after in ((4, starts[0], "fault", 0.0), (3, starts[1], "cpu-size batch", 1.25),
                                        (2, starts[2], "fault", 0.5)):
        clock.now = 100.0 + seconds
        timeline.note(start, unit(2, ["f/a"], kind), after_last_verdict_s=after)
    units_line, split = timeline.summary().splitlines()
    assert units_line.startswith("# Units : 3 on 3 lane(s)")
    # most unit-s first: fault 4 + 2, then the batch's 3; 1.25 + 0.5 after the last verdicts
    assert split == ("# Unit time : 9.0 unit-s by kind: fault 2 (6.0), cpu-size batch 1 (3.0); 1.8 of them after "
                     "the units' last verdicts (their job processes ending)")


def test_no_unit_is_said_so(tmp_path):
    timeline = UnitTimeline(4)
    assert timeline.summary() == "# Units : none ran"
    assert json.loads(timeline.write(tmp_path).read_text())["units"] == []
