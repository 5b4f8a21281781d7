"""A scenario that asks for CUDA graphs is never PASS without them, and the report counts the graphs.

The rule (``harness.launch.verdict.graph_verdict``): a graph case whose
kernel system could not be captured is FAIL with the reason (its launches
ran eagerly: what the scenario names was not tested); one the platform
cannot capture (the golden implementation on the CPU launcher, no CUDA
graphs) is NOT-AVAILABLE with the reason; wrong bits FAIL either way. The
cpu-launcher paths run real processes (torchrun, gloo, the golden system);
the capture-refused path needs a kernel system, so it goes through the
worker's graph choice with a fake system and the launcher's verdict.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

from graph_fault import PLANTED

from harness.rank.case_run import _graph_launches
from harness.families import PLANTED_SYSTEM_VAR, catalog
from harness.launch.records import CaseEnd
from harness.launch.verdict import judge
from harness.wire.rank_result import RankResult
from harness.reports.report import Report, graph_totals
from harness.wire.case_result import CaseResult
from hang_guard import HANG_GUARD_S

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = Path(__file__).resolve().parent / "graph_scenarios"
TINY_GRAPH = SCENARIOS / "markov_sharded" / "tiny_graph.yaml"


def validate_graph_case(tmp_path: Path, env_extra: dict | None = None) -> tuple[subprocess.CompletedProcess, dict]:
    """``harness validate`` of tiny_graph at worlds 1 and 2 on the cpu launcher; (process, JSON report)."""
    env = {k: v for k, v in os.environ.items() if k != PLANTED_SYSTEM_VAR} | (env_extra or {})
    cmd = [sys.executable, "-m", "harness", "validate", "--launcher", "cpu", "--scenario", "tiny_graph",
           "--world", "1", "2", "--scenario-root", str(SCENARIOS), "--run-dir", str(tmp_path), "--no-store"]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=HANG_GUARD_S, env=env)
    return proc, json.loads((tmp_path / "report.json").read_text())


def test_cpu_launcher_graph_cases_are_not_available_after_their_bits_were_compared(tmp_path):
    proc, doc = validate_graph_case(tmp_path)
    assert proc.returncode == 3, proc.stdout + proc.stderr  # every case not available: not OK
    assert sorted((r["world"], r["status"]) for r in doc["results"]) == [(1, "not-available"), (2, "not-available")]
    for r in doc["results"]:
        assert r["detail"].startswith("CUDA graphs not available"), r["detail"]
        assert "no CUDA graphs" in r["detail"] and "bits equal over 6 launches" in r["detail"]
        assert r["graphs"] == {"mode": "not-available", "captured": 0, "replays": 0}
    assert doc["summary"]["graphs"] == {"cases": 2, "captured": 0, "replays": 0, "not_captured": 0,
                                        "not_available": 2}
    props = {p.get("name"): p.get("value")
             for p in ET.parse(tmp_path / "report.xml").getroot().iter("property")}
    assert (props["graphs.cases"], props["graphs.not_available"], props["graphs.captured"]) == ("2", "2", "0")
    assert "# Graphs : 0 captured  0 replays  over 2 graph cases  not captured 0  not available 2" in proc.stdout


def test_cpu_launcher_graph_case_with_wrong_bits_fails(tmp_path):
    proc, doc = validate_graph_case(tmp_path, {PLANTED_SYSTEM_VAR: PLANTED})
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert [r["status"] for r in doc["results"]] == ["fail", "fail"]
    assert all(r["mismatch_count"] >= 1 and "draft_tokens" in r["first_mismatch"] for r in doc["results"])


def judge_equal_ranks(scenario, note: dict):
    """The verdict of a completed kernel case at world 2 whose ranks both agree bit for bit with graph note ``note``."""
    equal_bits = {"mismatch_count": 0, "max_ulps": 0, "first": []}
    results = {rank: RankResult(rank=rank, status="ok", graph=note, comparison=equal_bits, launches_done=3)
               for rank in (0, 1)}
    return judge(catalog.case_of(scenario), world=2, launcher="virtual", impl="kernel", group=None,
                 results=results, end=CaseEnd(completed=True), diagnosis=None, time_s=1.0)


class RefusesCapture:
    """A kernel system that cannot be captured (the fake of a system whose exchange goes through the host)."""

    device = None

    def graph_capture_problem(self) -> str:
        """Why it cannot be captured."""
        return "tp 2: the gather goes through the host"


def test_a_kernel_system_that_refuses_capture_fails_with_its_reason():
    scenario = catalog.load(TINY_GRAPH)
    _, _, launches = catalog.plan(scenario, 1, 0)
    runner, note = _graph_launches("kernel", RefusesCapture(), None, launches)
    assert runner is None and note == {"mode": "not-captured", "reason": "tp 2: the gather goes through the host"}
    verdict = judge_equal_ranks(scenario, note)
    assert verdict.status == "fail"
    assert verdict.detail.startswith("the scenario asks for CUDA graphs, not captured (ranks [0, 1]): tp 2: the "
                                     "gather goes through the host"), verdict.detail
    assert verdict.graphs == {"mode": "not-captured", "captured": 0, "replays": 0}


def test_captured_graphs_pass_and_are_counted_per_rank():
    scenario = catalog.load(TINY_GRAPH)
    note = {"mode": "captured", "labels": ["rows=2", "rows=3"], "replays": 3}
    verdict = judge_equal_ranks(scenario, note)
    assert verdict.status == "pass"
    assert "CUDA graphs captured (2 labels, 4 graphs over the ranks), 6 replays" in verdict.detail
    assert verdict.graphs == {"mode": "captured", "captured": 4, "replays": 6}


def test_the_report_adds_up_graphs_in_json_junit_and_footer(tmp_path):
    results = [
        CaseResult("markov_fused", "graph_replay", 1, "virtual", "pass",
                   graphs={"mode": "captured", "captured": 2, "replays": 3}),
        CaseResult("markov_fused", "graph_replay", 2, "virtual", "fail",
                   graphs={"mode": "not-captured", "captured": 0, "replays": 0}),
        CaseResult("markov_fused", "basic", 1, "virtual", "pass"),
    ]
    assert graph_totals(results) == {"cases": 2, "captured": 2, "replays": 3, "not_captured": 1, "not_available": 0}
    out = tmp_path / "out.txt"
    with out.open("w") as stream:
        with Report(header="h", junit_path=tmp_path / "r.xml", json_path=tmp_path / "r.json", stream=stream,
                    live=False, provenance={}) as report:
            for r in results:
                report.add(r)
    assert json.loads((tmp_path / "r.json").read_text())["summary"]["graphs"]["replays"] == 3
    props = {p.get("name"): p.get("value") for p in ET.parse(tmp_path / "r.xml").getroot().iter("property")}
    assert (props["graphs.captured"], props["graphs.not_captured"]) == ("2", "1")
    assert "# Graphs : 2 captured  3 replays  over 2 graph cases  not captured 1  not available 0" in out.read_text()
