"""Time registered benchmark cases on one GPU: CUDA-graph replays and the eager loop, side by side.

Method, per run:

1. Machine figures, measured now: device-to-device copy bandwidth (a copy of
   ``copy_bytes`` far larger than the L2, bytes read plus written over the
   median time), and the per-launch time of an empty kernel
   (``torch.cuda._sleep(0)``) inside a CUDA graph and eagerly.
2. Per case: ``setup`` (compiles, builds its kernel) outside any capture;
   ``input_sets`` distinct input sets (``floor.rotation_sets``: footprint at
   least twice the L2 where affordable); one eager pass over every set (warm
   caches, lazy compilation); then a CUDA graph capturing
   ``calls_per_replay`` calls that walk the sets in turn. ``warmup`` replays,
   then ``reps`` replays each bracketed by CUDA events; per-call time is the
   replay time over ``calls_per_replay``. The eager loop is the same
   sequence of calls launched from Python, bracketed the same way.
3. Statistics (``stats.summarize``): median, p10, p90; the floor
   (``floor.floor_us``) for each mode from the case's ``bytes_moved``, the
   measured bandwidth and that mode's empty-launch time; efficiency =
   floor / median (1.0 means at the floor); where the case gives its floor
   terms, the entry carries them (``floor_terms``) and the formula as text
   (``floor_formula``). A case that is not capturable (``Prepared.capturable``
   False) is timed eagerly only; its entry says so (``graph_mode``).

All timing runs on one side stream; every wait is a stream or event
synchronize on work this runner enqueued. A case that raises is recorded in
``failed`` and the run continues; a lost CUDA context ends the run, and the
cases it did not reach are listed in ``not_run``.

The document is built in place and handed to every listener as it grows
(``RunListener``): once the machine figures are in, before each case and
after each case (with its entry or failure), so that a caller can print
each case as it completes and keep the document on disk after every case;
an interrupted run then leaves what finished. Each entry also carries its
wall times, ``setup_s`` (setup and sanity call) and ``timed_s`` (input sets,
capture, warm-up and timing), from which ``harness.bench.budget`` estimates
later runs.
"""

from __future__ import annotations

import time
import traceback
from typing import Callable, Protocol, Sequence

import torch

from harness.bench.budget import DEFAULT_REPS, DEFAULT_WARMUP
from harness.bench.floor import H200_L2_BYTES, MAX_SETS, floor_formula, floor_us, rotation_sets, terms_json
from harness.bench.registry import BenchCase, BenchContext, Prepared
from harness.bench.results import SCHEMA, utc_now, versions
from harness.bench.stats import summarize

ROTATION_FACTOR = 2.0


class RunListener(Protocol):
    """What ``run_cases`` tells as the run goes: the document is the same growing object each time."""

    def machine_measured(self, document: dict) -> None:
        """The machine figures are in; no case has run yet."""

    def case_started(self, document: dict, case: BenchCase) -> None:
        """``case`` is about to be set up."""

    def case_finished(self, document: dict, case: BenchCase, entry: dict, failed: bool) -> None:
        """``case`` ended: ``entry`` is its results entry, or its failure record when ``failed``."""


def device_info(device: torch.device) -> dict:
    """Name, capability, SM count, memory and L2 size of ``device``."""
    props = torch.cuda.get_device_properties(device)
    return {
        "name": props.name,
        "capability": f"{props.major}.{props.minor}",
        "sm_count": props.multi_processor_count,
        "memory_bytes": props.total_memory,
        "l2_bytes": int(getattr(props, "L2_cache_size", 0) or H200_L2_BYTES),
    }


def _time_each(stream: torch.cuda.Stream, body, reps: int) -> list[float]:
    """Run ``body()`` ``reps`` times on ``stream``, each between two events; return milliseconds per rep."""
    pairs = []
    with torch.cuda.stream(stream):
        for _ in range(reps):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record(stream)
            body()
            end.record(stream)
            pairs.append((start, end))
    stream.synchronize()
    return [start.elapsed_time(end) for start, end in pairs]


def measure_copy_bandwidth(device: torch.device, stream: torch.cuda.Stream, *, copy_bytes: int, reps: int) -> float:
    """Device-to-device copy bandwidth (bytes read + written per second), median of ``reps`` copies."""
    source = torch.empty(copy_bytes, dtype=torch.uint8, device=device)
    target = torch.empty_like(source)
    with torch.cuda.stream(stream):
        source.fill_(1)
        for _ in range(3):
            target.copy_(source)
    times_ms = _time_each(stream, lambda: target.copy_(source), reps)
    median_s = summarize(times_ms)["median_us"] / 1e3
    del source, target
    return 2 * copy_bytes / median_s


