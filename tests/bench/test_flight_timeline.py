"""The flight-stamp timeline (harness.bench.flight_timeline) on synthetic records: runs, gaps, skew, refusals."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from harness.bench.flight_timeline import BETWEEN_CALLS, RANK_SKEW, format_timeline, timeline


@dataclass
class Rec:
    """The fields of a kernels.flight.LaunchRecord that the timeline reads."""

    launch: int
    kernel: str
    start_ns: int
    end_ns: int | None
    status: str = "ended"


def chain(calls: int, *, offset: int = 0, consumer_ns: int = 1600) -> list[Rec]:
    """A rank's publish/consumer chain: publish 400 ns, a 1000 ns gap, the consumer, 3000 ns to the next call."""
    records, clock = [], offset
    for call in range(calls):
        records.append(Rec(2 * call, "publish", clock, clock + 400))
        records.append(Rec(2 * call + 1, "consumer", clock + 1400, clock + 1400 + consumer_ns))
        clock += 1400 + consumer_ns + 3000
    return records


def by_phase(table: dict) -> dict:
    """Row medians by phase name."""
    return {row["phase"]: row["median_ns"] for row in table["phases"]}


def test_runs_gaps_and_the_call_period_of_one_rank():
    table = timeline({0: chain(4)}, calls=4, kernels_per_call=2)
    assert by_phase(table) == {"publish": 400, "publish -> consumer": 1000, "consumer": 1600, BETWEEN_CALLS: 3000}
    assert table["call_period_ns"] == 6000
    assert [row["phase"] for row in table["phases"]][-1] == BETWEEN_CALLS
    assert "median call period 6.00 us" in format_timeline(table, "t")


def test_only_the_last_calls_count_and_ranks_pool_with_their_skew():
    early = chain(6, consumer_ns=9000)[:4]  # two slow calls before the ones measured
    late = [Rec(r.launch + 4, r.kernel, r.start_ns + 10**6, r.end_ns + 10**6) for r in chain(4)]
    skewed = [Rec(r.launch, r.kernel, r.start_ns + 250, r.end_ns + 250) for r in late]
    table = timeline({0: early + late, 1: skewed}, calls=4, kernels_per_call=2)
    assert by_phase(table)["consumer"] == 1600
    assert by_phase(table)[RANK_SKEW] == 250


def test_a_launch_that_never_ended_is_refused_not_timed():
    records = chain(3)
    records[-1] = Rec(records[-1].launch, "consumer", records[-1].start_ns, None, "begun")
    with pytest.raises(ValueError, match="rank 0 launch 5 .*begun, not ended"):
        timeline({0: records}, calls=3, kernels_per_call=2)


def test_too_few_records_are_refused():
    with pytest.raises(ValueError, match="rank 1: 4 records, expected 3 calls of 2"):
        timeline({0: chain(3), 1: chain(2)}, calls=3, kernels_per_call=2)
