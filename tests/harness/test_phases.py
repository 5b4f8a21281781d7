"""Per-case phase times: measured per rank in the worker, the slowest rank's kept, summed in the footer.

One real cpu-launcher run (torchrun + gloo, the tiny test scenario at world
2) checks that every rank's result and the JSON report carry every phase,
non-negative, that a rank's phases never add up to more than its case took,
and that the footer names them; the rest are unit tests of the clock (a
compile inside a phase is moved to ``compile``, a load to ``load``), of the first-case start-up,
of the slowest-rank merge and of the footer's summary.
"""

import io
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.wire import phases
from harness.wire.phases import PHASES, PhaseClock, slowest
from harness.reports.report import Report, phase_summary
from harness.wire.case_result import CaseResult
from kernels.compile_clock import compile_seconds, compiling, load_seconds, loading
from hang_guard import HANG_GUARD_S

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = Path(__file__).resolve().parent / "scenarios"


def test_a_cpu_run_reports_every_phase_per_rank_and_in_the_footer(tmp_path):
    cmd = [sys.executable, "-m", "harness", "validate", "--launcher", "cpu", "--scenario", "tiny", "--world", "2",
           "--scenario-root", str(SCENARIOS), "--run-dir", str(tmp_path / "run"), "--no-store"]
    env = dict(os.environ, RANKCHECK_CACHE_DIR=str(tmp_path / "cache"))
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=HANG_GUARD_S, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    ranks = [json.loads(p.read_text()) for p in sorted((tmp_path / "run").glob("cases/*/w2/rank*.result.json"))]
    assert len(ranks) == 2
    for res in ranks:
        assert set(res["phases"]) == set(PHASES), res["phases"]
        assert all(seconds >= 0 for seconds in res["phases"].values()), res["phases"]
        assert res["phases"]["start"] > 0  # the job's first case: the process's start-up (torch, the process group)
        assert res["phases"]["compile"] == 0  # the golden implementation compiles nothing
        assert res["phases"]["kernel"] > 0 and res["phases"]["compare"] > 0
        # the phases partition (part of) the case's time: nothing is counted twice
        assert sum(v for k, v in res["phases"].items() if k != "start") <= res["time_s"]
    (case,) = json.loads((tmp_path / "run" / "report.json").read_text())["results"]
    assert case["phases"] == {name: max(r["phases"][name] for r in ranks) for name in PHASES}
    (line,) = [line for line in proc.stdout.splitlines() if line.startswith("# Phases : ")]
    assert all(f"{name} " in line for name in PHASES), line


class FakeClock:
    """A monotonic clock that moves only when told (``advance``), standing in for ``time`` in the clocked modules."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        """The fake monotonic time."""
        return self.now

    def time(self) -> float:
        """Wall time is real: only the durations are faked."""
        return time.time()

    def advance(self, seconds: float) -> None:
        """Let ``seconds`` pass."""
        self.now += seconds


@pytest.fixture
def fake_clock(monkeypatch) -> FakeClock:
    """The phase clock and the compile clock read a fake monotonic clock."""
    import kernels.compile_clock

    clock = FakeClock()
    monkeypatch.setattr(phases, "time", clock)
    monkeypatch.setattr(kernels.compile_clock, "time", clock)
    return clock


# The clock's inner phases: the context that marks one and the process-wide seconds it adds to.
INNER_PHASES = {"compile": (compiling, compile_seconds), "load": (loading, load_seconds)}


@pytest.mark.parametrize("own, inner", [
    pytest.param(0.25, [("compile", 3.0)], id="compile"),
    pytest.param(0.5, [("load", 0.25), ("compile", 2.0)], id="load-apart-from-compile"),
])
def test_a_compile_or_load_inside_a_phase_is_counted_as_itself_not_twice(fake_clock, own, inner):
    """``own`` seconds of ``construct`` with each inner phase of ``inner`` in turn: each counts once, apart."""
    clock = PhaseClock(("test", inner[0][0], 1, None))
    before = {name: total() for name, (_, total) in INNER_PHASES.items()}
    with clock.phase("construct"):
        fake_clock.advance(own)
        for name, seconds in inner:
            with INNER_PHASES[name][0]():
                fake_clock.advance(seconds)
    for name, seconds in inner:
        assert INNER_PHASES[name][1]() - before[name] == pytest.approx(seconds), name
        assert clock.seconds[name] == pytest.approx(seconds), name
    assert clock.seconds["construct"] == pytest.approx(own)


KERNEL_FAMILIES = ("kernels.allreduce_mhc.variants", "kernels.markov_fused.host", "kernels.markov_sharded.host")


@pytest.mark.parametrize("module_name", KERNEL_FAMILIES)
def test_each_kernel_familys_compile_is_counted(monkeypatch, module_name, fake_clock):
    """Every family's ``cute.compile`` call adds to the compile seconds (the compile itself stubbed: no DSL work)."""
    import importlib

    import cutlass.cute

    from kernels import compile as compile_mechanism

    module = importlib.import_module(module_name)
    compiled = []

    def slow_compile(kernel, *args, options=None):
        """Stand in for a compile that takes 2 s (of the fake clock)."""
        fake_clock.advance(2.0)
        compiled.append(kernel)
        return object()

    monkeypatch.setattr(cutlass.cute, "compile", slow_compile)
    monkeypatch.setattr(compile_mechanism, "_COMPILED", {})  # the one cache every family compiles through
    _, thunk, _ = module.compile_variants("sm_90a")[0]
    before = compile_seconds()
    thunk("--gpu-arch sm_90a")
    assert len(compiled) == 1
    assert compile_seconds() - before == pytest.approx(2.0)