def _captured(stream: torch.cuda.Stream, body: Callable[[], None], *, warmup: int) -> torch.cuda.CUDAGraph:
    """``body`` run once eagerly on ``stream`` (its lazy set-up out of the capture), captured, and replayed ``warmup`` times."""
    with torch.cuda.stream(stream):
        body()
    stream.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        body()
    with torch.cuda.stream(stream):
        for _ in range(warmup):
            graph.replay()
    return graph


def measure_launch_us(stream: torch.cuda.Stream, *, launches: int, reps: int) -> tuple[float, float]:
    """Per-launch microseconds of an empty kernel: (inside a CUDA graph, eagerly)."""

    def burst() -> None:
        """``launches`` empty kernels on the current stream."""
        for _ in range(launches):
            torch.cuda._sleep(0)

    graph = _captured(stream, burst, warmup=3)
    graph_ms = _time_each(stream, graph.replay, reps)
    eager_ms = _time_each(stream, burst, reps)
    per = 1e3 / launches
    return summarize(graph_ms)["median_us"] * per, summarize(eager_ms)["median_us"] * per


def time_prepared(
    prepared: Prepared,
    stream: torch.cuda.Stream,
    *,
    l2_bytes: int,
    warmup: int,
    reps: int,
    min_calls: int = 16,
    max_sets: int = MAX_SETS,
) -> dict:
    """Graph and eager per-call timings of one prepared case, with its rotation figures (at most ``max_sets``
    input sets); ``graph_chained`` too where the case declares ``rank_chains``."""
    sets_count, l2_cold = rotation_sets(prepared.input_bytes, l2_bytes, factor=ROTATION_FACTOR, max_sets=max_sets)
    sets = [prepared.new_input_set() for _ in range(sets_count)]
    calls = max(min_calls, sets_count)
    sequence = [sets[i % sets_count] for i in range(calls)]

    def loop() -> None:
        """Every call of one replay's sequence, on the current stream."""
        for inputs in sequence:
            prepared.launch(inputs)

    def chained_loop() -> None:
        """The same calls with every rank's calls back to back on its stream (``Prepared.rank_chains``)."""
        with prepared.rank_chains():
            loop()

    torch.cuda.synchronize()
    graph_ms = chained_ms = None
    if prepared.capturable:
        graph = _captured(stream, loop, warmup=warmup)
        graph_ms = _time_each(stream, graph.replay, reps)
        del graph
        if prepared.rank_chains is not None:
            graph = _captured(stream, chained_loop, warmup=warmup)
            chained_ms = _time_each(stream, graph.replay, reps)
            del graph
    with torch.cuda.stream(stream):
        for _ in range(warmup):
            loop()
    eager_ms = _time_each(stream, loop, reps)
    del sequence, sets
    per_call = 1e3 / calls
    eager = summarize([t * per_call for t in eager_ms])
    timing = {
        "input_sets": sets_count,
        "footprint_bytes": sets_count * prepared.input_bytes,
        "l2_cold": l2_cold,
        "calls_per_replay": calls,
        "graph": summarize([t * per_call for t in graph_ms]) if graph_ms else eager,
        "eager": eager,
    }
    if chained_ms is not None:
        timing["graph_chained"] = summarize([t * per_call for t in chained_ms])
    if graph_ms is None:
        timing["graph_mode"] = "eager launches: not capturable in a CUDA graph, the graph columns repeat them"
    return timing


def case_result(case: BenchCase, prepared: Prepared, timing: dict, machine: dict) -> dict:
    """The results entry of one case: its declaration, timings, floors and efficiencies."""
    floors = {
        mode: floor_us(
            prepared.bytes_moved,
            machine["copy_bandwidth_bytes_per_s"],
            machine[f"{mode}_launch_us"],
            prepared.kernels_per_call,
        )
        for mode in ("graph", "eager")
    }
    return {
        "family": case.family,
        "name": case.name,
        "params": dict(case.params),
        "description": case.description,
        "references": [dict(r) for r in case.references],
        "bytes_moved": prepared.bytes_moved,
        "input_bytes": prepared.input_bytes,
        "kernels_per_call": prepared.kernels_per_call,
        **({"floor_terms": terms_json(prepared.floor_terms),
            "floor_formula": floor_formula(prepared.floor_terms, prepared.kernels_per_call)}
           if prepared.floor_terms else {}),
        **timing,
        "floor_us": floors,
        "efficiency": {mode: floors[mode] / timing[mode]["median_us"] for mode in ("graph", "eager")},
    }


