"""Where a call's time goes, from the flight recorder's own stamps: every kernel's run and the gaps between them.

Every kernel of every family writes a begin and an end record into
its instance's flight ring (``kernels.flight``): ``start_ns`` is
``%globaltimer`` when thread 0 of CTA 0 began, ``end_ns`` when the kernel's
completion point ended it (the last CTA for kernels that count their CTAs,
CTA 0 elsewhere). ``%globaltimer`` is one clock for the whole GPU, so the
records of ranks sharing a GPU (virtual ranks, or processes) line up on
one time axis. The recorder is on in every build that the bench times, so
this breakdown needs no stamped variant and costs nothing extra.

From each rank's records in launch order (the last ``calls`` calls of
``kernels_per_call`` launches each), ``timeline`` computes, per rank and
call:

- ``<kernel>``: the kernel's run, ``end_ns - start_ns``;
- ``<kernel> -> <next>``: the gap from one kernel's end to the next
  kernel's begin on the same rank within the call (launch latency, the PDL
  handoff, a wait for a stream dependency);
- ``between calls``: from the call's last end to the next call's first
  begin on the same rank;

and per launch, ``rank skew``: the latest rank's begin minus the earliest
rank's begin of the same launch number (what a waiting kernel waits for
when its peers start late). Each row is the median, least and most over
ranks and calls, with its share of the median call period (a rank's first
begin of one call to its first begin of the next). A begin that never
ended (``status`` not ``ended``) leaves the measurement: ``timeline``
refuses it, because a hang is not a timing.

Pure Python over ``LaunchRecord``-like objects (``launch``, ``kernel``,
``start_ns``, ``end_ns``, ``status``), so the CPU tests check it on
synthetic records; ``measure_flight`` replays a family's call on virtual
ranks of this GPU in a CUDA graph and returns their rings' records (a
family's ``BREAKDOWN_FLIGHT`` hook builds the ranks and the call:
``harness.bench.breakdown``).
"""

from __future__ import annotations

import statistics
from typing import Any, Callable, Mapping, Sequence

BETWEEN_CALLS = "between calls"
RANK_SKEW = "rank skew"
FLIGHT_CALLS = 16  # calls per captured graph: enough between-call gaps for their median


def _last_calls(records: Sequence[Any], calls: int, kernels_per_call: int, rank: int) -> list:
    """The rank's last ``calls * kernels_per_call`` records in launch order, every one ended."""
    ordered = sorted(records, key=lambda r: r.launch)[-calls * kernels_per_call:]
    if len(ordered) < calls * kernels_per_call:
        raise ValueError(f"rank {rank}: {len(ordered)} records, expected {calls} calls of {kernels_per_call}")
    for record in ordered:
        if record.status != "ended" or record.end_ns is None:
            raise ValueError(f"rank {rank} launch {record.launch} ({record.kernel}): {record.status}, not ended; "
                             "a hang is not a timing")
    return ordered


def _row(name: str, values_ns: Sequence[int], period_ns: float) -> dict:
    """One table row: median, least and most of ``values_ns`` and the median's share of the call period."""
    median = statistics.median(values_ns)
    return {"phase": name, "median_ns": median, "min_ns": min(values_ns), "max_ns": max(values_ns),
            "share": median / period_ns if period_ns else 0.0}


def timeline(records_by_rank: Mapping[int, Sequence[Any]], *, calls: int, kernels_per_call: int) -> dict:
    """Per kernel run and gap (module docstring): rows in chain order, the call period and the rank skew."""
    if calls < 2 or kernels_per_call < 1 or not records_by_rank:
        raise ValueError("timeline: expected >= 2 calls, >= 1 kernel per call and at least one rank")
    samples: dict[str, list[int]] = {}
    periods: list[int] = []
    begins: dict[int, list[int]] = {}
    for rank, records in sorted(records_by_rank.items()):
        ordered = _last_calls(records, calls, kernels_per_call, rank)
        for index, record in enumerate(ordered):
            begins.setdefault(record.launch, []).append(record.start_ns)
            samples.setdefault(record.kernel, []).append(record.end_ns - record.start_ns)
            if index + 1 == len(ordered):
                continue
            following = ordered[index + 1]
            if (index + 1) % kernels_per_call:
                name = f"{record.kernel} -> {following.kernel}"
            else:
                name = BETWEEN_CALLS
                periods.append(following.start_ns - ordered[index + 1 - kernels_per_call].start_ns)
            samples.setdefault(name, []).append(following.start_ns - record.end_ns)
    period = statistics.median(periods)
    rows = [_row(name, values, period) for name, values in samples.items() if name != BETWEEN_CALLS]
    rows.append(_row(BETWEEN_CALLS, samples[BETWEEN_CALLS], period))
    skews = [max(starts) - min(starts) for starts in begins.values() if len(starts) == len(records_by_rank)]
    if len(records_by_rank) > 1 and skews:
        rows.append(_row(RANK_SKEW, skews, period))
    return {"phases": rows, "call_period_ns": period, "ranks": len(records_by_rank), "calls": calls,
            "kernels_per_call": kernels_per_call}


def format_timeline(table: dict, title: str) -> str:
    """A fixed-width table of one ``timeline`` result (microseconds)."""
    lines = [title, f"{'phase':<24}{'median us':>11}{'min us':>10}{'max us':>10}{'share':>8}"]
    for row in table["phases"]:
        lines.append(f"{row['phase']:<24}{row['median_ns'] / 1e3:>11.2f}{row['min_ns'] / 1e3:>10.2f}"
                     f"{row['max_ns'] / 1e3:>10.2f}{row['share'] * 100:>7.1f}%")
    lines.append(f"median call period {table['call_period_ns'] / 1e3:.2f} us per rank "
                 f"({table['ranks']} ranks, {table['calls']} calls of {table['kernels_per_call']} kernels)")
    return "\n".join(lines)


def measure_flight(ranks: Sequence[tuple[Any, Any]], call: Callable[[], None], *, warmup: int, reps: int,
                   calls: int = FLIGHT_CALLS) -> tuple[dict[int, list], list[float]]:
    """``(records by rank, us per call of each timed replay)``: ``calls`` calls of ``call()`` captured in one CUDA
    graph after ``warmup`` eager ones, replayed ``reps`` times; ``ranks`` are ``(fabric, system)`` pairs whose
    systems keep a flight recorder (``system.api.flight_recorder``)."""
    import torch  # noqa: PLC0415 - the pure table above needs no torch

    device = torch.device("cuda", torch.cuda.current_device())
    for _ in range(warmup):
        call()
    torch.cuda.synchronize(device)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            call()
    per_call_us = []
    for _ in range(reps):
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        begin.record()
        graph.replay()
        end.record()
        torch.cuda.synchronize(device)
        per_call_us.append(begin.elapsed_time(end) * 1e3 / calls)
    records = {rank: list(system.api.flight_recorder.records().records) for rank, (_, system) in enumerate(ranks)}
    return records, per_call_us
