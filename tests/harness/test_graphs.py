"""harness.rank.graphs and the worker's graph choice, on the CPU.

A CUDA graph needs a GPU; here ``GraphLaunches._capture`` is replaced by a
stand-in whose ``replay`` calls the captured launch again, which is what a
replay does to memory: the launch reads the label's buffers as they are now.
So the tests check what the harness is responsible for: one capture per
label, inputs copied into the captured buffers before each replay, the
outputs are the captured ones, and a launch that differs from its capture is
refused. The real capture runs in the GPU validation (`harness validate
--launcher virtual`, scenarios with ``graph: {capture: true}``).
"""

from __future__ import annotations

import pytest
import torch

from harness.rank import graphs as graphs_mod
from harness.rank.graphs import GraphLaunches, capture_problem
from harness.launch.verdict import graph_verdict
from harness.rank.case_run import _graph_launches
from harness.wire.rank_result import RankResult


class ReplayByCalling:
    """Stand-in for a captured graph: replay runs the captured launch again."""

    def __init__(self, launch):
        self.launch = launch
        self.replays = 0

    def replay(self):
        self.replays += 1
        self.launch()


def fake_capture(self, launch):
    """Like ``GraphLaunches._capture`` without CUDA: the outputs of one run, and a replayable stand-in."""
    outputs = launch()
    return ReplayByCalling(launch), outputs


class Doubler:
    """A system writing ``2 * x + bias`` into an output tensor per shape (as a graph's pool keeps its outputs)."""

    def __init__(self, problem=None):
        self.launches = 0
        self.problem = problem
        self.outs = {}
        self.device = torch.device("cpu")

    def graph_capture_problem(self):
        return self.problem

    def launch(self, inputs, params):
        self.launches += 1
        out = self.outs.setdefault(tuple(inputs["x"].shape), torch.empty_like(inputs["x"]))
        out.copy_(inputs["x"] * 2 + params.get("bias", 0))
        return {"y": out}

    def state(self):
        return {"launches": self.launches}


@pytest.fixture
def cpu_graphs(monkeypatch):
    monkeypatch.setattr(graphs_mod.GraphLaunches, "_capture", fake_capture)


def test_each_label_captures_once_and_replays_read_the_new_inputs(cpu_graphs):
    system = Doubler()
    runner = GraphLaunches(system, torch.device("cpu"))
    first = runner.launch("rows=2", {"x": torch.tensor([1.0, 2.0])}, {})
    assert first["y"].tolist() == [2.0, 4.0]
    again = runner.launch("rows=2", {"x": torch.tensor([5.0, -1.0])}, {})
    assert again is first  # the captured output tensors, rewritten by the replay
    assert again["y"].tolist() == [10.0, -2.0]
    other = runner.launch("rows=3", {"x": torch.tensor([1.0, 1.0, 1.0])}, {})
    assert other["y"].tolist() == [2.0, 2.0, 2.0]
    assert sorted(runner.captured) == ["rows=2", "rows=3"]
    assert runner.summary() == {"mode": "captured", "labels": ["rows=2", "rows=3"], "replays": 3}


def test_the_callers_inputs_are_never_written(cpu_graphs):
    runner = GraphLaunches(Doubler(), torch.device("cpu"))
    x = torch.tensor([3.0, 4.0])
    runner.launch("a", {"x": x}, {})
    runner.launch("a", {"x": torch.tensor([0.0, 0.0])}, {})
    assert x.tolist() == [3.0, 4.0]


@pytest.mark.parametrize("inputs, params, needle", [
    ({"x": torch.tensor([1.0, 2.0, 3.0])}, {}, "x is"),
    ({"x": torch.tensor([1, 2])}, {}, "x is"),
    ({"x": torch.tensor([1.0, 2.0])}, {"bias": 1}, "params is"),
    ({"x": torch.tensor([1.0, 2.0]), "n": 3}, {}, "n is"),
])
def test_a_launch_unlike_its_capture_is_refused_naming_the_input(cpu_graphs, inputs, params, needle):
    runner = GraphLaunches(Doubler(), torch.device("cpu"))
    runner.launch("g", {"x": torch.tensor([1.0, 2.0])}, {})
    with pytest.raises(ValueError, match=rf"graph 'g': {needle}"):
        runner.launch("g", inputs, params)


def test_capture_problem_is_asked_of_the_wrapped_system():
    class Wrapper:
        def __init__(self, system):
            self.system = system

    assert capture_problem(Wrapper(Doubler())) is None
    assert capture_problem(Doubler("host gather")) == "host gather"
    assert "does not declare" in capture_problem(object())


class Planned:
    def __init__(self, graph):
        self.graph = graph


def test_worker_captures_only_kernel_systems_that_can_be(cpu_graphs):
    plan = [Planned("rows=1"), Planned("rows=1")]
    runner, note = _graph_launches("kernel", Doubler(), None, plan)
    assert isinstance(runner, GraphLaunches) and note is None
    runner, note = _graph_launches("kernel", Doubler("tp 2: host gather"), None, plan)
    assert runner is None and note == {"mode": "not-captured", "reason": "tp 2: host gather"}
    runner, note = _graph_launches("golden", Doubler(), None, plan)
    assert runner is None and note["mode"] == "not-available" and "golden" in note["reason"]
    assert _graph_launches("kernel", Doubler(), None, [Planned(None)]) == (None, None)
    runner, note = _graph_launches("kernel", Doubler(), None, plan, "the adapter's bias syncs")
    assert runner is None and note == {"mode": "not-captured", "reason": "the adapter's bias syncs"}


def test_the_verdict_says_how_graphs_ran():
    captured = {0: RankResult(graph={"mode": "captured", "labels": ["a", "b"], "replays": 4}),
                1: RankResult(graph={"mode": "captured", "labels": ["a", "b"], "replays": 4})}
    assert graph_verdict(captured) == (None, "CUDA graphs captured (2 labels, 4 graphs over the ranks), 8 replays")
    refused = {0: RankResult(graph={"mode": "captured", "labels": ["a"], "replays": 1}),
               1: RankResult(graph={"mode": "not-captured", "reason": "why"})}
    assert graph_verdict(refused) == ("fail", "the scenario asks for CUDA graphs, not captured (ranks [1]): why")
    golden = {0: RankResult(graph={"mode": "not-available", "reason": "no graphs"})}
    assert graph_verdict(golden) == ("not-available", "CUDA graphs not available (ranks [0]): no graphs")
    assert graph_verdict({0: RankResult()}) == (None, "")