def measure_machine(device: torch.device, stream: torch.cuda.Stream, *, copy_bytes: int, launches: int,
                    reps: int) -> dict:
    """The run's machine figures: copy bandwidth (at most a quarter of free memory) and empty-launch times."""
    copy_bytes = min(copy_bytes, torch.cuda.mem_get_info(device)[0] // 4)
    graph_launch_us, eager_launch_us = measure_launch_us(stream, launches=launches, reps=max(10, reps // 5))
    return {
        "copy_bandwidth_bytes_per_s": measure_copy_bandwidth(device, stream, copy_bytes=copy_bytes, reps=max(10, reps // 5)),
        "copy_bytes": copy_bytes,
        "graph_launch_us": graph_launch_us,
        "eager_launch_us": eager_launch_us,
    }


def new_document(command: Sequence[str], date: str, info: dict, machine: dict, settings: dict,
                 selected: Sequence[str], failed: Sequence[dict] = ()) -> dict:
    """A results document (``rankcheck-bench/1``) with no case yet, status ``running``."""
    return {
        "schema": SCHEMA, "command": list(command), "date": date, "device": info, "versions": versions(),
        "settings": dict(settings), "machine": machine, "status": "running", "selected": list(selected),
        "cases": [], "failed": list(failed),
    }


def run_cases(
    cases: Sequence[BenchCase],
    *,
    command: Sequence[str],
    device: torch.device | None = None,
    warmup: int = DEFAULT_WARMUP,
    reps: int = DEFAULT_REPS,
    copy_bytes: int = 1 << 30,
    launches: int = 256,
    failed: Sequence[dict] = (),
    listeners: Sequence[RunListener] = (),
) -> dict:
    """Measure the machine, then every case, telling ``listeners``; return the results document (``rankcheck-bench/1``)."""
    if not torch.cuda.is_available():
        raise RuntimeError("bench needs a CUDA GPU (torch.cuda.is_available() is False)")
    if warmup < 0 or reps < 1:
        raise ValueError(f"warmup must be >= 0 and reps >= 1, got warmup={warmup}, reps={reps}")
    device = device or torch.device("cuda", torch.cuda.current_device())
    torch.cuda.set_device(device)
    info = device_info(device)
    stream = torch.cuda.Stream(device=device)
    date = utc_now()
    machine = measure_machine(device, stream, copy_bytes=copy_bytes, launches=launches, reps=reps)
    settings = {"warmup": warmup, "reps": reps, "rotation_factor": ROTATION_FACTOR, "launches": launches}
    document = new_document(command, date, info, machine, settings, [case.key for case in cases], failed)
    context = BenchContext(device=device, l2_bytes=info["l2_bytes"])

    def measure(case: BenchCase) -> dict:
        """Set up and time ``case``; its results entry with wall times."""
        started = time.monotonic()
        prepared = case.setup(context)
        set_up = time.monotonic()
        timing = time_prepared(prepared, stream, l2_bytes=info["l2_bytes"], warmup=warmup, reps=reps)
        entry = case_result(case, prepared, timing, machine)
        entry["setup_s"], entry["timed_s"] = set_up - started, time.monotonic() - set_up
        return entry

    def settle() -> None:
        """Wait for the case's work and free its memory; raises when a trap killed the context."""
        torch.cuda.synchronize(device)
        torch.cuda.empty_cache()

    return run_loop(document, cases, measure, settle, listeners)


def run_loop(
    document: dict,
    cases: Sequence[BenchCase],
    measure: Callable[[BenchCase], dict],
    settle: Callable[[], None],
    listeners: Sequence[RunListener] = (),
) -> dict:
    """Measure each case into ``document`` in turn, telling ``listeners``; set its ``status``; return it.

    A case whose ``measure`` raises is recorded in ``failed`` and the run goes
    on; when ``settle`` raises after a case (the CUDA context is gone) the run
    stops, with the cases it did not reach in ``not_run``.
    """
    for listener in listeners:
        listener.machine_measured(document)
    for index, case in enumerate(cases):
        for listener in listeners:
            listener.case_started(document, case)
        try:
            entry, is_failure = measure(case), False
            document["cases"].append(entry)
        except Exception as exc:  # noqa: BLE001 - recorded, the run goes on
            entry, is_failure = _failure(case, exc, traceback.format_exc()), True
            document["failed"].append(entry)
        try:
            settle()
        except Exception as exc:  # noqa: BLE001 - a trap killed the context: keep what finished
            lost = _failure(case, exc, None, prefix="CUDA context lost: ")
            document["failed"].append(lost)
            entry, is_failure = (entry if is_failure else lost), True
            document["not_run"] = [later.key for later in cases[index + 1:]]
        for listener in listeners:
            listener.case_finished(document, case, entry, is_failure)
        if "not_run" in document:
            document["status"] = "aborted"
            return document
    document["status"] = "complete"
    return document


def _failure(case: BenchCase, exc: BaseException, trace: str | None, prefix: str = "") -> dict:
    """The failure record of ``case``: its key, the error in one line and the tail of the traceback."""
    record = {"case": case.key, "error": f"{prefix}{type(exc).__name__}: {exc}"}
    if trace:
        record["traceback"] = trace[-4000:]
    return record