def test_a_phase_that_raises_still_counts_its_time(fake_clock):
    clock = PhaseClock(("test", "raises", 1, None))
    with pytest.raises(RuntimeError), clock.phase("kernel"):
        fake_clock.advance(1.5)
        raise RuntimeError("launch failed")
    assert clock.seconds["kernel"] == pytest.approx(1.5)


def test_an_unknown_phase_is_refused():
    with pytest.raises(ValueError, match="phase must be one of"), PhaseClock(("t", "u", 1, None)).phase("launch"):
        pass


def test_only_the_first_case_of_a_process_counts_start_up(monkeypatch):
    monkeypatch.setattr(phases, "_first_case", {})
    first, again, later = (PhaseClock(key).seconds["start"] for key in (("f", "a", 2, None), ("f", "a", 2, None),
                                                                      ("f", "b", 2, None)))
    assert first > 0 and again > 0  # every rank (thread) of the first case
    assert later == 0


def test_slowest_keeps_each_phases_largest_rank_in_phase_order():
    merged = slowest([{"kernel": 1.0, "reference": 5.0}, None, {"reference": 2.0, "kernel": 3.0, "inputs": 0.5}])
    assert merged == {"inputs": 0.5, "kernel": 3.0, "reference": 5.0}
    assert list(merged) == ["inputs", "kernel", "reference"]


def result(scenario, **phase_seconds):
    """A passing CaseResult with the given phase seconds."""
    return CaseResult("markov_sharded", scenario, 2, "cpu", "pass", phases=phase_seconds)


def test_phase_summary_sums_over_cases_largest_first():
    summary = phase_summary([result("a", kernel=1.0, reference=10.0), result("b", kernel=2.5, inputs=4.0),
                             CaseResult("markov_sharded", "c", 2, "store", "pass")])
    assert summary == "reference 10.0 s  inputs 4.0 s  kernel 3.5 s"
    assert phase_summary([]) == "none recorded"


def test_the_footer_has_the_phase_line_and_the_json_the_phases(tmp_path):
    js = tmp_path / "r.json"
    with Report(header="h", json_path=js, stream=io.StringIO(), live=False) as report:
        report.add(result("a", reference=3.0, kernel=1.0))
    assert "# Phases : reference 3.0 s  kernel 1.0 s" in report.footer().splitlines()
    assert json.loads(js.read_text())["results"][0]["phases"] == {"reference": 3.0, "kernel": 1.0}


def test_start_up_counts_from_the_jobs_start_when_that_is_earlier(monkeypatch):
    monkeypatch.setattr(phases, "_first_case", {})
    monkeypatch.setattr(phases, "_process_started", time.monotonic())
    phases.count_start_up_from(time.time() + 60)  # a later time (a clock step) never shortens the start-up
    assert phases.startup_seconds(("j", "a", 1, None)) < 5
    monkeypatch.setattr(phases, "_first_case", {})
    phases.count_start_up_from(time.time() - 30)
    assert 30 <= phases.startup_seconds(("j", "a", 1, None)) < 35
